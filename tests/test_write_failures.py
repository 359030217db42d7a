"""A write that fails for want of space or permission is one sentence naming the folder (and the space
needed, when known), and the previous checkpoint is left whole."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from attnlab.atomic import WriteError, atomic_write, write_failure, write_json_atomic
from attnlab.cli.errors import user_message
from attnlab.train import checkpoint as ckpt


def _save(root: Path, step: int, model: nn.Module) -> Path:
    state = {"optimizer": {"m": torch.full((64, 64), float(step))}}
    return ckpt.save_checkpoint(root / ckpt.checkpoint_name(step), model, state, {"step": step}, run_id="r")


def _torch_save_that_fills_the_disk(code: int):
    def save(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"PK\x03\x04 half a file")
        raise OSError(code, os.strerror(code))

    return save


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_failed_checkpoint_save_is_one_sentence_and_keeps_the_previous(tmp_path, monkeypatch, code) -> None:
    root = tmp_path / "run" / "checkpoints"
    model = nn.Linear(8, 8)
    first = _save(root, 1, model)
    before = ckpt.read_checkpoint(first)
    monkeypatch.setattr(ckpt.torch, "save", _torch_save_that_fills_the_disk(code))
    with pytest.raises(WriteError) as caught:
        _save(root, 2, model)
    error = caught.value
    assert error.errno == code and error.folder == root
    sentence = str(error)
    assert sentence.startswith(f"cannot write into {root}: ") and "\n" not in sentence
    if code == errno.ENOSPC:
        assert "no space left (it needs about 16.3 KiB" in sentence and "free)" in sentence
    # nothing half-written is left, and the previous checkpoint verifies and reads the same
    assert [p.name for p in root.iterdir()] == [first.name]
    after = ckpt.read_checkpoint(first)
    assert all(torch.equal(before.tensors[k], after.tensors[k]) for k in before.tensors)
    assert torch.equal(before.state["optimizer"]["m"], after.state["optimizer"]["m"])
    # the command's message: the sentence, the last good checkpoint, what to do; no errno jargon
    message = user_message(error, argparse.Namespace(output_dir=str(tmp_path / "run")))
    assert message.startswith(sentence) and f"last good checkpoint: {first}" in message
    assert "Errno" not in message


def test_writers_own_words_for_a_full_disk_become_the_same_error(tmp_path, monkeypatch) -> None:
    safetensors_words = RuntimeError("I/O error: No space left on device (os error 28)")
    assert write_failure(safetensors_words, tmp_path).errno == errno.ENOSPC
    torch_words = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1472 vs 1364")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(3 << 20, 3 << 20, 100))
    full = write_failure(torch_words, tmp_path, needed=5000)
    assert full is not None and full.errno == errno.ENOSPC
    expected = f"cannot write into {tmp_path}: no space left (it needs about 4.9 KiB, 100 bytes free)"
    assert str(full) == expected
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1 << 40, 0, 1 << 40))
    assert write_failure(torch_words, tmp_path, needed=5000) is None  # space enough: a bug, keep the trace
    assert write_failure(ValueError("bad value"), tmp_path) is None
    # a file read elsewhere inside the write (an input) is not this folder's fault
    assert write_failure(PermissionError(errno.EACCES, "Permission denied", "/etc/x"), tmp_path) is None


def test_an_atomic_file_write_that_fails_keeps_the_old_file(tmp_path) -> None:
    target = tmp_path / "a.json"
    write_json_atomic({"v": 1}, target)
    with pytest.raises(WriteError, match=f"cannot write into {tmp_path}: no space left"):
        with atomic_write(target) as f:
            f.write("{")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 1 MiB tmpfs, where the system lets this process mount one (root in a container); else skipped."""
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_real_full_disk_during_a_checkpoint_save(tiny_tmpfs) -> None:
    root = tiny_tmpfs / "checkpoints"
    small = nn.Linear(16, 16)
    first = _save(root, 1, small)
    with pytest.raises(WriteError) as caught:  # 1.4 MiB of weights: more than is there
        _save(root, 2, nn.Linear(600, 600))
    assert caught.value.errno == errno.ENOSPC and "it needs about 1.4 MiB" in str(caught.value)
    assert [p.name for p in root.iterdir()] == [first.name]
    ckpt.verify_checkpoint(first)


def test_the_message_finds_the_last_checkpoint_one_folder_down(tmp_path) -> None:
    """pretrain keeps its checkpoints in OUT/train/checkpoints, finetune in OUT/lr*-seed*/checkpoints."""
    model = nn.Linear(2, 2)
    first = _save(tmp_path / "out" / "train" / "checkpoints", 3, model)
    error = WriteError(errno.ENOSPC, tmp_path / "out" / "train" / "checkpoints", needed=10, free=1)
    message = user_message(error, argparse.Namespace(output=str(tmp_path / "out")))
    assert f"last good checkpoint: {first}" in message
    assert "(it needs about 10 bytes, 1 bytes free)" in message


def test_a_write_error_survives_a_trip_between_processes(tmp_path) -> None:
    import pickle

    error = WriteError(errno.ENOSPC, tmp_path, needed=2048, free=10)
    back = pickle.loads(pickle.dumps(error))
    assert str(back) == str(error) and back.errno == errno.ENOSPC and back.folder == tmp_path
