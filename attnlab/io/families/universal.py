"""The Universal Transformer family: a `TaggingModel` built from a `UniversalConfig`.

Its directory is ``config.json`` (``{"format": "attnlab", "architecture": "UniversalTagging", "config":
<UniversalConfig>}``) + ``model.safetensors`` (the tied output projection stored once, under the embedding's
name) + the manifest. A `TaggingModel` composed by hand has no config to record: build it with
`attnlab.models.universal_config.build_tagging_model` to save it. HF transformers has no Universal
Transformer.
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
from attnlab.io.model_files import placed, read_model_directory, save_model_directory
from attnlab.io.registry import ModelFamily, register
from attnlab.models.universal import TaggingModel
from attnlab.models.universal_config import UniversalConfig, build_tagging_model

ARCHITECTURE = "UniversalTagging"


def save_universal(
    model: TaggingModel,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (each atomically; the tied output
    projection once, under the embedding's name), then the manifest."""
    config = getattr(model, "config", None)
    if not isinstance(config, UniversalConfig):
        raise TypeError(
            "this TaggingModel has no UniversalConfig `config`; build it with "
            "attnlab.models.universal_config.build_tagging_model to save it"
        )
    return save_model_directory(
        model, directory, ARCHITECTURE, dataclasses.asdict(config), dtype=dtype, run_id=run_id
    )


def load_universal(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> TaggingModel:
    """The `TaggingModel` of a directory `save_universal` wrote, in eval mode."""
    directory = check_directory(directory)
    model = read_model_directory(
        directory, read_json(directory / CONFIG_NAME), ARCHITECTURE,
        UniversalConfig, build_tagging_model,
    )  # fmt: skip
    return placed(model, dtype, device)


def reads(directory: Path, raw: dict[str, Any] | None) -> bool:
    return raw is not None and written_by_attnlab(raw) and raw.get("architecture") == ARCHITECTURE


FAMILY = register(
    ModelFamily(
        name="universal",
        what="a Universal Transformer tagging model",
        model_types=(TaggingModel,),
        reads=reads,
        load=load_universal,
        save=save_universal,
        commands="attnlab.io.load (experiments/universal_transformer.py trains it)",
    )
)
