"""Sharded checkpoints of a model trained with ``parallel="fsdp"`` (`torch.distributed.checkpoint`).

A sharded checkpoint is a directory ``<output_dir>/checkpoints/step-000123/`` holding

- ``sharded/``: the model's and the optimizer's shards as ``torch.distributed.checkpoint`` writes them, one
  ``__R_0.distcp`` file per rank and a ``.metadata`` file with every tensor's global shape;
- ``training_state.pt``, ``trainer_state.json`` and ``manifest.json`` as in a full checkpoint
  (`attnlab.train.checkpoint`), written by rank 0; the training state also records the layout
  (``parallel``, ``world_size``, ``global_batch``).

Saving is atomic as for a full checkpoint: every rank writes its shards into ``.tmp-step-000123`` beside the
target; after a barrier, rank 0 writes the training state and the manifest (hashing every shard file), then
renames the folder into place. A run killed during a save leaves only the temporary folder, which
`list_checkpoints` does not see and the next `train` removes: a resume takes the previous checkpoint.

The trainer reaches both layouts through the calls at the end of this module, so that its loop does not
branch on the layout: `training_layout` (recorded in the training state), `write_checkpoint` (full or
sharded, by the model), `newest_readable_checkpoint` (the newest that verifies, either layout) and
`restore_checkpoint` (by the checkpoint, refused for the other layout).

Loading goes through ``get_state_dict`` / ``set_state_dict`` (torch.distributed.checkpoint.state_dict):
each rank asks for the shards of its own layout, so a checkpoint written by 4 processes loads into 2 (or 2
into 4). Before anything is read, the checkpoint's tensor names and shapes are compared with the model's,
so that a checkpoint of another model is a clear error, not a failure deep inside the loader.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from attnlab.manifest import IntegrityError, verify_directory, write_manifest

from .checkpoint import (
    STATE_FILE,
    TRAINER_STATE_FILE,
    CheckpointContents,
    list_checkpoints,
    load_training_state,
    prune_checkpoints,
    read_checkpoint,
    save_checkpoint,
    unwrap_model,
)
from .distributed import DistributedContext, barrier, broadcast_object
from .sharded import is_sharded

SHARDED_DIR = "sharded"  # inside a checkpoint directory: torch.distributed.checkpoint's files
_METADATA = ".metadata"


def is_sharded_checkpoint(path: str | Path) -> bool:
    """Whether the checkpoint directory ``path`` was written by `save_sharded_checkpoint`."""
    return (Path(path) / SHARDED_DIR).is_dir()


def _listed_files(directory: Path) -> list[str]:
    """Every file under ``directory``, as paths relative to it (the shard files included)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def save_sharded_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    training_state: dict[str, Any] | None,
    trainer_state: dict[str, Any] | None,
    context: DistributedContext,
    run_id: str | None = None,
) -> Path:
    """Write a sharded checkpoint at ``path`` (collective: every rank calls it; ``training_state`` and
    ``trainer_state`` are rank 0's, None elsewhere). Returns ``path``."""
    path = Path(path)
    tmp = path.parent / f".tmp-{path.name}"
    if context.is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed during this same save
        tmp.mkdir(parents=True)
    barrier(context)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optimizer_state}, checkpoint_id=str(tmp / SHARDED_DIR))
    barrier(context)  # every rank's shards are on disk
    if context.is_main:
        assert training_state is not None and trainer_state is not None
        torch.save(training_state, tmp / STATE_FILE)
        (tmp / TRAINER_STATE_FILE).write_text(
            json.dumps(trainer_state, indent=2, sort_keys=True, default=str) + "\n"
        )
        write_manifest(tmp, _listed_files(tmp), run_id=run_id)  # after the files it vouches for
        old = None
        if path.exists():  # the same step saved again after a resume
            old = path.parent / f".old-{path.name}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    barrier(context)
    return path


def verify_sharded_checkpoint(path: str | Path) -> str | None:
    """Check a sharded checkpoint against its manifest; returns its run id. A damaged, truncated or
    missing file (a shard included) is an `IntegrityError` naming it."""
    path = Path(path)
    manifest = verify_directory(path, required=True)
    assert manifest is not None
    needed = (STATE_FILE, TRAINER_STATE_FILE, f"{SHARDED_DIR}/{_METADATA}")
    unlisted = [name for name in needed if name not in manifest.files]
    if unlisted:
        raise IntegrityError(f"{path}/manifest.json: does not list {', '.join(unlisted)}")
    return manifest.run_id


