"""Kill-and-resume trials of sharded (FSDP) training across world-size changes: does every interrupted run
end with the weights of an uninterrupted one?

    OMP_NUM_THREADS=1 .venv/bin/python experiments/sharded_resume_trials.py          # 20 trials, minutes
    OMP_NUM_THREADS=1 .venv/bin/python experiments/sharded_resume_trials.py --trials 2

Each trial trains a two-layer BERT (hidden 16, no dropout, every position a label) for 8 steps of a global
batch of 8 sequences, with a sharded checkpoint every 2 steps, on ``first`` gloo processes, and interrupts it:

- ``kill after step k``: the last rank kills itself with SIGKILL after step k (the others are stopped by
  the launcher, as torchrun stops a group that lost a worker), before step k's checkpoint when k is even;
- ``die during the save of step k``: every rank has written its shards of step k, the process dies before
  the folder is renamed into place (the save is not complete; the previous checkpoint stays the newest).

Then ``second`` processes resume from the newest checkpoint (the per-process batch is 8 / ``second``, so the
global batches stay the same) and train to step 8. The final weights, gathered onto rank 0, are compared with
those of one process trained for 8 steps without interruption; each trial prints one line, and the total
counts the trials within ``--tolerance`` (1e-5: the ranks' gradients are summed in another order than one
process's, which moves the weights by about 1e-7). FSDP needs at least 2 processes, so the world sizes are
2 and 4.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.models.config import EncoderConfig  # noqa: E402
from attnlab.models.pretraining import EncoderForPreTraining  # noqa: E402
from attnlab.pretraining.masked_lm import MaskedLMPreTrainer  # noqa: E402
from attnlab.train import (  # noqa: E402
    Trainer,
    TrainerConfig,
    cleanup_distributed,
    set_seed,
    setup_distributed,
    sharded_checkpoint,
)
from attnlab.train.checkpoint import list_checkpoints, read_model_file, save_model  # noqa: E402
from attnlab.train.distributed import free_port  # noqa: E402
from attnlab.train.sharded import consolidated_model  # noqa: E402

STEPS, GLOBAL_BATCH, LENGTH, VOCAB = 8, 8, 8, 40
WORLDS = ((2, 4), (4, 2), (2, 2), (4, 4))
INTERRUPTIONS = (("kill", 3), ("kill", 5), ("kill", 6), ("kill", 7), ("save", 4))


class Tokens(torch.utils.data.Dataset):
    """Random sequences; each position's label is the previous token."""

    def __init__(self, n: int = 64) -> None:
        self.ids = torch.randint(1, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(5))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index].roll(1)}


def tiny_model(hidden: int = 16) -> MaskedLMPreTrainer:
    """A two-layer BERT without dropout (the same initial weights in every process: seed 11)."""
    set_seed(11)
    config = EncoderConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_layers=2, num_heads=2, intermediate_size=2 * hidden,
        max_position_embeddings=LENGTH, hidden_dropout=0.0, attention_dropout=0.0, add_pooler=False,
    )  # fmt: skip
    return MaskedLMPreTrainer(EncoderForPreTraining.from_config(config, pair_head=False))


def trainer_config(out: Path, world: int, parallel: str) -> TrainerConfig:
    return TrainerConfig(
        max_steps=STEPS, batch_size=GLOBAL_BATCH // world, lr=3e-3, warmup=2, save_every=2, log_every=0,
        output_dir=out, seed=3, tensorboard=False, progress_bar=False, plot=False, device="cpu",
        parallel=parallel,
    )  # fmt: skip


