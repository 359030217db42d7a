"""FSDP against DDP on gloo CPU processes: per-rank memory of the training state, and throughput.

    .venv/bin/python benchmarks/sharded_training.py                   # both parts (about 5 min on 2 cores)
    .venv/bin/python benchmarks/sharded_training.py --part memory     # bert-base, 4 ranks
    .venv/bin/python benchmarks/sharded_training.py --part throughput --steps 20
    .venv/bin/python benchmarks/sharded_training.py --device cuda --part throughput   # the GPU column
    .venv/bin/python benchmarks/sharded_training.py --part parity     # bert-mini, 50 steps, 1 vs 2 and 4

memory: bert-base-uncased (MLM head, 110M parameters) trained for one step by 4 processes with
``parallel="fsdp"`` and then with ``parallel="ddp"``; each rank reports the bytes its parameters, gradients
and AdamW state occupy after the step (local shards: ``DTensor.to_local()``), and the process's peak
resident set (``ru_maxrss``: it includes the whole model every rank builds before sharding, the libraries and
the activations). The ratio is FSDP's per-rank training state over DDP's, measured in the same run.

throughput: bert-mini (4 layers, hidden 256) trained by 2 processes with each mode on the same global
batches; sequences per second over the timed steps (after 2 warm-up steps), and the ratio FSDP / DDP.

parity: bert-mini without dropout, every token a label (each rank's mean loss is over the same number of
tokens, so the mean of the ranks' losses is the global batch's), trained for 50 steps by one process and by
2 and 4 FSDP processes on the same global batches (8 sequences of 32 tokens); the largest relative
difference of the logged loss from the single process's, over every step, and of the final weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.models import get_preset  # noqa: E402
from attnlab.models.pretraining import EncoderForPreTraining  # noqa: E402
from attnlab.pretraining.masked_lm import MaskedLMPreTrainer  # noqa: E402
from attnlab.train import Trainer, TrainerConfig, cleanup_distributed, set_seed, setup_distributed  # noqa: E402
from attnlab.train.checkpoint import read_model_file, save_model  # noqa: E402
from attnlab.train.sharded import consolidated_model  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        self.ids = torch.randint(5, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def training_state_bytes(trainer: Trainer) -> dict[str, int]:
    params = list(trainer.model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    moments = [v for state in trainer.optimizer.state.values() for v in state.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0]  # fmt: skip
    return {
        "parameters": sum(_local_bytes(p) for p in params),
        "gradients": sum(_local_bytes(g) for g in grads),
        "optimizer": sum(_local_bytes(m) for m in moments),
    }


def _worker(rank: int, world: int, port: int, job: dict, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    torch.set_num_threads(1)
    setup_distributed(timeout_s=600.0, device=job["device"])
    try:
        set_seed(0)
        config = dataclasses.replace(get_preset(job["preset"]), add_pooler=False)  # no NSP: unused
        if job.get("no_dropout"):
            config = dataclasses.replace(config, hidden_dropout=0.0, attention_dropout=0.0)
        model = MaskedLMPreTrainer(EncoderForPreTraining.from_config(config, pair_head=False))
        cfg = TrainerConfig(
            max_steps=job["steps"], batch_size=job["batch"] // world, lr=1e-4, log_every=0, save_every=0,
            output_dir=Path(out) / job["parallel"], tensorboard=False, progress_bar=False, plot=False,
            device=job["device"], parallel=job["parallel"],
        )  # fmt: skip
        data = Tokens(job["batch"] * (job["steps"] + 2), job["length"], config.vocab_size)
        times: list[float] = []
        losses: list[float] = []
        trainer = Trainer(
            model, cfg, data,
            callbacks=[lambda t, r: times.append(time.perf_counter()), lambda t, r: losses.append(r["loss"])],
        )  # fmt: skip
        trainer.train()
        if job.get("save_weights"):
            final = consolidated_model(trainer.model, trainer.context)
            if final is not None:
                save_model(final, Path(out) / f"{job['parallel']}-weights.safetensors")
        state = training_state_bytes(trainer)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        timed = times[2:] if len(times) > 3 else times
        rate = job["batch"] * (len(timed) - 1) / (timed[-1] - timed[0]) if len(timed) > 1 else 0.0
        record = {**state, "peak_rss": peak, "rate": rate, "losses": losses}
        Path(out, f"{job['parallel']}-{rank}.json").write_text(json.dumps(record))
    finally:
        cleanup_distributed()


def run(job: dict, world: int) -> list[dict]:
    """Every rank's record; with ``job["save_weights"]`` rank 0's also holds the final weights."""
    with tempfile.TemporaryDirectory() as out, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        mp.start_processes(_worker, args=(world, port, job, out), nprocs=world, start_method="spawn")
        records = [json.loads(Path(out, f"{job['parallel']}-{r}.json").read_text()) for r in range(world)]
        if job.get("save_weights"):
            records[0]["weights"] = read_model_file(Path(out) / f"{job['parallel']}-weights.safetensors")
        return records


def _mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def memory(args: argparse.Namespace) -> None:
    job = {"preset": args.memory_preset, "steps": 1, "batch": 4, "length": 16, "device": args.device}
    results = {mode: run({**job, "parallel": mode}, 4) for mode in ("fsdp", "ddp")}
    print(f"{args.memory_preset}, 4 processes, 1 step, batch 1 x 16 tokens per rank; per-rank maximum")
    print(f"{'':12}{'parameters':>14}{'gradients':>14}{'optimizer':>14}{'state total':>14}{'peak RSS':>14}")
    totals = {}
    for mode, ranks in results.items():
        worst = {k: max(r[k] for r in ranks) for k in ("parameters", "gradients", "optimizer", "peak_rss")}
        totals[mode] = max(r["parameters"] + r["gradients"] + r["optimizer"] for r in ranks)
        cells = [worst["parameters"], worst["gradients"], worst["optimizer"], totals[mode], worst["peak_rss"]]
        print(f"{mode:12}" + "".join(f"{_mib(c):>14}" for c in cells))
    print(
        f"FSDP / DDP per-rank parameters + gradients + optimizer state: {totals['fsdp'] / totals['ddp']:.3f}"
    )


def throughput(args: argparse.Namespace) -> None:
    job = {"preset": args.throughput_preset, "steps": args.steps + 2, "batch": 16, "length": 64,
           "device": args.device}  # fmt: skip
    rates = {mode: min(r["rate"] for r in run({**job, "parallel": mode}, 2)) for mode in ("fsdp", "ddp")}
    print(
        f"{args.throughput_preset}, 2 processes, global batch 16 x 64 tokens, {args.steps} timed steps "
        f"({args.device})"
    )
    for mode, rate in rates.items():
        print(f"{mode:6} {rate:8.1f} sequences/s")
    print(f"FSDP / DDP throughput: {rates['fsdp'] / rates['ddp']:.3f}")


def parity(steps: int = 50, worlds: tuple[int, ...] = (2, 4), preset: str = "bert-mini") -> dict[int, tuple]:
    """The largest relative loss difference (over the steps) and absolute weight difference of FSDP on
    each world size from one process, on the same global batches; printed and returned by world size."""
    job = {"preset": preset, "steps": steps, "batch": 8, "length": 32, "device": "cpu", "no_dropout": True,
           "save_weights": True}  # fmt: skip
    (single,) = run({**job, "parallel": "ddp"}, 1)
    print(f"{preset} without dropout, {steps} steps, global batch 8 x 32 tokens; FSDP against one process")
    print(f"  one process: loss {single['losses'][0]:.4f} at step 1, {single['losses'][-1]:.4f} at {steps}")
    found = {}
    for world in worlds:
        sharded = run({**job, "parallel": "fsdp"}, world)[0]
        loss = max(abs(a - b) / abs(b) for a, b in zip(sharded["losses"], single["losses"], strict=True))
        weights = max((sharded["weights"][k] - v).abs().max().item() for k, v in single["weights"].items())
        print(
            f"  {world} processes: max relative loss difference {loss:.2e}, "
            f"max weight difference {weights:.2e}"
        )
        found[world] = (loss, weights)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("memory", "throughput", "parity", "both"), default="both")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of the throughput part")
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU per process)")
    parser.add_argument("--memory-preset", default="bert-base-uncased", help="the memory part's model")
    parser.add_argument("--throughput-preset", default="bert-mini", help="the throughput part's model")
    parser.add_argument("--parity-preset", default="bert-mini", help="the parity part's model")
    parser.add_argument("--parity-steps", type=int, default=50, help="steps of the parity part")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device on this machine")
    if args.part in ("memory", "both"):
        memory(args)
    if args.part in ("throughput", "both"):
        throughput(args)
    if args.part == "parity":
        parity(args.parity_steps, preset=args.parity_preset)


if __name__ == "__main__":
    main()
