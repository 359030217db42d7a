"""``attnlab pretrain --parallel fsdp`` and its options refused, with the way out, before anything is
written, when the run is not launched by torchrun (the sharded runs: tests/train/test_train_fsdp.py)."""

from __future__ import annotations

import pytest

from attnlab.cli import main


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--parallel", "fsdp"], "launch with torchrun --nproc-per-node N -m attnlab pretrain"),
        (["--activation-checkpointing"], "--activation-checkpointing is an option of --parallel fsdp"),
        (["--parallel", "ddp", "--cpu-offload"], "--cpu-offload is an option of --parallel fsdp"),
    ],
)
def test_pretrain_parallel_options_without_torchrun_are_one_clear_error(tmp_path, capsys, options, expected):
    out = tmp_path / "run"
    code, err = _run(["pretrain", "--output", out, "--max-steps", "1", *options], capsys)
    assert code != 0
    assert expected in err
    assert not out.exists()  # refused before anything was written


def test_pretrain_dry_run_prints_the_memory_per_process_of_ddp_and_fsdp(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = [
        "pretrain",
        "--dry-run",
        "--preset",
        "bert-base-uncased",
        "--world-size",
        "4",
        "--batch-size",
        "8",
    ]
    printed = {}
    for parallel in ("ddp", "fsdp"):
        assert main([*common, "--batch-size", "8", "--max-length", "128", "--parallel", parallel]) == 0
        printed[parallel] = capsys.readouterr().out
    assert "110,104,890 parameters, ddp over 4 process(es)" in printed["ddp"]
    assert "optimizer state (AdamW)   840.0 MiB" in printed["ddp"]
    assert "optimizer state (AdamW)   210.0 MiB" in printed["fsdp"]  # a quarter
    assert list(tmp_path.iterdir()) == []  # nothing written
