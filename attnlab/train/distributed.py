"""Data-parallel training applied from outside the model.

Model code never imports `torch.distributed`: the `Trainer` calls `wrap_model` on whatever module it is
given. `setup_distributed` reads the environment that ``torchrun`` sets (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) and joins the process group: NCCL when CUDA is available, gloo on CPU.
Without those variables everything here degrades to a single process and no collective is called.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: not distributed

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs, saves checkpoints and evaluates."""
        return self.rank == 0

    def default_device(self) -> torch.device:
        """cuda:LOCAL_RANK when CUDA is available, else cpu."""
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank % max(torch.cuda.device_count(), 1))
        return torch.device("cpu")


DEVICES = "cpu, cuda, cuda:N, mps, auto"  # what --device accepts, named in its errors


def resolve_device(name: str | torch.device, context: DistributedContext | None = None) -> torch.device:
    """The device ``name`` means on this machine: ``"auto"`` is ``context``'s default (cuda:LOCAL_RANK where
    CUDA is available, else cpu). A name torch does not know, or a CUDA/MPS device this machine lacks, is a
    `ValueError` naming ``--device``: torch itself would fail later with a bare ``RuntimeError`` or an
    ``AssertionError`` ("Torch not compiled with CUDA enabled") from deep inside ``model.to``."""
    if isinstance(name, torch.device):
        device = name
    elif str(name).strip().lower() == "auto":
        return (context or DistributedContext()).default_device()
    else:
        try:
            device = torch.device(str(name).strip())
        except (RuntimeError, ValueError):
            raise ValueError(f"--device {name}: not a device ({DEVICES})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"--device {name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available on this machine; use --device cpu")
    return device


def setup_distributed(
    backend: str | None = None, timeout_s: float = 1800.0, device: str = "auto"
) -> DistributedContext:
    """Join the process group described by torchrun's environment variables.

    Returns a single-process context when WORLD_SIZE is absent or 1. Idempotent: a second call returns
    the context of the group already joined. ``device`` is the one the run will train on (the trainer's
    ``device``): NCCL for "auto" where CUDA is available, one GPU per process on the node, gloo for "cpu"
    (CPU processes on a GPU machine) or where CUDA is absent. A node with more processes than GPUs is a
    clear error, not NCCL's "invalid device ordinal" from the second process.

    Under torchrun the group's keys go under a prefix of their own for every start of the group: torchrun
    keeps one store for all its restarts, and a restarted group must not read the addresses its dead
    predecessors left there. The prefix counts how many times this global rank has joined (a counter in
    that store), which is the same on every rank and every node of one start; torchrun's own restart
    count is not (a node whose workers did not fail restarts them without counting a restart). A worker
    that died before it joined leaves its count behind: that restart stops at the timeout (docs/training.md).
    """
    if dist.is_available() and dist.is_initialized():
        return current_context()
    env = os.environ
    if int(env.get("WORLD_SIZE", "1")) <= 1:
        return DistributedContext(local_rank=int(env.get("LOCAL_RANK", "0")))
    missing = [key for key in _ENV_KEYS if key not in env]
    if missing:
        raise RuntimeError(
            f"setup_distributed: WORLD_SIZE={env['WORLD_SIZE']} but {', '.join(missing)} not set; "
            "launch with torchrun (see docs/training.md)"
        )
    rank, world_size, local_rank = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    if backend is None:
        on_gpu = str(device) == "auto" and torch.cuda.is_available() or str(device).startswith("cuda")
        backend = "nccl" if on_gpu else "gloo"
    if backend == "nccl":
        local_world = int(env.get("LOCAL_WORLD_SIZE", world_size))
        if local_world > torch.cuda.device_count():
            raise RuntimeError(
                f"setup_distributed: {local_world} processes on this node but {torch.cuda.device_count()} "
                f"GPU(s): NCCL needs one GPU per process. Start torchrun with --nproc_per_node="
                f"{max(torch.cuda.device_count(), 1)}, or train on the CPU (trainer.device=cpu: gloo)"
            )
        torch.cuda.set_device(local_rank)
    try:
        _join_group(backend, rank, world_size, datetime.timedelta(seconds=timeout_s))
    except dist.DistStoreError as e:  # a process that never came: name the rendezvous and the wait
        raise RuntimeError(
            f"setup_distributed: rank {rank} of {world_size} waited {timeout_s:g} s at the rendezvous "
            f"{env['MASTER_ADDR']}:{env['MASTER_PORT']} and the other processes did not all join (one "
            f"that failed to start, or a node lost); torch: {str(e).splitlines()[0]}"
        ) from None
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend)


def _join_group(backend: str, rank: int, world_size: int, timeout: datetime.timedelta) -> None:
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        dist.init_process_group(
            backend=backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout
        )
        return
    store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
    generation = store.add(f"attnlab/joins/rank-{rank}", 1)  # this group's start, counted from 1
    dist.init_process_group(
        backend=backend, store=dist.PrefixStore(f"attnlab/generation-{generation}", store), rank=rank,
        world_size=world_size, timeout=timeout,
    )  # fmt: skip


def current_context() -> DistributedContext:
    """The context of the process group already joined, or a single-process one."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        return DistributedContext(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=local_rank,
            backend=dist.get_backend(),
        )
    return DistributedContext(local_rank=local_rank)


GLOO_DRAIN_S = 0.25  # cleanup_distributed's pause: ample for a worker thread to free finished work


def cleanup_distributed() -> None:
    """Leave the process group (call once at the end of the program).

    Pauses first, releasing the GIL: gloo's worker threads free a finished collective (and the tensors
    Python has seen, which takes the GIL) after the caller has moved on, while the group's destructor, run
    when the last DDP wrapper is freed, joins those threads holding the GIL. A thread still freeing then
    waits forever (seen at the end of DDP runs with torch 2.13 and gloo).
    """
    if dist.is_available() and dist.is_initialized():
        time.sleep(GLOO_DRAIN_S)
        dist.destroy_process_group()


def wrap_model(
    model: nn.Module, context: DistributedContext, device: torch.device, find_unused_parameters: bool = False
) -> nn.Module:
    """`DistributedDataParallel(model)` when the job has several processes, else `model` unchanged.

    DDP broadcasts rank 0's parameters and buffers at construction, so every rank starts from the same
    weights even if they were initialised with different seeds.
    """
    if not context.is_distributed or isinstance(model, DistributedDataParallel):
        return model
    device_ids = [device.index if device.index is not None else 0] if device.type == "cuda" else None
    return DistributedDataParallel(
        model, device_ids=device_ids, find_unused_parameters=find_unused_parameters
    )


def all_reduce_sum(tensor: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """Sum `tensor` over ranks in place (no-op on one process)."""
    if context.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(context: DistributedContext) -> None:
    if context.is_distributed:
        dist.barrier()


def all_gather_object(obj: Any, context: DistributedContext) -> list[Any]:
    """Every rank's `obj`, in rank order (``[obj]`` on one process)."""
    if not context.is_distributed:
        return [obj]
    gathered: list[Any] = [None] * context.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: Any, context: DistributedContext) -> Any:
    """Rank 0's ``obj`` on every rank (``obj`` itself on one process)."""
    if not context.is_distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port no process listens on now (the OS picks it): a rendezvous's MASTER_PORT, a test server's."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
