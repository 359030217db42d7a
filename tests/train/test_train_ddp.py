"""DDP from outside: two gloo processes on 127.0.0.1 equal one process with the same global batch."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from test_train_tiny import RegressionDataset, TinyMLP

from attnlab.train import Trainer, TrainerConfig, cleanup_distributed, set_seed, setup_distributed
from attnlab.train.checkpoint import read_model_file, save_model, unwrap_model
from attnlab.train.distributed import free_port

STEPS, MICRO_BATCH, ACCUM = 5, 4, 2
RANK_TIMEOUT_S = 120.0  # a collective that waits longer raises instead of hanging the suite


def _config(out: Path, batch_size: int) -> TrainerConfig:
    return TrainerConfig(
        max_steps=STEPS, batch_size=batch_size, grad_accum_steps=ACCUM, lr=1e-2, warmup=1, clip_norm=1.0,
        save_every=2, log_every=1, output_dir=out, seed=3, tensorboard=False, progress_bar=False, plot=False,
        device="cpu",  # gloo CPU processes, also on a machine with a GPU
    )  # fmt: skip


def _counting_allreduce(state: dict, bucket):
    """DDP communication hook that counts gradient all-reduces (one bucket for this tiny model)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state["calls"] += 1
    return allreduce_hook(None, bucket)


