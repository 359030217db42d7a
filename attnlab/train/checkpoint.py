"""Atomic training checkpoints.

A checkpoint is a directory ``<output_dir>/checkpoints/step-000123/`` holding

- ``model.safetensors``: the weights. Tensors that share storage (tied input/output embeddings) are
  stored once; the other names are listed in the metadata key ``attnlab.tied`` (alias -> stored name).
- ``training_state.pt``: optimizer, scheduler, GradScaler, RNG states (python, numpy, torch CPU, CUDA),
  data-loader state and step counters (and, for a module that carries state between steps, every rank's
  ``carried_state()``: Transformer-XL's memory). Only tensors and primitive containers: it loads with
  ``torch.load(weights_only=True)``, which never runs pickled code.
- ``trainer_state.json``: the counters and config, for people and tools.
- ``manifest.json`` (`attnlab.manifest`): SHA-256 and size of the three files above and the run id,
  written after them. `read_checkpoint` verifies it before anything is loaded: a flipped bit, a zeroed
  block or a truncated file is an `IntegrityError` naming the file (and `Trainer.resume` falls back to
  the newest checkpoint that verifies).

Writing is atomic: everything goes into a temporary directory beside the target, each file and the
directory are fsync-ed, and the directory is renamed into place (``os.replace``). A crash while writing
leaves at most a ``.tmp-*`` directory behind; earlier checkpoints are never touched until the new one
is complete, and `list_checkpoints` ignores anything that is not a finished ``step-*`` directory. The
directory and its files get the modes ``mkdir`` and ``open`` give (the umask decides), and a save that runs
out of space or permission is an `attnlab.atomic.WriteError` naming the folder and the space needed.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from attnlab.atomic import free_bytes, make_temporary_directory, widen_to_default_mode, write_failure
from attnlab.io.format import tied_aliases
from attnlab.limits import SEED_MAX, check_range
from attnlab.manifest import IntegrityError, read_manifest, verify_directory, write_manifest

MODEL_FILE = "model.safetensors"
STATE_FILE = "training_state.pt"
TRAINER_STATE_FILE = "trainer_state.json"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_FILES = (MODEL_FILE, STATE_FILE, TRAINER_STATE_FILE)  # what a checkpoint's manifest lists
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
    """Write ``unwrap_model(model).state_dict()`` to a safetensors file, each shared storage once: a tensor
    tied to an earlier one (`attnlab.io.format.tied_aliases`) is listed in the metadata, not stored."""
    state = {name: tensor.detach() for name, tensor in unwrap_model(model).state_dict().items()}
    aliases = tied_aliases(state)
    tensors: dict[str, torch.Tensor] = {}
    storages: set[tuple[str, int]] = set()
    for name, tensor in state.items():
        if name in aliases:
            continue
        storage = (str(tensor.device), tensor.untyped_storage().data_ptr())
        if tensor.numel() == 0 or storage in storages or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)  # partial overlap: store a copy
        else:
            storages.add(storage)
        tensors[name] = tensor.cpu()
    save_file(tensors, str(path), metadata={"format": "pt", _TIED_KEY: json.dumps(aliases, sort_keys=True)})
    widen_to_default_mode(path)  # save_file writes 0600 whatever the umask


def read_model_file(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a file written by `save_model`, tied names filled in (one tensor, several names).

    A corrupt or truncated file is an `IntegrityError` naming it (never a bare safetensors traceback)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    try:
        tensors = load_file(str(path), device="cpu")
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        tied = json.loads(metadata.get(_TIED_KEY, "{}"))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise IntegrityError(
            f"{path}: not a readable safetensors file ({path.stat().st_size} bytes; damaged or "
            f"truncated?): {e}"
        ) from e
    for alias, stored in tied.items():
        if stored not in tensors:
            raise IntegrityError(
                f"{path}: tied name {alias!r} points to {stored!r}, which the file does not hold"
            )
        tensors[alias] = tensors[stored]
    return tensors


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
    """Seed python, numpy and torch (CPU and every CUDA device); a seed torch cannot take (outside 0 to
    2**64 - 1) is a ValueError with that range."""
    check_range("seed", seed, 0, SEED_MAX, "torch takes an unsigned 64-bit seed")
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


def atomic_directory(target: str | Path, write: Callable[[Path], None], needed: int | None = None) -> Path:
    """Create directory `target` atomically: `write(tmp)` fills a temporary sibling, then it is renamed.

    A target that already exists (re-saving the same step after a resume) is moved aside first and
    deleted only after the new one is in place. A failure for want of space (``needed`` bytes, when the
    caller knows) or permission is a `WriteError` naming `target`'s folder; the temporary is removed.
    """
    target = Path(target)
    parent = target.parent
    tmp = free = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        free = free_bytes(parent) if needed is not None else None  # before the write takes any
        tmp = make_temporary_directory(parent, f".tmp-{target.name}-")
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
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        failure = write_failure(e, parent, needed, free) if isinstance(e, Exception) else None
        if failure is not None and failure is not e:
            raise failure from e
        raise
    return target


def _tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors inside nested dicts/lists/tuples (what a save of ``obj`` needs, roughly)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def save_checkpoint(
    path: str | Path,
    model: nn.Module,
    training_state: dict[str, Any],
    trainer_state: dict[str, Any],
    run_id: str | None = None,
) -> Path:
    """Write a checkpoint directory atomically (see the module docstring for its files); ``run_id`` goes
    into its manifest."""

    def write(tmp: Path) -> None:
        save_model(model, tmp / MODEL_FILE)
        torch.save(training_state, tmp / STATE_FILE)
        (tmp / TRAINER_STATE_FILE).write_text(
            json.dumps(trainer_state, indent=2, sort_keys=True, default=str) + "\n"
        )
        write_manifest(tmp, CHECKPOINT_FILES, run_id=run_id)  # after the files it vouches for

    needed = _tensor_bytes(unwrap_model(model).state_dict()) + _tensor_bytes(training_state)
    return atomic_directory(path, write, needed=needed)


def verify_checkpoint(path: str | Path) -> str | None:
    """Check a checkpoint directory against its manifest (which must list all of `CHECKPOINT_FILES`);
    returns its run id. Raises `IntegrityError` naming the damaged, truncated or missing file."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint directory")
    manifest = verify_directory(path, required=True)
    assert manifest is not None
    unlisted = [name for name in CHECKPOINT_FILES if name not in manifest.files]
    if unlisted:
        raise IntegrityError(f"{path}/manifest.json: does not list {', '.join(unlisted)}")
    return manifest.run_id


def checkpoint_run_id(path: str | Path) -> str | None:
    """The run id in a checkpoint's manifest (None when it has none or it is unreadable); not verified."""
    try:
        manifest = read_manifest(path)
    except IntegrityError:
        return None
    return manifest.run_id if manifest is not None else None


def load_training_state(path: str | Path) -> dict[str, Any]:
    """``training_state.pt`` of a checkpoint directory, loaded without unpickling code."""
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file}: not a checkpoint (no {STATE_FILE})")
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # a damaged zip or pickle stream: torch raises many kinds
        raise IntegrityError(
            f"{file}: unreadable training state ({file.stat().st_size} bytes; damaged or truncated?): "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from e


@dataclass
class CheckpointContents:
    path: Path
    run_id: str | None  # from the manifest
    tensors: dict[str, torch.Tensor]  # model weights, tied names filled in
    state: dict[str, Any]  # training_state.pt


def read_checkpoint(path: str | Path) -> CheckpointContents:
    """Verify a checkpoint directory, then read its weights and training state (nothing is applied)."""
    path = Path(path)
    run_id = verify_checkpoint(path)
    return CheckpointContents(path, run_id, read_model_file(path / MODEL_FILE), load_training_state(path))
