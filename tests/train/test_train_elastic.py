"""torchrun's restarts: 4 processes, one worker killed mid-run with SIGKILL, torchrun restarts the group
(--max-restarts) and the run resumes from its last sharded checkpoint, ending with the weights of one
uninterrupted process (within test_train_fsdp's tolerance: the gradient reduction adds in another order).
The 4 processes are one node (--standalone) or two "nodes" of 2, two torchrun agents meeting at a c10d
rendezvous on this machine (docs/training.md's multi-node command). A node that never joins: torchrun
stops after the rendezvous's join timeout, and the output folder stays empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_train_fsdp import _assert_same_weights, _single_process

from attnlab.train.distributed import free_port

SCRIPT = Path(__file__).with_name("sharded_elastic_run.py")


def _launch(out: Path, kill_at: int, rendezvous: tuple[str, ...] = ("--standalone", "--nproc-per-node", "4")):
    command = [
        sys.executable, "-m", "torch.distributed.run", *rendezvous, "--max-restarts", "1",
        "--monitor-interval", "0.5", str(SCRIPT), str(out), str(kill_at),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _outputs(nodes: list[subprocess.Popen], timeout: float) -> list[str]:
    """Each node's output once it has ended; a node still running past ``timeout`` seconds is killed."""
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=timeout)[0])
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    return outputs


@pytest.mark.slow
def test_a_killed_worker_restarts_the_group_from_the_last_sharded_checkpoint(tmp_path):
    nodes = [_launch(tmp_path, kill_at=5)]
    outputs = _outputs(nodes, timeout=240)
    assert [node.returncode for node in nodes] == [0], "\n".join(o[-3000:] for o in outputs)
    assert not (tmp_path / "restart-0").exists()  # the first attempt did not finish
    assert (tmp_path / "restart-1").read_text() == "8"  # the restarted group did
    assert "failed (exitcode: -9) local_rank: 3" in "".join(outputs)  # the killed worker
    _, single_weights = _single_process(tmp_path)
    _assert_same_weights(tmp_path / "final.safetensors", single_weights)


def _two_nodes(port: int, *conf: str) -> tuple[str, ...]:
    return (
        "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        f"localhost:{port}", "--rdzv-id", "attnlab-test", *conf,
    )  # fmt: skip


@pytest.mark.slow
def test_two_nodes_restart_together_after_a_worker_is_killed(tmp_path):
    """Two torchrun agents of 2 processes each; the last rank (on one node) is killed after step 5. Both
    nodes' groups restart from step 4's sharded checkpoint, though only one node counts a restart, and
    the run ends at the uninterrupted weights."""
    port = free_port()
    nodes = [_launch(tmp_path, kill_at=5, rendezvous=_two_nodes(port)) for _ in range(2)]
    outputs = _outputs(nodes, timeout=300)
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert "failed (exitcode: -9)" in "".join(outputs)  # the killed worker
    assert (tmp_path / "starts").read_text().split() == ["0", "4"]  # resumed from step 4's checkpoint
    assert [p.read_text() for p in tmp_path.glob("restart-*")] == ["8"]
    _, single_weights = _single_process(tmp_path)
    _assert_same_weights(tmp_path / "final.safetensors", single_weights)


@pytest.mark.slow
def test_a_node_that_never_joins_stops_the_run_after_the_join_timeout(tmp_path):
    """--nnodes 2 with one node started: torchrun's rendezvous waits join_timeout seconds and stops with
    its own message; no worker started, nothing is written into the output folder."""
    out = tmp_path / "out"
    out.mkdir()
    node = _launch(out, kill_at=0, rendezvous=_two_nodes(free_port(), "--rdzv-conf", "join_timeout=5"))
    (output,) = _outputs([node], timeout=120)
    assert node.returncode != 0
    assert "RendezvousTimeoutError" in output, output[-3000:]
    assert list(out.iterdir()) == []


def test_a_process_that_never_joins_is_a_clear_error_naming_the_rendezvous_and_the_wait(monkeypatch):
    """Rank 0 of 2 alone: the group does not form within the timeout; the error says where it waited and
    how long, not the store's bare ``wait timeout``."""
    from attnlab.train import setup_distributed

    port = free_port()
    env = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match=rf"rank 0 of 2 waited 2 s at the rendezvous 127.0.0.1:{port}"):
        setup_distributed(timeout_s=2.0, device="cpu")
