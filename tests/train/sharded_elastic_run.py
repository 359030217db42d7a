"""A sharded training run that torchrun starts and restarts (tests/train/test_train_elastic.py).

``python -m torch.distributed.run ... tests/train/sharded_elastic_run.py OUTPUT_DIR KILL_AT``: trains the
two-layer BERT of test_train_fsdp.py with FSDP, a checkpoint every 2 steps, resuming from the newest one
when there is one (a restart). In the first attempt the last rank kills itself with SIGKILL after step
KILL_AT (0: never), as a lost machine would; torchrun then restarts the whole group, which resumes.
Rank 0 writes the final weights to OUTPUT_DIR/final.safetensors, a line to OUTPUT_DIR/starts with the step
every start of the group begins at, and OUTPUT_DIR/restart-N (N: its node's restart count) at the end.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import torch  # noqa: E402
from test_train_fsdp import GLOBAL_BATCH, Tokens, _config, _save_final, tiny_model  # noqa: E402

from attnlab.train import Trainer, cleanup_distributed, setup_distributed  # noqa: E402
from attnlab.train.checkpoint import latest_checkpoint  # noqa: E402


def main(out: Path, kill_at: int) -> None:
    torch.set_num_threads(1)
    context = setup_distributed(timeout_s=120.0, device="cpu")
    try:
        trainer = Trainer(
            tiny_model(), _config(out / "run", GLOBAL_BATCH // context.world_size, "fsdp"), Tokens()
        )
        if latest_checkpoint(trainer.checkpoint_root) is not None:
            trainer.resume("latest")
        if context.is_main:  # one line per start of the group: the step it starts from
            with open(out / "starts", "a", encoding="utf-8") as starts:
                starts.write(f"{trainer.step}\n")
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first_attempt and kill_at and context.rank == context.world_size - 1:
            trainer.callbacks.append(
                lambda t, record: os.kill(os.getpid(), signal.SIGKILL) if record["step"] == kill_at else None
            )
        trainer.train()
        _save_final(trainer, out / "final.safetensors")
        if context.is_main:
            (out / f"restart-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}").write_text(
                str(trainer.step)
            )
    finally:
        cleanup_distributed()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
