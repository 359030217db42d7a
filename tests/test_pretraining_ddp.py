"""``attnlab pretrain`` under torchrun: two CPU processes (gloo) prepare once, train together, save once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest

WORDS = "the a function module returns reads list string file error value class of for is and".split()


@pytest.mark.slow
def test_two_processes_pretrain_together(tmp_path):
    rng = random.Random(0)
    lines = []
    for _ in range(8):
        lines += [" ".join(rng.choice(WORDS) for _ in range(10)).capitalize() + "." for _ in range(20)] + [""]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines))
    out = tmp_path / "run"
    launcher = tmp_path / "attnlab_cli.py"
    launcher.write_text("import sys\nfrom attnlab.cli import main\nsys.exit(main())\n")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(launcher), "pretrain", "--recipe", "roberta", "--corpus", str(corpus), "--output", str(out),
        "--vocab-size", "300", "--max-steps", "3", "--batch-size", "2", "--max-length", "32",
        "--workers", "1", "--no-progress", "--set", "model.hidden_size=32", "--set", "model.num_layers=1",
        "--set", "model.num_heads=2", "--set", "model.intermediate_size=64", "--eval-examples", "8",
    ]  # fmt: skip
    # A session of its own, so that a timeout kills torchrun's workers too, not torchrun alone.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.count("held-out MLM accuracy") == 1  # printed by rank 0 only
    state = json.loads((out / "train" / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["examples_seen"] == 3 * 2 * 2
    assert (out / "model" / "model.safetensors").is_file()