def _worker(rank: int, world_size: int, port: int, root: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    context = setup_distributed(timeout_s=RANK_TIMEOUT_S, device="cpu")
    try:
        assert (context.rank, context.world_size, context.backend) == (rank, world_size, "gloo")
        set_seed(100 + rank)  # different initial weights per rank: DDP must broadcast rank 0's
        model = TinyMLP()
        out = Path(root) / f"rank{rank}"  # only rank 0 may write anything here
        eval_data = RegressionDataset(10, seed=1)  # read whole by rank 0 while rank 1 waits at a barrier
        trainer = Trainer(model, _config(out, MICRO_BATCH), RegressionDataset(), eval_data=eval_data)
        assert trainer.train_loader.rank == rank and trainer.train_loader.world_size == world_size
        counter = {"calls": 0}
        trainer._ddp.register_comm_hook(counter, _counting_allreduce)
        trainer.train()
        result = {"allreduces": counter["calls"], "step": trainer.step, "eval": sorted(trainer.last_eval)}
        (Path(root) / f"result{rank}.json").write_text(json.dumps(result))
        if rank == 0:
            save_model(model, Path(root) / "ddp.safetensors")
    finally:
        cleanup_distributed()


def _signal_worker(rank: int, world_size: int, port: int, root: str, phase: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    setup_distributed(timeout_s=RANK_TIMEOUT_S, device="cpu")
    try:
        set_seed(100)
        model = TinyMLP()
        trainer = Trainer(model, _config(Path(root) / "run", MICRO_BATCH), RegressionDataset())
        if phase == "cut" and rank == 1:  # only rank 1 is signalled, after its step-2 all-reduce
            trainer.callbacks.append(
                lambda t, r: os.kill(os.getpid(), signal.SIGTERM) if r["step"] == 2 else None
            )
        if phase == "resume":
            trainer.resume("latest")
        result = trainer.train()
        (Path(root) / f"{phase}{rank}.json").write_text(json.dumps([result.step, result.interrupted]))
        if rank == 0 and phase == "resume":
            save_model(model, Path(root) / "resumed.safetensors")
    finally:
        cleanup_distributed()


def _run_ranks(worker, *args, nprocs: int = 2, deadline_s: float = 300.0) -> None:
    """Run `worker(rank, *args)` in `nprocs` fresh processes; fail (never hang) past `deadline_s`.

    spawn, not fork: a child forked from the test process inherits whatever locks its other threads
    (tqdm's monitor, OpenMP pools) held at that instant, and a CI run once hung forever that way.
    Whatever happens, no child outlives the call: a leftover process would keep CI's output pipe open.
    """
    context = mp.start_processes(worker, args=args, nprocs=nprocs, join=False, start_method="spawn")
    end = time.monotonic() + deadline_s
    try:
        while not context.join(timeout=1.0):  # raises ProcessRaisedException when a rank fails
            if time.monotonic() > end:
                raise AssertionError(f"{nprocs} ranks still running after {deadline_s:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


def test_two_gloo_processes_equal_one_process_with_the_same_global_batch(tmp_path) -> None:
    _run_ranks(_worker, 2, free_port(), str(tmp_path))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        set_seed(100)  # rank 0's initial weights
        single = TinyMLP()
        Trainer(single, _config(tmp_path / "single", 2 * MICRO_BATCH), RegressionDataset()).train()
    finally:
        torch.set_num_threads(threads)

    ddp = TinyMLP()
    unwrap_model(ddp).load_state_dict(read_model_file(tmp_path / "ddp.safetensors"))
    diffs = [(a - b).abs().max().item() for a, b in zip(single.parameters(), ddp.parameters())]
    assert max(diffs) <= 1e-6, diffs
    moved = [(a - b).abs().max().item() for a, b in zip(single.parameters(), TinyMLP().parameters())]
    assert max(moved) > 1e-3  # training did move the weights

    for rank in (0, 1):
        result = json.loads((tmp_path / f"result{rank}.json").read_text())
        # no_sync on the first micro-batch of each step: one gradient all-reduce per optimizer step
        assert result == {"allreduces": STEPS, "step": STEPS, "eval": ["eval_loss"] if rank == 0 else []}
    assert not (tmp_path / "rank1").exists()  # rank 1 neither logged nor saved
    rank0 = tmp_path / "rank0"
    assert (rank0 / "log.jsonl").is_file()
    assert sorted(p.name for p in (rank0 / "checkpoints").iterdir()) == [  # the last 2 (keep_last)
        "step-000004",
        "step-000005",
    ]
    state = torch.load(rank0 / "checkpoints" / "step-000005" / "training_state.pt", weights_only=True)
    assert len(state["rng"]) == 2  # each rank's generators, for an exact resume under DDP
    logged = [json.loads(line) for line in (rank0 / "log.jsonl").read_text().splitlines()]
    train = [r for r in logged if r["kind"] == "train"]
    assert train[0]["examples_per_s"] > 0 and [r["step"] for r in train] == list(range(1, STEPS + 1))
    trainer_state = json.loads((rank0 / "checkpoints" / "step-000005" / "trainer_state.json").read_text())
    assert trainer_state["examples_seen"] == STEPS * ACCUM * MICRO_BATCH * 2  # counted over both ranks
    assert [r["step"] for r in logged if r["kind"] == "eval"] == [STEPS]


def test_a_signal_to_one_rank_stops_all_ranks_at_the_same_step_and_resume_continues(tmp_path) -> None:
    _run_ranks(_signal_worker, 2, free_port(), str(tmp_path), "cut")
    # rank 1's flag travels with step 3's all-reduce: both ranks save step 3 and return
    assert [json.loads((tmp_path / f"cut{r}.json").read_text()) for r in (0, 1)] == [[3, True], [3, True]]
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-000003" / "trainer_state.json").read_text())
    assert state["interrupted_by"] == "stop on another rank"  # rank 0 writes; rank 1 had the SIGTERM
    _run_ranks(_signal_worker, 2, free_port(), str(tmp_path), "resume")  # (keep_last 2 then prunes step 3)
    assert [json.loads((tmp_path / f"resume{r}.json").read_text()) for r in (0, 1)] == [[STEPS, False]] * 2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        set_seed(100)
        single = TinyMLP()
        Trainer(single, _config(tmp_path / "single", 2 * MICRO_BATCH), RegressionDataset()).train()
    finally:
        torch.set_num_threads(threads)
    resumed = TinyMLP()
    resumed.load_state_dict(read_model_file(tmp_path / "resumed.safetensors"))
    diffs = [(a - b).abs().max().item() for a, b in zip(single.parameters(), resumed.parameters())]
    assert max(diffs) <= 1e-6, diffs


def test_more_processes_than_gpus_is_a_clear_error_and_cpu_processes_use_gloo(monkeypatch) -> None:
    """torchrun --nproc_per_node 2 on a one-GPU machine: NCCL would fail in the second process with "invalid
    device ordinal"; setup_distributed says what to do instead. trainer.device=cpu there joins with gloo."""
    import torch.distributed as dist

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    joined = []
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: joined.append(backend))
    with pytest.raises(RuntimeError, match="2 processes on this node but 1 GPU.*--nproc_per_node=1"):
        setup_distributed()
    assert joined == []
    context = setup_distributed(device="cpu")
    assert joined == ["gloo"] and (context.backend, context.rank, context.world_size) == ("gloo", 1, 2)
