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