def _check_same_model(path: Path, model_state: dict[str, Any]) -> None:
    """The checkpoint's weights must have this model's names and global shapes."""
    metadata = dcp.FileSystemReader(str(path / SHARDED_DIR)).read_metadata().state_dict_metadata
    saved = {
        key.removeprefix("model."): tuple(entry.size)
        for key, entry in metadata.items()
        if key.startswith("model.") and isinstance(entry, TensorStorageMetadata)
    }
    here = {name: tuple(tensor.shape) for name, tensor in model_state.items()}
    missing = sorted(set(here) - set(saved))
    unexpected = sorted(set(saved) - set(here))
    reshaped = sorted(n for n in set(here) & set(saved) if here[n] != saved[n])
    if missing or unexpected or reshaped:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            problems.append(f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
        for name in reshaped[:3]:
            problems.append(f"{name}: {list(saved[name])} in the checkpoint, {list(here[name])} here")
        raise ValueError(f"{path}: a checkpoint of another model ({'; '.join(problems)})")


def load_sharded_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, context: DistributedContext
) -> dict[str, Any]:
    """Load the model's and optimizer's shards of ``path`` into this rank's layout (any world size) and
    return the training state. Collective. Rank 0 verifies the manifest and the model first; every rank
    raises the same error if either fails."""
    path = Path(path)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    problem = None
    if context.is_main:
        try:
            verify_sharded_checkpoint(path)
            _check_same_model(path, model_state)
        except (IntegrityError, ValueError, FileNotFoundError) as e:
            problem = (type(e).__name__, str(e))
    problem = broadcast_object(problem, context)
    if problem is not None:
        kind, message = problem
        raise {"IntegrityError": IntegrityError, "FileNotFoundError": FileNotFoundError}.get(
            kind, ValueError
        )(message)
    state = {"model": model_state, "optim": optimizer_state}
    dcp.load(state, checkpoint_id=str(path / SHARDED_DIR))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return load_training_state(path)


def read_sharded_weights(path: str | Path, template: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The whole model's weights in the sharded checkpoint ``path``, read by this process alone (not a
    collective: e.g. rank 0 averaging checkpoints after the run). ``template`` is a plain (unsharded) model's
    state dict: its names, shapes and dtypes. A tied weight saved under one name only is left out; the
    caller fills its aliases. The manifest is verified first."""
    path = Path(path)
    verify_sharded_checkpoint(path)
    metadata = dcp.FileSystemReader(str(path / SHARDED_DIR)).read_metadata().state_dict_metadata
    weights = {
        name: torch.empty(tensor.shape, dtype=tensor.dtype)
        for name, tensor in template.items()
        if f"model.{name}" in metadata
    }
    dcp.load({"model": weights}, checkpoint_id=str(path / SHARDED_DIR), no_dist=True)
    return weights


def check_layout(path: str | Path, sharded_model: bool) -> None:
    """A sharded checkpoint resumes a sharded model only, a full one an unsharded model only."""
    sharded_checkpoint = is_sharded_checkpoint(path)
    if sharded_checkpoint != sharded_model:
        written = "parallel='fsdp' (sharded)" if sharded_checkpoint else "parallel='ddp' (full)"
        asked = "fsdp" if sharded_model else "ddp"
        raise ValueError(
            f"{path}: a checkpoint written with {written}, resumed with parallel={asked!r}; resume it with "
            f"the layout that wrote it (--parallel {'fsdp' if sharded_checkpoint else 'ddp'})"
        )


def loader_state_for(path: str | Path, state: dict[str, Any], loader: Any) -> dict[str, Any]:
    """The saved data position, translated to this run's number of processes.

    A position counts global batches, so it carries over to another world size when the global batch
    (per-process batch x processes) is the same: then every example is read once, in the same order, as
    in an uninterrupted run. Another global batch is an error that says which per-process batch fits."""
    saved = dict(state["loader"])
    world_size, batch = getattr(loader, "world_size", 1), getattr(loader, "batch_size", None)
    saved_world = saved.get("world_size", world_size)
    if saved_world == world_size:
        return saved
    global_batch = (state.get("layout") or {}).get("global_batch")
    if global_batch is None or batch is None or batch * world_size != global_batch:
        if global_batch is not None and global_batch % world_size:
            fit = f"{world_size} processes do not divide the global batch {global_batch}"
        elif global_batch is not None:
            fit = f"resume with a batch of {global_batch // world_size} per process"
        else:
            fit = "the checkpoint does not record its global batch"
        raise ValueError(
            f"{path}: written by {saved_world} processes with a global batch of {global_batch}, resumed by "
            f"{world_size} x {batch} = {None if batch is None else batch * world_size}: {fit}"
        )
    saved["world_size"] = world_size
    return saved


# ------------------------------------------------------------------ the trainer's calls, for both layouts


def training_layout(model: nn.Module, context: DistributedContext, batch_size: int | None) -> dict[str, Any]:
    """How the run is spread over processes, recorded in the training state: ``parallel``, ``world_size``
    and the global batch (what a resume on another number of processes must keep)."""
    return {
        "parallel": "fsdp" if is_sharded(model) else "ddp",
        "world_size": context.world_size,
        "global_batch": batch_size * context.world_size if isinstance(batch_size, int) else None,
    }


def write_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any] | None,
    trainer_state: dict[str, Any] | None,
    context: DistributedContext,
    *,
    run_id: str | None,
    keep_last: int | None,
) -> Path:
    """Save ``path`` and prune old checkpoints (collective). A sharded model: every rank writes its shards
    and the optimizer's (`save_sharded_checkpoint`); else rank 0 writes the whole model and the optimizer's
    state, which ``state`` then holds. ``state``/``trainer_state``: rank 0's, None on the others."""
    if is_sharded(model):
        save_sharded_checkpoint(path, model, optimizer, state, trainer_state, context, run_id=run_id)
    elif context.is_main:
        assert state is not None and trainer_state is not None
        state = {**state, "optimizer": optimizer.state_dict()}
        save_checkpoint(path, model, state, trainer_state, run_id=run_id)
    if context.is_main:
        prune_checkpoints(path.parent, keep_last)
    barrier(context)
    return path


