"""A real signal to a training process: it saves at the next step boundary and exits cleanly; resuming
from that checkpoint ends with the weights of an uninterrupted run, bit for bit (CPU).

SIGTERM runs by default; SIGINT (the same path, a different signal) is in the slow set. Both signals are
also sent in-process by tests/train/test_train_trainer.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_train_tiny import lm_trainer

from attnlab.train import latest_checkpoint

SCRIPT = Path(__file__).with_name("test_train_tiny.py")
MAX_STEPS = 12


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(
                f"training process exited before {path.name} appeared:\n{proc.stdout.read()}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)], ids=["SIGTERM", "SIGINT"]
)
def test_signal_saves_and_resume_matches_uninterrupted_run(tmp_path, signum) -> None:
    out = tmp_path / "run"
    # 0.1 s per forward (2 per step) keeps the run going long enough to be caught after step 2.
    cmd = [sys.executable, str(SCRIPT), str(out), str(MAX_STEPS), "--sleep", "0.1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order as the subprocess
    try:
        _wait_for(out / "checkpoints" / "step-000002" / "trainer_state.json", proc)
        proc.send_signal(signum)
        reference = lm_trainer(tmp_path / "reference", MAX_STEPS)  # meanwhile: the uninterrupted run
        reference.train()
        output, _ = proc.communicate(timeout=120)
        name = signal.Signals(signum).name
        assert proc.returncode == 0, output
        assert "interrupted=True" in output and f"{name}: saved" in output, output
        last = latest_checkpoint(out / "checkpoints")
        state = json.loads((last / "trainer_state.json").read_text())
        assert state["interrupted_by"] == name and 2 <= state["step"] < MAX_STEPS
        assert not list((out / "checkpoints").glob(".tmp-*"))

        resumed = lm_trainer(out, MAX_STEPS)  # the same script's trainer, resumed in this process
        assert resumed.resume("latest") == last
        assert resumed.train().step == MAX_STEPS
    finally:
        torch.set_num_threads(threads)
        if proc.poll() is None:
            proc.kill()
    for (key, a), b in zip(reference.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), f"{key} differs after the resume"