def _rank(rank: int, world: int, port: int, root: str, phase: str, how: str, step: int) -> None:
    """One process of a phase: ``interrupt`` (killed as ``how`` says at ``step``) or ``resume``."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    torch.set_num_threads(1)
    context = setup_distributed(timeout_s=120.0, device="cpu")
    try:
        trainer = Trainer(tiny_model(), trainer_config(Path(root) / "run", world, "fsdp"), Tokens())
        if phase == "resume":
            trainer.resume("latest")
            trainer.train()
            final = consolidated_model(trainer.model, context)
            if final is not None:
                save_model(final, Path(root) / "final.safetensors")
            return
        if how == "kill" and rank == world - 1:
            trainer.callbacks.append(
                lambda t, record: os.kill(os.getpid(), signal.SIGKILL) if record["step"] == step else None
            )
        real_replace = os.replace

        def die_before_the_rename(source: str, target: str) -> None:
            if how == "save" and Path(target).name == f"step-{step:06d}":
                os._exit(9)
            real_replace(source, target)

        with mock.patch.object(sharded_checkpoint.os, "replace", die_before_the_rename):
            trainer.train()
    finally:
        cleanup_distributed()


def _launch(world: int, *args: object, deadline_s: float = 300.0) -> bool:
    """Run ``_rank`` on ``world`` fresh processes; True when all of them ended normally."""
    processes = mp.start_processes(
        _rank, args=(world, free_port(), *args), nprocs=world, join=False, start_method="spawn"
    )
    end = time.monotonic() + deadline_s
    try:
        while not processes.join(timeout=1.0):
            if time.monotonic() > end:
                raise TimeoutError(f"{world} processes still running after {deadline_s:.0f} s")
        return True
    except mp.ProcessExitedException:
        return False
    finally:
        for process in processes.processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


def uninterrupted_weights() -> dict[str, torch.Tensor]:
    """One process, 8 steps, no interruption: the weights every trial must end with."""
    with tempfile.TemporaryDirectory() as out:
        model = tiny_model()
        Trainer(model, trainer_config(Path(out), 1, "ddp"), Tokens()).train()
        return {k: v.detach().clone() for k, v in model.state_dict().items()}


def run_trial(first: int, second: int, how: str, step: int, reference: dict[str, torch.Tensor]) -> dict:
    """One trial; its interruption, the checkpoint the resume found, and the final weights' distance."""
    with tempfile.TemporaryDirectory() as root:
        interrupted = not _launch(first, root, "interrupt", how, step)
        checkpoints = [p.name for p in list_checkpoints(Path(root) / "run" / "checkpoints")]
        resumed = _launch(second, root, "resume", how, step)
        weights = read_model_file(Path(root) / "final.safetensors") if resumed else {}
    difference = max((weights[k] - v).abs().max().item() for k, v in reference.items()) if weights else None
    return {"interrupted": interrupted, "resumed_from": checkpoints[-1] if checkpoints else None,
            "resumed": resumed, "difference": difference}  # fmt: skip


def trials(count: int, tolerance: float) -> int:
    """Run ``count`` trials (world-size pairs x interruptions, in that order); print a line each and the
    total; return how many ended within ``tolerance`` of the uninterrupted weights."""
    plan = [(first, second, how, step) for how, step in INTERRUPTIONS for first, second in WORLDS][:count]
    reference = uninterrupted_weights()
    good = 0
    for number, (first, second, how, step) in enumerate(plan, start=1):
        started = time.perf_counter()
        result = run_trial(first, second, how, step, reference)
        what = f"kill after step {step}" if how == "kill" else f"die during the save of step {step}"
        ok = result["interrupted"] and result["resumed"] and result["difference"] <= tolerance
        good += ok
        difference = "-" if result["difference"] is None else f"{result['difference']:.2e}"
        print(
            f"trial {number:2d}: {first} -> {second} processes, {what:32} resumed from "
            f"{result['resumed_from']}, max weight difference {difference}  "
            f"{'ok' if ok else 'FAILED'} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(f"{good} of {len(plan)} trials ended with the uninterrupted run's weights (within {tolerance:g})")
    return good


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=len(WORLDS) * len(INTERRUPTIONS), help="how many (20)")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest weight difference accepted")
    args = parser.parse_args()
    torch.set_num_threads(1)
    plan_size = min(args.trials, len(WORLDS) * len(INTERRUPTIONS))
    sys.exit(0 if trials(args.trials, args.tolerance) == plan_size else 1)


if __name__ == "__main__":
    main()