def read_any_checkpoint(path: Path) -> CheckpointContents:
    """Verify ``path`` against its manifest and read what can be read before the model is touched: a full
    checkpoint's weights and state; a sharded one's run id only (`restore_checkpoint` reads the rest)."""
    if is_sharded_checkpoint(path):
        return CheckpointContents(path, verify_sharded_checkpoint(path), {}, {})
    return read_checkpoint(path)


def restore_checkpoint(
    contents: CheckpointContents,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    context: DistributedContext,
) -> dict[str, Any]:
    """Load the weights and the optimizer's state of ``contents`` into ``model`` and ``optimizer`` (a
    collective call for a sharded model) and return the training state. The layout must match the
    model's (`check_layout`)."""
    check_layout(contents.path, is_sharded(model))
    if is_sharded(model):
        return load_sharded_checkpoint(contents.path, model, optimizer, context)
    unwrap_model(model).load_state_dict(contents.tensors, strict=True)
    optimizer.load_state_dict(contents.state["optimizer"])
    return contents.state


def newest_readable_checkpoint(root: Path, checkpoint: str | Path) -> tuple[CheckpointContents, list[str]]:
    """`Trainer.resume`'s choice: ``checkpoint`` itself (a directory), or with ``"latest"`` the newest
    checkpoint under ``root`` that verifies against its manifest (full or sharded), read by
    `read_any_checkpoint`; and why each newer one was passed over. A named checkpoint that does not verify
    is an `IntegrityError`, as is a ``root`` where none does."""
    if str(checkpoint) == "latest":
        candidates = list_checkpoints(root)[::-1]  # newest first
        if not candidates:
            raise FileNotFoundError(f"Trainer.resume: no checkpoint under {root}")
    else:
        candidates = [Path(checkpoint)]
        if not Path(checkpoint).is_dir():
            known = ", ".join(p.name for p in list_checkpoints(Path(checkpoint).parent)) or "none"
            raise FileNotFoundError(
                f"Trainer.resume: {checkpoint} is not a checkpoint directory (checkpoints there: {known})"
            )
    failures: list[str] = []
    contents: CheckpointContents | None = None
    for path in candidates:
        try:
            contents = read_any_checkpoint(path)  # a sharded one: verified, read when applied
            break
        except (IntegrityError, FileNotFoundError) as e:
            if len(candidates) == 1 and str(checkpoint) != "latest":
                raise
            failures.append(f"{path.name}: {e}")
    if contents is None:
        raise IntegrityError(
            f"Trainer.resume: no checkpoint under {root} verifies:\n  " + "\n  ".join(failures)
        )
    return contents, failures
