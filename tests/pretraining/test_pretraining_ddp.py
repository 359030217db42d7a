"""``attnlab pretrain`` under torchrun: two CPU processes (gloo) prepare once, train together (DDP, or FSDP
with ``--parallel fsdp``), save once."""

from __future__ import annotations

import random

import pytest
from torchrun import run_cli_under_torchrun, trainer_state

from attnlab.io import load

WORDS = "the a function module returns reads list string file error value class of for is and".split()


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_pretrain_together(tmp_path, parallel):
    rng = random.Random(0)
    lines = []
    for _ in range(8):
        lines += [" ".join(rng.choice(WORDS) for _ in range(10)).capitalize() + "." for _ in range(20)] + [""]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines))
    out = tmp_path / "run"
    stdout = run_cli_under_torchrun(tmp_path, [
        "pretrain", "--recipe", "roberta", "--corpus", str(corpus), "--output", str(out),
        "--vocab-size", "300", "--max-steps", "3", "--batch-size", "2", "--max-length", "32",
        "--workers", "1", "--no-progress", "--set", "model.hidden_size=32", "--set", "model.num_layers=1",
        "--set", "model.num_heads=2", "--set", "model.intermediate_size=64", "--eval-examples", "8",
        "--parallel", parallel,
    ])  # fmt: skip
    assert stdout.count("held-out MLM accuracy") == 1  # printed by rank 0 only
    state = trainer_state(out, 3)
    assert state["world_size"] == 2 and state["examples_seen"] == 3 * 2 * 2
    assert state["config"]["parallel"] == parallel
    sharded = (out / "train" / "checkpoints" / "step-000003" / "sharded").is_dir()
    assert sharded == (parallel == "fsdp")
    model = load(out / "model")  # gathered once by rank 0 under fsdp: the usual model directory
    assert not any(p.is_meta for p in model.parameters())
