"""The Reformer family: attnlab's Reformer directories and HF ``ReformerModelWithLMHead`` directories.

attnlab's directory is ``config.json`` (``{"format": "attnlab", "architecture": "Reformer", "config":
<ReformerConfig>}``) + ``model.safetensors`` (`Reformer`'s state dict) + the manifest; HF's saved directories
(``model_type`` reformer) are read through `attnlab.io.hf_reformer`. There is no export to HF's layout: the
model's local attention and its chunked feed-forward are attnlab's, not HF's axial positions.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from attnlab.io.checkpoint import load_state_checked
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    check_directory,
    dataclass_from_fields,
    read_json,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    write_model_files,
    written_by_attnlab,
)
from attnlab.io.hf_reformer import load_hf_reformer
from attnlab.io.registry import ModelFamily, register
from attnlab.manifest import verify_directory, write_manifest
from attnlab.models.reformer import Reformer, ReformerConfig

ARCHITECTURE = "Reformer"


def save_reformer(
    model: Reformer,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (each atomically), then the
    manifest."""
    aliases = tied_aliases(model)
    target = resolve_dtype(dtype)
    tensors = {
        k: v.to(target) if target is not None and v.is_floating_point() else v
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    write_model_files(directory, tensors, ARCHITECTURE, dataclasses.asdict(model.config), aliases)
    write_manifest(directory, [WEIGHTS_NAME, CONFIG_NAME], run_id=run_id)
    return Path(directory)


def load_reformer(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> Reformer:
    """A `Reformer` in eval mode from attnlab's directory or HF's."""
    directory = check_directory(directory)
    path = directory / CONFIG_NAME
    raw = read_json(path)
    if not written_by_attnlab(raw):
        model = load_hf_reformer(directory)
    else:
        verify_directory(directory, [CONFIG_NAME])
        if raw.get("architecture") != ARCHITECTURE:
            raise CheckpointError(
                f"{path}: field 'architecture' is {raw.get('architecture')!r}, expected 'Reformer'"
            )
        config = dataclass_from_fields(ReformerConfig, raw.get("config"), f"{path}: field 'config'")
        tensors, _ = read_safetensors(directory / WEIGHTS_NAME)
        model = Reformer(config)
        load_state_checked(
            model, tensors, source=str(directory / WEIGHTS_NAME), architecture=ARCHITECTURE, config=config
        )
    target = resolve_dtype(dtype)
    return (model if target is None else model.to(dtype=target)).to(device).eval()


def reads(directory: Path, raw: dict[str, Any] | None) -> bool:
    """attnlab's Reformer directories (``architecture`` Reformer) and HF's (``model_type`` reformer)."""
    if raw is None:
        return False
    if written_by_attnlab(raw):
        return raw.get("architecture") == ARCHITECTURE
    return raw.get("model_type") == "reformer"


FAMILY = register(
    ModelFamily(
        name="reformer",
        what="a Reformer",
        model_types=(Reformer,),
        reads=reads,
        load=load_reformer,
        save=save_reformer,
        commands="attnlab.io.load (no command generates with a Reformer yet)",
    )
)
