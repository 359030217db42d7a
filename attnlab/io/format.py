"""The file format under every attnlab model directory and checkpoint: safetensors, ties, the manifest.

A model directory is ``config.json`` + ``model.safetensors`` (+ ``manifest.json``). This module reads and
writes those files and nothing above them:

- `write_safetensors_atomic` / `read_safetensors`: tensors written atomically (temporary file in the same
  directory, fsync, ``os.replace``: a crash leaves the old file or the new one); read back verified against
  the directory's manifest (`attnlab.manifest`: a flipped bit, a zeroed block, a truncated copy is an error
  naming the file) and for finiteness (an error naming the directory and the tensor). Reading never
  unpickles: a pickle (``torch.save``) file where safetensors was expected is reported as such.
- `tied_aliases`: the one detector of tied weights (one tensor under two names, stored once under the first);
- `read_json`, `write_model_files`, `written_by_attnlab`: ``config.json`` with errors naming file, line and
  field; attnlab's format fields (``"format": "attnlab"``, ``format_version``, ``architecture``, ``tied``).

Model families (`attnlab.io.families`) build on this; `attnlab.io.load` / `attnlab.io.save` sit on top.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from attnlab import __version__
from attnlab.atomic import atomic_path, write_json_atomic
from attnlab.manifest import IntegrityError, verify_file

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_NAME = "attnlab"
FORMAT_VERSION = 1

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class CheckpointError(ValueError):
    """A checkpoint directory or file whose content is not what the loader expected."""


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``"float32" | "bfloat16" | "float16" | torch.dtype | None`` -> a torch dtype (None stays None)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        if dtype is not None and dtype not in DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}; valid: {', '.join(DTYPES)}")
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def write_safetensors_atomic(
    tensors: Mapping[str, Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (distinct storages, any device) to ``path`` as safetensors, atomically."""
    with atomic_path(path) as tmp:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp, metadata=dict(metadata or {})
        )


def _looks_like_pickle(path: Path) -> str | None:
    """Name the pickle flavour if ``path`` starts like a ``torch.save`` file, else None."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive as written by torch.save"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "a pickle (legacy torch.save format)"
    return None


def check_finite(tensors: Mapping[str, Tensor], source: str | os.PathLike) -> None:
    """Refuse weights holding NaN or Inf: an error naming ``source`` (the model directory) and the tensor."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{source}: tensor {name!r} holds {bad} non-finite value(s) (NaN or Inf) of "
                f"{tensor.numel()}; the weights are damaged or come from a diverged run, refusing to use them"
            )


def read_safetensors(
    path: str | os.PathLike, finite: bool = True
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """All tensors of a safetensors file and its metadata, with errors that name the file.

    A missing file raises FileNotFoundError; a corrupt or truncated one, a pickle in its place, or
    (``finite``) a tensor holding NaN / Inf raises CheckpointError; a file that differs from its
    directory's manifest raises `attnlab.manifest.IntegrityError`. Pickles are never loaded here.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    try:
        verify_file(path)  # against the directory's manifest.json, when it lists the file
    except IntegrityError as e:
        kind = _looks_like_pickle(path)
        if kind is None:
            raise
        raise CheckpointError(
            f"{path}: expected a safetensors file but found {kind}; attnlab never unpickles weights (and "
            "this is not the file its manifest.json lists)"
        ) from e
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            metadata = dict(f.metadata() or {})
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, RuntimeError) as e:
        kind = _looks_like_pickle(path)
        if kind is not None:
            raise CheckpointError(
                f"{path}: expected a safetensors file but found {kind}; attnlab never unpickles weights. "
                "If the file comes from a source you trust, convert it first, e.g. "
                "safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')"
            ) from e
        size = path.stat().st_size
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({size} bytes; corrupt or truncated?): {e}"
        ) from e
    if finite:
        check_finite(tensors, f"{path.parent} ({path.name})")
    return tensors, metadata


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON object from ``path``, with the file, line and column on a syntax error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    return obj


def check_directory(directory: str | os.PathLike) -> Path:
    directory = Path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"{directory}: no such checkpoint directory")
    if not directory.is_dir():
        raise NotADirectoryError(
            f"{directory}: a checkpoint is a directory (config.json + model.safetensors)"
        )
    return directory


def tied_aliases(model_or_state: nn.Module | Mapping[str, Tensor]) -> dict[str, str]:
    """``{alias: source}`` for state-dict entries that are the same tensor as an earlier entry.

    For a module, two names are tied when they hold the same Parameter object (``head.decoder.weight``
    and ``encoder.embeddings.word.weight`` after ``decoder.weight = word.weight``); this works on the
    meta device too. For a mapping of tensors, when they share device, storage, offset, shape, strides and
    dtype (the training checkpoints' `attnlab.train.checkpoint.save_model` stores each once this way).
    """
    if isinstance(model_or_state, nn.Module):
        state = model_or_state.state_dict(keep_vars=True)
        keys = {name: (id(t),) for name, t in state.items()}
    else:  # empty tensors share no values, whatever their pointers say
        keys = {
            name: (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype)
            for name, t in model_or_state.items()
            if t.numel() > 0
        }
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, key in keys.items():
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    return aliases


def write_model_files(
    directory: str | os.PathLike,
    tensors: Mapping[str, Tensor],
    architecture: str,
    config: Mapping[str, Any],
    aliases: Mapping[str, str],
    hf_fields: Mapping[str, Any] | None = None,
) -> Path:
    """``model.safetensors`` (``tensors``, tied aliases already left out) and ``config.json`` (attnlab's
    format fields, ``architecture``, ``tied`` = ``aliases``, ``config``; after ``hf_fields`` when the
    directory takes HF's layout) into ``directory``, each atomically; the caller writes the manifest. For
    the decoder directories (`io.families.gpt2`, `io.families.transfo_xl`); encoders: `io.families.bert`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_atomic(dict(tensors), directory / WEIGHTS_NAME, metadata={"format": "pt"})
    write_json_atomic(
        {
            **(hf_fields or {}),
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "attnlab_version": __version__,
            "architecture": architecture,
            "tied": dict(aliases),
            "config": dict(config),
        },
        directory / CONFIG_NAME,
    )
    return directory


CAUSAL_LM_ARCHITECTURE = "GPT"  # attnlab.io.families.gpt2.s directories (config.json "architecture")


def written_by_attnlab(raw: Mapping[str, Any]) -> bool:
    """Whether a ``config.json`` dict is attnlab's own: ``"format": "attnlab"`` and not re-written by HF
    transformers. A directory in HF's layout (`attnlab.io.hf_layout`) that HF loaded and saved again keeps
    attnlab's fields (HF keeps unknown config fields) but may have other weights or another head: HF's
    ``save_pretrained`` adds ``transformers_version``, which attnlab never writes, and such a directory is
    read as the HF checkpoint it now is."""
    return raw.get("format") == FORMAT_NAME and "transformers_version" not in raw


def dataclass_from_fields(cls: type, data: Any, source: str) -> Any:
    """``cls(**data)`` for a config dataclass read from ``config.json``; unknown names and bad values raise a
    `CheckpointError` naming ``source`` (the file and field)."""
    if not isinstance(data, Mapping):
        raise CheckpointError(
            f"{source}: expected an object of {cls.__name__} fields, found {type(data).__name__}"
        )
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise CheckpointError(f"{source}: unknown {cls.__name__} field(s) {', '.join(unknown)}")
    try:
        return cls(**data)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from e
