"""`experiments/distillation.py` (issue 17) refuses counts it cannot run, naming the option, before any
work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "distillation.py"


@pytest.mark.parametrize(
    ("option", "value", "low"),
    [
        ("--first-seed", "-1", 0),
        ("--finetune-seeds", "0", 1),
        ("--finetune-steps", "0", 1),
        ("--jobs", "0", 1),
    ],
)
def test_bad_counts_are_refused(tmp_path: Path, option: str, value: str, low: int) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), option, value, "--output", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert f"{option}: expected an integer >= {low}, got {value}" in proc.stderr
    assert not out.exists()  # refused before the teacher's pre-training or any directory
