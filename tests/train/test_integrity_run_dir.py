"""The run-directory rule (attnlab.train.run_dir): an output directory holding another run is refused unless
resume or overwrite; overwrite removes only that command's outputs; run.json is atomic and a broken one is
named by file, line and column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.train.run_dir import RUN_FILE, RunDirectoryError, prepare_run_directory, read_run_file

OUTPUTS = ["checkpoints", "model", "tokenizer.json"]


def _claim(path: Path, **kw):
    return prepare_run_directory(path, "cmd", OUTPUTS, log=lambda m: None, **kw)


def _saved_model(path: Path) -> None:
    (path / "model").mkdir(parents=True, exist_ok=True)
    (path / "model" / "model.safetensors").write_bytes(b"weights")


def test_a_fresh_directory_gets_a_run_id_in_run_json(tmp_path: Path) -> None:
    run = _claim(tmp_path / "out", settings={"lr": 1e-3})
    assert not run.resuming and len(run.run_id) == 12
    info = json.loads((tmp_path / "out" / RUN_FILE).read_text())
    assert info["run_id"] == run.run_id and info["command"] == "cmd" and info["settings"] == {"lr": 1e-3}
    assert [p.name for p in (tmp_path / "out").iterdir()] == [RUN_FILE]  # no temporary left behind


def test_another_run_is_refused_then_resumed_or_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _claim(out)
    (out / "checkpoints" / "step-000001").mkdir(parents=True)
    (out / "checkpoints" / "step-000001" / "trainer_state.json").write_text("{}")
    (out / "tokenizer.json").write_text("{}")
    (out / "notes.txt").write_text("mine")  # not an output of the command: never touched
    with pytest.raises(
        RunDirectoryError, match=rf"holds an earlier run \(run id {first.run_id}, run\.json, "
    ):
        _claim(out)
    with pytest.raises(RunDirectoryError, match="not both"):
        _claim(out, resume=True, overwrite=True)

    resumed = _claim(out, resume=True)
    assert resumed.resuming and resumed.run_id == first.run_id
    assert len(json.loads((out / RUN_FILE).read_text())["resumed"]) == 1

    fresh = _claim(out, overwrite=True)
    assert not fresh.resuming and fresh.run_id != first.run_id
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", RUN_FILE]


def test_outputs_without_run_json_count_as_an_earlier_run(tmp_path: Path) -> None:
    _saved_model(tmp_path)
    with pytest.raises(RunDirectoryError, match=r"holds an earlier run \(model\)"):
        _claim(tmp_path)
    assert _claim(tmp_path, resume=True).resuming


def test_a_broken_run_json_is_named_with_line_and_column(tmp_path: Path) -> None:
    _saved_model(tmp_path)
    (tmp_path / RUN_FILE).write_text('{\n  "run_id": \n}')
    with pytest.raises(RunDirectoryError, match=r"run\.json:3:1: invalid JSON"):
        read_run_file(tmp_path)
    with pytest.raises(RunDirectoryError, match=r"run\.json:3:1: invalid JSON"):
        _claim(tmp_path, resume=True)
    assert not _claim(tmp_path, overwrite=True).resuming  # --overwrite replaces it without reading it


def test_resuming_with_other_settings_is_refused_and_names_each(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _claim(out, settings={"pooling": "cls", "epochs": 3.0, "sizes": (1, 2)})
    _saved_model(out)
    with pytest.raises(RunDirectoryError) as e:
        _claim(out, resume=True, settings={"pooling": "mean", "epochs": 3.0, "sizes": (1, 2), "new": 1})
    assert str(e.value).startswith(f"{out / RUN_FILE}: --resume with other settings")
    assert "pooling: 'cls' when the run started, 'mean' now" in str(e.value)
    assert "epochs" not in str(e.value) and "new" not in str(e.value)  # not recorded then: not compared
    assert "sizes" not in str(e.value)  # a tuple equals the list run.json holds
    assert _claim(out, resume=True, settings={"pooling": "cls", "epochs": 3.0, "sizes": (1, 2)}).resuming
    # an older run.json without settings is not compared
    info = json.loads((out / RUN_FILE).read_text())
    del info["settings"]
    (out / RUN_FILE).write_text(json.dumps(info))
    assert _claim(out, resume=True, settings={"pooling": "mean"}).run_id == first.run_id


@pytest.mark.parametrize("resume", [False, True])
def test_a_run_that_stopped_before_saving_is_not_an_earlier_run(tmp_path: Path, resume: bool) -> None:
    """A run that failed before training (a bad option, an unreadable corpus) leaves run.json and empty
    folders: the next run removes them and starts, with or without --resume; the user's files stay."""
    out = tmp_path / "out"
    first = _claim(out, settings={"lr": 1.0})
    (out / "checkpoints" / ".tmp-step-000001-ab12").mkdir(parents=True)  # a save that never finished
    (out / "tokenizer.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    said: list[str] = []
    run = prepare_run_directory(out, "cmd", OUTPUTS, resume=resume, log=said.append, settings={"lr": 2.0})
    assert not run.resuming and run.run_id != first.run_id
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", RUN_FILE]
    assert "stopped before saving a checkpoint or a model" in said[0]
    assert json.loads((out / RUN_FILE).read_text())["settings"] == {"lr": 2.0}


def test_pretrain_after_a_run_that_failed_before_training_starts(tmp_path: Path, capsys) -> None:
    import random

    from attnlab.cli import main

    one = tmp_path / "one.txt"
    one.write_text("One sentence here.\n")
    rng = random.Random(0)
    words = "the a cat dog reads writes file book on under".split()
    lines = [" ".join(rng.choice(words) for _ in range(10)) + "." for _ in range(80)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join("\n".join(lines[i : i + 10]) for i in range(0, 80, 10)))
    out = tmp_path / "out"
    args = ["--output", str(out), "--vocab-size", "60", "--max-steps", "1", "--batch-size", "4",
            "--max-length", "32", "--workers", "1", "--no-progress", "--eval-examples", "8",
            "--set", "model.hidden_size=32", "--set", "model.num_layers=1", "--set", "model.num_heads=2",
            "--set", "model.intermediate_size=64", "--set", "trainer.tensorboard=false"]  # fmt: skip
    assert main(["pretrain", "--corpus", str(one), *args]) == 2  # too few documents: stops before training
    assert "at least 4 are needed" in capsys.readouterr().err and (out / RUN_FILE).is_file()
    assert main(["pretrain", "--corpus", str(corpus), *args]) == 0  # not blocked by what it left
    assert "stopped before saving a checkpoint or a model" in capsys.readouterr().out
    assert main(["pretrain", "--corpus", str(corpus), *args]) == 2  # a run that saved a model: blocked
    assert "holds an earlier run" in capsys.readouterr().err
