"""The repository speaks only of the project: no tracked text file names the project's working history.

Work periods ("session 22", "the later sessions' machine") and tracker items ("issue 12", "the issue's
target", "wave 2") mean nothing to a reader of the repository; machines are named by their hardware and
targets by what they are. Another project's tracker may be cited ("google-research/bert's GitHub issues
#117 and #612"), and words such as ONNX Runtime's ``InferenceSession`` are not history.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = "tests/test_project_words.py"

HISTORY = re.compile(
    r"\bsessions? \d+"
    r"|\b(?:later|these|earlier|this|that) sessions?\b"
    r"|\bsession's\b"
    r"|\bthe issue\b"
    r"|\(issue\b"
    r"|\bwave \d+",
    re.IGNORECASE,
)
# "issue 12", "issues #3", "issue's", "issues": history unless the line names another project's tracker.
ISSUE = re.compile(r"\bissues? ?#?\d+|\bissue'?s\b", re.IGNORECASE)
OTHER_TRACKER = re.compile(r"github|google-research/", re.IGNORECASE)


def names_history(line: str) -> bool:
    """Whether ``line`` names the project's working history (a work period or a tracker item)."""
    if HISTORY.search(line):
        return True
    return bool(ISSUE.search(line)) and not OTHER_TRACKER.search(line)


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
    assert names_history("measured in session 22")
    assert names_history("the regressions of issue 12")
    assert names_history("on the later sessions' AMD EPYC")
    assert names_history("the issue's target")
    assert not names_history("self.session = ort.InferenceSession(path)")
    assert not names_history("google-research/bert's GitHub issues #117 and #612")
    assert not names_history("once per test session")


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
