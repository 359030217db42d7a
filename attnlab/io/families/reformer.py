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

from attnlab.io.format import (
    CONFIG_NAME,
    check_directory,
    read_json,
    written_by_attnlab,
)
from attnlab.io.hf_reformer import load_hf_reformer
from attnlab.io.model_files import placed, read_model_directory, save_model_directory
from attnlab.io.registry import ModelFamily, register
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
    config = dataclasses.asdict(model.config)
    return save_model_directory(model, directory, ARCHITECTURE, config, dtype=dtype, run_id=run_id)


def load_reformer(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> Reformer:
    """A `Reformer` in eval mode from attnlab's directory or HF's."""
    directory = check_directory(directory)
    raw = read_json(directory / CONFIG_NAME)
    if not written_by_attnlab(raw):
        return placed(load_hf_reformer(directory), dtype, device)
    model = read_model_directory(directory, raw, ARCHITECTURE, ReformerConfig, Reformer)
    return placed(model, dtype, device)


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
