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

from attnlab.io.checkpoint import SkipRandomInit, load_state_checked
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_directory,
    dataclass_from_fields,
    read_json,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    write_model_files,
    written_by_attnlab,
)
from attnlab.io.registry import ModelFamily, register
from attnlab.manifest import verify_directory, write_manifest
from attnlab.models.universal import TaggingModel
from attnlab.models.universal_config import UniversalConfig, build_tagging_model

ARCHITECTURE = "UniversalTagging"


def save_universal(
    model: TaggingModel,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (each atomically), then the
    manifest."""
    config = getattr(model, "config", None)
    if not isinstance(config, UniversalConfig):
        raise TypeError(
            "this TaggingModel has no UniversalConfig `config`; build it with "
            "attnlab.models.universal_config.build_tagging_model to save it"
        )
    aliases = tied_aliases(model)  # head.weight -> embed.weight
    target = resolve_dtype(dtype)
    tensors = {
        k: v.to(target) if target is not None and v.is_floating_point() else v
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    write_model_files(directory, tensors, ARCHITECTURE, dataclasses.asdict(config), aliases)
    write_manifest(directory, [WEIGHTS_NAME, CONFIG_NAME], run_id=run_id)
    return Path(directory)


def load_universal(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> TaggingModel:
    """The `TaggingModel` of a directory `save_universal` wrote, in eval mode."""
    directory = check_directory(directory)
    path = directory / CONFIG_NAME
    verify_directory(directory, [CONFIG_NAME])
    raw = read_json(path)
    config = dataclass_from_fields(UniversalConfig, raw.get("config"), f"{path}: field 'config'")
    tensors, _ = read_safetensors(directory / WEIGHTS_NAME)
    with SkipRandomInit():  # every weight is loaded next
        model = build_tagging_model(config)
    load_state_checked(
        model, tensors, source=str(directory / WEIGHTS_NAME), architecture=ARCHITECTURE, config=config
    )
    target = resolve_dtype(dtype)
    return (model if target is None else model.to(dtype=target)).to(device).eval()


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
