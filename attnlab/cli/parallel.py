"""The options of training on several processes, declared once for ``pretrain``, ``distill``, ``finetune``
and ``translate-train``: ``--parallel {ddp,fsdp}``, ``--activation-checkpointing`` and ``--cpu-offload``.

They become the trainer's fields of the same names (`attnlab.train.TrainerConfig`); the sharding itself is
applied from outside the model by the trainer (`attnlab.train.sharded`). `check_parallel` refuses, before
anything is written, FSDP in a process that torchrun did not start and the FSDP-only options without it.
"""

from __future__ import annotations

import argparse
from typing import Any

PARALLEL_FIELDS = ("parallel", "activation_checkpointing", "cpu_offload")  # trainer.FIELD of the same name


def add_parallel_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The options' group on ``parser`` (one place for their names and help)."""
    group = parser.add_argument_group("several processes (under torchrun; docs/training.md)")
    group.add_argument(
        "--parallel", choices=("ddp", "fsdp"),
        help="under torchrun: ddp (a whole model per process, the default) or fsdp (parameters, gradients "
        "and optimizer state sharded over the processes; sharded checkpoints; docs/training.md)",
    )  # fmt: skip
    group.add_argument(
        "--activation-checkpointing", action="store_true",
        help="fsdp: keep no activations inside the layers, compute them again in backward (less memory)",
    )  # fmt: skip
    group.add_argument("--cpu-offload", action="store_true", help="fsdp: parameter shards in host memory")
    return group


def parallel_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The trainer fields the options set (those given only)."""
    return {name: getattr(args, name) for name in PARALLEL_FIELDS if getattr(args, name, None)}


def check_parallel(trainer_overrides: dict[str, Any], distributed: bool, command: str) -> None:
    """--parallel fsdp needs torchrun's processes; its options need it (checked before anything is
    written). ``command`` is named in the torchrun command the error suggests."""
    fsdp = trainer_overrides.get("parallel") == "fsdp"
    if fsdp and not distributed:
        raise ValueError(
            "--parallel fsdp shards the model over several processes and this is one: launch with "
            f"torchrun --nproc-per-node N -m attnlab {command} ... (N >= 2; docs/training.md)"
        )
    for flag in PARALLEL_FIELDS[1:]:
        if trainer_overrides.get(flag) and not fsdp:
            raise ValueError(f"--{flag.replace('_', '-')} is an option of --parallel fsdp; add it")
