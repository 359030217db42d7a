"""The repository speaks only of the project: no tracked text file names the project's working history.

Numbered work periods and the tracker's items mean nothing to a reader of the repository; machines are named
by their hardware and targets by what they are. Another project's tracker may be cited (with its name or a
GitHub address on the same line), and words such as ONNX Runtime's ``InferenceSession`` are not history.
The words are assembled from pieces below, so that this file does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = "tests/test_project_words.py"
PERIOD = "ses" + "sion"  # a numbered work period
ITEM = "is" + "sue"  # a tracker item

HISTORY = re.compile(
    rf"\b{PERIOD}s? \d+"
    rf"|\b(?:later|these|earlier|this|that) {PERIOD}s?\b"
    rf"|\b{PERIOD}'s\b"
    rf"|\bthe {ITEM}\b"
    rf"|\({ITEM}\b"
    r"|\bwave \d+",
    re.IGNORECASE,
)
# a numbered tracker item, or its possessive: history unless the line names another project's tracker
TRACKER_ITEM = re.compile(rf"\b{ITEM}s? ?#?\d+|\b{ITEM}'?s\b", re.IGNORECASE)
OTHER_TRACKER = re.compile(r"github|google-research/", re.IGNORECASE)


def names_history(line: str) -> bool:
    """Whether ``line`` names the project's working history (a work period or a tracker item)."""
    if HISTORY.search(line):
        return True
    return bool(TRACKER_ITEM.search(line)) and not OTHER_TRACKER.search(line)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if not name or name == THIS or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        files.append(path)
    return files


def test_matcher() -> None:
    assert names_history(f"measured in {PERIOD} 22")
    assert names_history(f"the regressions of {ITEM} 12")
    assert names_history(f"on the later {PERIOD}s' AMD EPYC")
    assert names_history(f"the {ITEM}'s target")
    assert not names_history("self.session = ort.InferenceSession(path)")
    assert not names_history(f"google-research/bert's GitHub {ITEM}s #117 and #612")
    assert not names_history(f"once per test {PERIOD}")  # pytest's own word for a run


def test_no_project_history_in_tracked_files() -> None:
    files = tracked_text_files()
    assert files, "git ls-files found nothing"
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if names_history(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "lines naming the project's history:\n" + "\n".join(found)
