"""`experiments/distillation.py` refuses counts it cannot run, naming the option, before any
work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "distillation.py"


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
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"{option}: expected an integer >= {low}, got {value}" in proc.stderr
    assert not out.exists()  # refused before the teacher's pre-training or any directory


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("distillation_experiment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_max_epochs_caps_steps_on_small_tasks() -> None:
    capped = _script().capped_steps
    assert capped(500, 2490, None) == 500  # no cap
    assert capped(500, 2490, 3.0) == 3 * 78  # RTE: 78 batches of 32 an epoch, 234 steps
    assert capped(500, 67349, 3.0) == 500  # SST-2: the step budget is the smaller
    assert capped(500, 10, 0.5) == 1  # never below one step


def _results(tmp_path: Path, name: str, seeds: list[int], bump: float, **args: str) -> Path:
    """A results.json as the script writes it: two models, two tasks, ``seeds`` fine-tuning seeds."""
    import json

    glue = {
        model: {
            task: {"score": 0.0, "scores": [base + bump + k for k in seeds], "seeds": seeds, "steps": 5}
            for task, base in (("sst2", 70.0), ("rte", 50.0))
        }
        for model in ("teacher", "distilled")
    }
    run_args = {"teacher": "t", "tasks": "['sst2', 'rte']", "finetune_steps": "5", **args}
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"args": run_args, "glue": glue, "speed": {}, "minutes": 1.5}))
    return d


def test_combine_pools_seeds_across_runs(tmp_path: Path) -> None:
    combine = _script().combine
    a = _results(tmp_path, "a", [0, 1], 0.0)
    b = _results(tmp_path, "b", [2], 1.0)
    pooled = combine([a, b], ["sst2", "rte"])
    r = pooled["glue"]["distilled"]["sst2"]
    assert r["seeds"] == [0, 1, 2]
    assert r["scores"] == [70.0, 71.0, 73.0]  # seed 2 from run b, bumped by 1
    assert r["score"] == pytest.approx(214.0 / 3)
    assert pooled["minutes_each"] == [1.5, 1.5]


def test_combine_refuses_repeated_seeds_and_different_runs(tmp_path: Path) -> None:
    combine = _script().combine
    a = _results(tmp_path, "a", [0, 1], 0.0)
    with pytest.raises(SystemExit, match=r"seed 1 of teacher on sst2 is in an earlier run too"):
        combine([a, _results(tmp_path, "b", [1], 0.0)], ["sst2"])
    with pytest.raises(SystemExit, match=r"finetune_steps is 9, but 5 in"):
        combine([a, _results(tmp_path, "c", [2], 0.0, finetune_steps="9")], ["sst2"])
    with pytest.raises(SystemExit, match=r"no cola result for teacher"):
        combine([a, _results(tmp_path, "d", [3], 0.0)], ["cola"])
    with pytest.raises(SystemExit, match=r"results.json: no such file"):
        combine([a, tmp_path / "missing"], ["sst2"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"bad/results.json: expected this script's results"):
        combine([a, bad], ["sst2"])
    (bad / "results.json").write_text('{"args": {}, "glue": {"teacher": {}}, "speed": {}}')
    with pytest.raises(SystemExit, match=r"bad/results.json: no GLUE results for the distilled model"):
        combine([a, bad], ["sst2"])
    (bad / "results.json").write_text("{not json")
    with pytest.raises(SystemExit, match=r"bad/results.json: not a JSON results file"):
        combine([a, bad], ["sst2"])


def test_combine_reads_runs_written_before_seeds_were_recorded(tmp_path: Path) -> None:
    import json

    old = _results(tmp_path, "old", [0], 0.0, first_seed="1", finetune_seeds="1")
    data = json.loads((old / "results.json").read_text())
    for model in data["glue"].values():
        for task in model.values():
            del task["seeds"]
    (old / "results.json").write_text(json.dumps(data))
    pooled = _script().combine([_results(tmp_path, "new", [0], 0.0), old], ["sst2"])
    assert pooled["glue"]["teacher"]["sst2"]["seeds"] == [0, 1]  # the old run's --first-seed 1


def test_non_positive_epoch_cap_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--finetune-max-epochs", "0", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--finetune-max-epochs: expected a number > 0, got 0" in proc.stderr
    assert not out.exists()
