"""The frame every attnlab model family shares: a directory written from a model, read back into one.

`save_model_directory` writes ``model.safetensors`` (tied weights stored once) + ``config.json``
(`attnlab.io.format.write_model_files`) and then the manifest; `read_model_directory` checks the
``architecture`` field, verifies the manifest, parses the config, builds the model and copies the weights
in (`attnlab.io.checkpoint.load_state_checked`); `placed` casts and moves a loaded model and puts it in
eval mode. A family (`attnlab.io.families`) adds only what is its own: its config class, its builder, its
HF form.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io.checkpoint import SkipRandomInit, load_state_checked
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    dataclass_from_fields,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    write_model_files,
)
from attnlab.manifest import verify_directory, write_manifest


def save_model_directory(
    model: nn.Module,
    directory: str | os.PathLike,
    architecture: str,
    config: Mapping[str, Any],
    *,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    tensors: Mapping[str, Tensor] | None = None,
    hf_fields: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` into ``directory``: its state dict without tied aliases (or ``tensors``, a family's own
    layout of them), floating tensors cast to ``dtype``, and ``config.json`` with ``architecture``,
    ``config`` and ``hf_fields``; each file atomically, the manifest last."""
    aliases = tied_aliases(model)
    if tensors is None:
        tensors = {k: v for k, v in model.state_dict().items() if k not in aliases}
    target = resolve_dtype(dtype)
    if target is not None:
        tensors = {k: v.to(target) if v.is_floating_point() else v for k, v in tensors.items()}
    write_model_files(directory, tensors, architecture, config, aliases, hf_fields)
    write_manifest(directory, [WEIGHTS_NAME, CONFIG_NAME], run_id=run_id)
    return Path(directory)


def read_model_directory(
    directory: Path,
    raw: Mapping[str, Any],
    architecture: str,
    parse_config: type | Callable[[Any, str], Any],
    build: Callable[[Any], nn.Module],
    *,
    convert: Callable[[dict[str, Tensor], Any], dict[str, Tensor]] | None = None,
) -> nn.Module:
    """The model of attnlab's own ``directory`` whose ``config.json`` is ``raw``: ``architecture`` checked,
    the manifest verified, the config parsed (``parse_config`` a config dataclass, or a function of
    ``(raw["config"], source)`` that raises naming ``source``),
    ``build(config)`` without random initialisation (every weight is loaded next), the weights (``convert``ed
    from a family's own layout, where given) copied in with errors that name the file and the key."""
    path = directory / CONFIG_NAME
    if raw.get("architecture") != architecture:
        raise CheckpointError(
            f"{path}: field 'architecture' is {raw.get('architecture')!r}, expected {architecture!r}"
        )
    verify_directory(directory, [CONFIG_NAME])
    source = f"{path}: field 'config'"
    if isinstance(parse_config, type):
        config = dataclass_from_fields(parse_config, raw.get("config"), source)
    else:
        config = parse_config(raw.get("config"), source)
    tensors, _ = read_safetensors(directory / WEIGHTS_NAME)
    if convert is not None:
        tensors = convert(tensors, config)
    with SkipRandomInit():
        model = build(config)
    load_state_checked(
        model, tensors, source=str(directory / WEIGHTS_NAME), architecture=architecture, config=config
    )
    return model


def placed(model: nn.Module, dtype: str | torch.dtype | None, device: str | torch.device) -> nn.Module:
    """``model`` cast to ``dtype`` (None: as stored), on ``device``, in eval mode, as every loader returns."""
    target = resolve_dtype(dtype)
    return (model if target is None else model.to(dtype=target)).to(device).eval()
