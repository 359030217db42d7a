"""Run `attnlab` under torchrun for the DDP tests (pretrain, the gpt recipe, distill): one helper, so the
launch, the timeout and the clean-up of the worker processes are written once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_cli_under_torchrun(
    tmp_path: Path, argv: list[str], nproc: int = 2, timeout: float = 600,
    on_cpu: tuple[str, ...] = ("--set", "trainer.device=cpu"),
) -> str:  # fmt: skip
    """``torchrun --standalone --nproc_per_node NPROC attnlab ARGV --set trainer.device=cpu`` with one thread
    per process (CPU processes and gloo, also on a machine with a GPU); asserts the exit code 0 (showing
    stderr's tail) and returns stdout. ``on_cpu``: the options that put a command on the CPU (finetune's
    and translate-train's: ``--device cpu``)."""
    argv = [*argv, *on_cpu]
    launcher = tmp_path / "attnlab_cli.py"
    launcher.write_text("import sys\nfrom attnlab.cli import main\nsys.exit(main())\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           str(launcher), *argv]  # fmt: skip
    # A session of its own, so that a timeout kills torchrun's workers too, not torchrun alone.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    return stdout


def trainer_state(run_dir: Path, step: int) -> dict[str, Any]:
    """The ``trainer_state.json`` of ``run_dir``'s checkpoint at ``step``."""
    path = run_dir / "train" / "checkpoints" / f"step-{step:06d}" / "trainer_state.json"
    return json.loads(path.read_text())
