"""torchrun's restarts: 4 processes (--standalone: the c10d rendezvous on this machine), one worker killed
mid-run with SIGKILL, torchrun restarts the group (--max-restarts) and the run resumes from its last
sharded checkpoint, ending with the weights of one uninterrupted process (within test_train_fsdp's
tolerance: the gradient reduction adds in another order)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_train_fsdp import _assert_same_weights, _single_process

SCRIPT = Path(__file__).with_name("sharded_elastic_run.py")


def _launch(out: Path, kill_at: int) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
        "--max-restarts", "1", "--monitor-interval", "0.5", str(SCRIPT), str(out), str(kill_at),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_a_killed_worker_restarts_the_group_from_the_last_sharded_checkpoint(tmp_path):
    nodes = [_launch(tmp_path, kill_at=5)]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=240)[0])
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert [node.returncode for node in nodes] == [0], "\n".join(o[-3000:] for o in outputs)
    assert not (tmp_path / "restart-0").exists()  # the first attempt did not finish
    assert (tmp_path / "restart-1").read_text() == "8"  # the restarted group did
    assert "failed (exitcode: -9) local_rank: 3" in "".join(outputs)  # the killed worker
    _, single_weights = _single_process(tmp_path)
    _assert_same_weights(tmp_path / "final.safetensors", single_weights)
