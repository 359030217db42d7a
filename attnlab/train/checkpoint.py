"""Atomic training checkpoints.

A checkpoint is a directory ``<output_dir>/checkpoints/step-000123/`` holding

- ``model.safetensors``: the weights. Tensors that share storage (tied input/output embeddings) are
  stored once; the other names are listed in the metadata key ``attnlab.tied`` (alias -> stored name).
- ``training_state.pt``: optimizer, scheduler, GradScaler, RNG states (python, numpy, torch CPU, CUDA),
  data-loader state and step counters. Only tensors and primitive containers: it loads with
  ``torch.load(weights_only=True)``, which never runs pickled code.
- ``trainer_state.json``: the counters and config, for people and tools.

Writing is atomic: everything goes into a temporary directory beside the target, each file and the
directory are fsync-ed, and the directory is renamed into place (``os.replace``). A crash while writing
leaves at most a ``.tmp-*`` directory behind; earlier checkpoints are never touched until the new one
is complete, and `list_checkpoints` ignores anything that is not a finished ``step-*`` directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

MODEL_FILE = "model.safetensors"
STATE_FILE = "training_state.pt"
TRAINER_STATE_FILE = "trainer_state.json"
CHECKPOINT_DIR = "checkpoints"
_STEP_RE = re.compile(r"^step-(\d+)$")
_TIED_KEY = "attnlab.tied"


# --------------------------------------------------------------------------- model weights


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DistributedDataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


def save_model(model: nn.Module, path: str | Path) -> None:
    """Write ``unwrap_model(model).state_dict()`` to a safetensors file, each shared storage once."""
    state = unwrap_model(model).state_dict()
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    views: dict[tuple, str] = {}
    storages: set[tuple[str, int]] = set()
    for name, tensor in state.items():
        tensor = tensor.detach()
        storage = (str(tensor.device), tensor.untyped_storage().data_ptr())
        view = (storage, tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() > 0 and view in views:  # the same tensor under two names (weight tying)
            aliases[name] = views[view]
            continue
        if tensor.numel() == 0 or storage in storages or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)  # partial overlap: store a copy
        else:
            storages.add(storage)
            views[view] = name
        tensors[name] = tensor.cpu()
    save_file(tensors, str(path), metadata={"format": "pt", _TIED_KEY: json.dumps(aliases, sort_keys=True)})


def load_model(model: nn.Module, path: str | Path, strict: bool = True) -> None:
    """Load weights written by `save_model` into `model` (copying into its parameters: ties survive)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    tensors = load_file(str(path), device="cpu")
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    for alias, stored in json.loads(metadata.get(_TIED_KEY, "{}")).items():
        if stored not in tensors:
            raise ValueError(
                f"{path}: tied name {alias!r} points to {stored!r}, which the file does not hold"
            )
        tensors[alias] = tensors[stored]
    result = unwrap_model(model).load_state_dict(tensors, strict=strict)
    if not strict and (result.missing_keys or result.unexpected_keys):
        print(f"{path}: missing keys {result.missing_keys}, unexpected keys {result.unexpected_keys}")


# --------------------------------------------------------------------------- RNG states


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch CPU and CUDA generator states as tensors and primitive containers."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators captured by `rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:  # a different machine: restore what matches, in device order
            for index, s in enumerate(cuda[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(s, index)


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- directories


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Finished checkpoint directories under `root`, oldest step first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_RE.match(child.name)
        if match and child.is_dir() and (child / TRAINER_STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    checkpoints = list_checkpoints(root)
    return checkpoints[-1] if checkpoints else None


def prune_checkpoints(root: str | Path, keep_last: int | None) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; returns the deleted paths."""
    if keep_last is None:
        return []
    doomed = list_checkpoints(root)[:-keep_last]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def remove_stale_temporaries(root: str | Path) -> None:
    """Remove ``.tmp-*`` / ``.old-*`` directories left by a crash during a save."""
    root = Path(root)
    if root.is_dir():
        for child in root.iterdir():
            if child.is_dir() and (child.name.startswith(".tmp-") or child.name.startswith(".old-")):
                shutil.rmtree(child, ignore_errors=True)


def _fsync_path(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # some platforms cannot open directories; nothing more we can do there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_directory(target: str | Path, write: Callable[[Path], None]) -> Path:
    """Create directory `target` atomically: `write(tmp)` fills a temporary sibling, then it is renamed.

    A target that already exists (re-saving the same step after a resume) is moved aside first and
    deleted only after the new one is in place.
    """
    target = Path(target)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=parent))
    try:
        write(tmp)
        for child in tmp.rglob("*"):
            if child.is_file():
                _fsync_path(child)
        _fsync_path(tmp, directory=True)
        old = None
        if target.exists():
            old = parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
            os.replace(target, old)
        os.replace(tmp, target)
        _fsync_path(parent, directory=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    training_state: dict[str, Any],
    trainer_state: dict[str, Any],
) -> Path:
    """Write a checkpoint directory atomically (see the module docstring for its files)."""

    def write(tmp: Path) -> None:
        save_model(model, tmp / MODEL_FILE)
        torch.save(training_state, tmp / STATE_FILE)
        (tmp / TRAINER_STATE_FILE).write_text(
            json.dumps(trainer_state, indent=2, sort_keys=True, default=str) + "\n"
        )

    return atomic_directory(path, write)


def load_training_state(path: str | Path) -> dict[str, Any]:
    """``training_state.pt`` of a checkpoint directory, loaded without unpickling code."""
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file}: not a checkpoint (no {STATE_FILE})")
    return torch.load(file, map_location="cpu", weights_only=True)
