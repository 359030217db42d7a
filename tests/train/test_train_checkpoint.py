"""Atomic checkpoints: tied weights stored once, weights_only state, crash safety, keep-last-K, RNG."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from safetensors import safe_open
from torch import nn

from attnlab.train import checkpoint as ckpt


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 3)
        self.head = nn.Linear(3, 7)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(2.0))


def test_tied_weights_are_stored_once_and_reloaded(tmp_path) -> None:
    torch.manual_seed(0)
    model = Tied()
    ckpt.save_model(model, tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        tied = json.loads(f.metadata()[ckpt._TIED_KEY])
    assert keys == {"embed.weight", "head.bias", "scale"}
    assert tied == {"head.weight": "embed.weight"}
    fresh = Tied()
    fresh.load_state_dict(ckpt.read_model_file(tmp_path / "m.safetensors"))
    assert fresh.head.weight is fresh.embed.weight  # loading copies into the parameters: the tie survives
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name


def test_overlapping_views_are_copied_not_lost(tmp_path) -> None:
    class Views(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            base = torch.arange(12.0)
            self.register_buffer("a", base[:6])
            self.register_buffer("b", base[6:])  # same storage, a different view

    model = Views()
    ckpt.save_model(model, tmp_path / "v.safetensors")
    fresh = Views()
    fresh.a.zero_(), fresh.b.zero_()
    fresh.load_state_dict(ckpt.read_model_file(tmp_path / "v.safetensors"))
    assert torch.equal(fresh.a, torch.arange(6.0)) and torch.equal(fresh.b, torch.arange(6.0, 12.0))


def test_unwrap_model_handles_compile_wrapper() -> None:
    model = nn.Linear(2, 2)

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self._orig_mod = model

    assert ckpt.unwrap_model(Wrapper()) is model


def test_read_model_file_reports_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no such weights file"):
        ckpt.read_model_file(tmp_path / "absent.safetensors")


def _state() -> dict:
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 / (i + 1))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    return {
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": ckpt.rng_state(),
        "step": 3,
    }


def test_training_state_loads_with_weights_only(tmp_path) -> None:
    path = ckpt.save_checkpoint(tmp_path / "step-000003", nn.Linear(3, 2), _state(), {"step": 3})
    state = ckpt.load_training_state(path)  # torch.load(weights_only=True) inside
    assert state["step"] == 3 and "state" in state["optimizer"]
    assert json.loads((path / ckpt.TRAINER_STATE_FILE).read_text())["step"] == 3
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json",
        "model.safetensors",
        "trainer_state.json",
        "training_state.pt",
    ]


def test_rng_state_round_trip_through_weights_only(tmp_path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.normal(), torch.rand(1)  # mid-stream, with numpy's cached gaussian set
    torch.save(ckpt.rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.normal(), np.random.rand(), torch.rand(3))
    ckpt.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.random(), np.random.normal(), np.random.rand(), torch.rand(3))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])


def test_crash_while_writing_leaves_previous_checkpoint_intact(tmp_path) -> None:
    root = tmp_path / "checkpoints"
    model = nn.Linear(3, 2)
    first = ckpt.save_checkpoint(root / "step-000002", model, _state(), {"step": 2})
    before = {p.name: p.read_bytes() for p in first.iterdir()}

    def crash(tmp):
        (tmp / "model.safetensors").write_bytes(b"half a file")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.atomic_directory(root / "step-000004", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt.atomic_directory(root / "step-000002", crash)  # even when overwriting the same step
    assert ckpt.list_checkpoints(root) == [first]
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert sorted(p.name for p in root.iterdir()) == ["step-000002"]  # no temporary left


def test_list_ignores_unfinished_directories_and_cleans_them(tmp_path) -> None:
    root = tmp_path
    (root / ".tmp-step-000009-abc").mkdir()  # a crash in the middle of a save
    (root / "step-000007").mkdir()  # no trainer_state.json: not a finished checkpoint
    done = ckpt.save_checkpoint(root / "step-000005", nn.Linear(1, 1), {"step": 5}, {"step": 5})
    assert ckpt.latest_checkpoint(root) == done
    ckpt.remove_stale_temporaries(root)
    assert not (root / ".tmp-step-000009-abc").exists()


def test_resaving_a_step_replaces_it(tmp_path) -> None:
    model = nn.Linear(2, 2)
    path = ckpt.save_checkpoint(tmp_path / "step-000001", model, {"v": 1}, {"v": 1})
    ckpt.save_checkpoint(path, model, {"v": 2}, {"v": 2})
    assert ckpt.load_training_state(path)["v"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]


def test_prune_keeps_the_newest(tmp_path) -> None:
    for step in (10, 2, 30, 4):  # numeric order, not name order
        ckpt.save_checkpoint(tmp_path / ckpt.checkpoint_name(step), nn.Linear(1, 1), {}, {})
    removed = ckpt.prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["step-000002", "step-000004"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000010", "step-000030"]
    assert ckpt.prune_checkpoints(tmp_path, None) == []


def test_missing_state_file_is_reported(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="training_state.pt"):
        ckpt.load_training_state(tmp_path)
