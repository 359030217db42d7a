"""Written files get the modes ``open(path, "w")`` gives (0666 less the umask) and written directories
those ``mkdir`` gives (0777 less the umask), though each is written to a temporary name and renamed."""

from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path

import pytest
import torch

from attnlab.atomic import atomic_path, atomic_write, write_json_atomic
from attnlab.io.format import write_safetensors_atomic
from attnlab.train.checkpoint import atomic_directory, save_checkpoint, save_model

UMASKS = (0o022, 0o027)


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def wrong_modes(root: Path, umask: int) -> list[str]:
    """``path: mode, expected mode`` for every file and folder under ``root`` (itself excluded) whose
    permission bits differ from what ``open``/``mkdir`` give under ``umask``."""
    wrong = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        if mode != expected:
            wrong.append(f"{path.relative_to(root)}: {mode:o}, expected {expected:o}")
    return wrong


def test_atomic_writers_give_the_umask_modes(tmp_path: Path, umask: int) -> None:
    write_json_atomic({"v": 1}, tmp_path / "a.json")
    with atomic_write(tmp_path / "b.bin", "wb") as f:
        f.write(b"xyz")
    with atomic_path(tmp_path / "c.txt") as tmp:
        tmp.write_text("c")
    write_safetensors_atomic({"w": torch.zeros(2)}, tmp_path / "d.safetensors")  # save_file writes 0600
    assert wrong_modes(tmp_path, umask) == []


def test_checkpoints_and_copied_directories_give_the_umask_modes(tmp_path: Path, umask: int) -> None:
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "checkpoints" / "step-000001", model, {"step": torch.tensor(1)}, {"step": 1})
    save_model(model, tmp_path / "alone.safetensors")

    def copy(tmp: Path) -> None:  # as finetune's best/ is made
        (tmp / "sub").mkdir()
        (tmp / "sub" / "f.txt").write_text("f")

    atomic_directory(tmp_path / "best", copy)
    assert (tmp_path / "best" / "sub" / "f.txt").is_file()
    assert wrong_modes(tmp_path, umask) == []


WORDS = "the a cat dog reads writes file book on under big small red".split()


@pytest.mark.slow
@pytest.mark.parametrize("mask", UMASKS, ids=lambda m: f"umask{m:03o}")
def test_pretrain_finetune_export_write_with_the_umask_modes(tmp_path: Path, mask: int, capsys) -> None:
    pytest.importorskip("onnx")
    from attnlab.cli import main

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(10)) + "." for _ in range(80)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join("\n".join(lines[i : i + 10]) for i in range(0, 80, 10)))
    data = tmp_path / "data"
    data.mkdir()
    rows = "".join(f"a {w} film,{int(w == 'big')}\n" for w in ["big", "small"] * 8)
    for split in ("train", "dev"):
        (data / f"{split}.csv").write_text("sentence,label\n" + rows, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    old = os.umask(mask)
    try:
        pre = [
            "pretrain", "--corpus", str(corpus), "--output", str(out / "pre"), "--vocab-size", "60",
            "--max-steps", "2", "--batch-size", "4", "--max-length", "32", "--workers", "1", "--no-progress",
            "--eval-examples", "8", "--set", "model.hidden_size=32", "--set", "model.num_layers=1",
            "--set", "model.num_heads=2", "--set", "model.intermediate_size=64",
        ]  # fmt: skip
        assert main(pre) == 0, capsys.readouterr().err
        fine = [
            "finetune", "--task", "generic", "--data-dir", str(data), "--model", str(out / "pre" / "model"),
            "--output-dir", str(out / "ft"), "--epochs", "1", "--batch-size", "8", "--max-length", "16",
            "--no-progress", "--device", "cpu",
        ]  # fmt: skip
        assert main(fine) == 0, capsys.readouterr().err
        assert main(["export", str(out / "ft" / "best"), "--onnx", str(out / "onnx")]) == 0, (
            capsys.readouterr().err
        )
    finally:
        os.umask(old)
    assert (out / "ft" / "best").is_dir() and any((out / "pre").rglob("step-*"))
    assert wrong_modes(out, mask) == []
    assert json.loads((out / "pre" / "run.json").read_text())["command"] == "pretrain"
