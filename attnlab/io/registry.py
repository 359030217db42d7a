"""The model families attnlab reads and writes, keyed by ``config.json``'s fields.

A `ModelFamily` is what `attnlab.io.load` and `attnlab.io.save` need of one family: whether it reads a
directory (from its ``config.json``: attnlab's ``architecture``, or HF's ``model_type``), how to load and save
it, the classes it saves, and optionally its plain HF transformers export. The families of
`attnlab.io.families` register themselves on import; a higher layer adds its own with `register`
(translation's Marian family, whose model classes live in `attnlab.translation`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.io.format import CONFIG_NAME, FORMAT_NAME, CheckpointError, check_directory, read_json
from attnlab.manifest import verify_directory


@dataclass(frozen=True)
class ModelFamily:
    """One family's directory: how to recognise, load and save it."""

    name: str  # "bert", "gpt2", ...: what `expect` and the errors name
    what: str  # the models it holds, for errors ("an encoder", "a causal language model (GPT)")
    model_types: tuple[type, ...]  # the classes `save` writes
    reads: Callable[[Path, Mapping[str, Any] | None], bool]  # (directory, config.json or None) -> reads it
    load: Callable[..., nn.Module]  # (directory, *, dtype, device, **options) -> model in eval mode
    save: Callable[..., Path]  # (model, directory, *, dtype, run_id, **options) -> directory
    save_hf: Callable[..., Path] | None = None  # (model, directory, **options): HF transformers' own layout
    commands: str = ""  # the attnlab commands that take the family's directories, for errors
    fallback: bool = False  # asked after the others: the encoders take every other attnlab architecture


_FAMILIES: dict[str, ModelFamily] = {}


def register(family: ModelFamily) -> ModelFamily:
    """Add ``family`` (or replace the one of the same name); families are asked in registration order."""
    _FAMILIES[family.name] = family
    return family


def registered() -> tuple[ModelFamily, ...]:
    return tuple(_FAMILIES.values())


def directory_config(directory: str | os.PathLike) -> tuple[Path, Mapping[str, Any] | None]:
    """``(directory, its config.json or None when it has none)``; a missing directory is an error."""
    path = Path(directory)
    if path.is_file():  # a released ELMo options file names its directory
        return path, None
    directory = check_directory(directory)
    config = directory / CONFIG_NAME
    if not config.is_file():
        return directory, None
    verify_directory(directory, [CONFIG_NAME])  # against manifest.json, when the directory has one
    return directory, read_json(config)


def family_of_directory(directory: str | os.PathLike) -> ModelFamily:
    """The family that reads ``directory``; errors name ``config.json`` and the field that decided."""
    path, raw = directory_config(directory)
    ordered = sorted(_FAMILIES.values(), key=lambda family: family.fallback)
    for family in ordered:
        if family.reads(path, raw):
            return family
    config = path / CONFIG_NAME
    if raw is None:
        raise FileNotFoundError(
            f"{config}: missing; a model directory holds config.json and model.safetensors"
        )
    if raw.get("architecture") == "Seq2Seq" or raw.get("model_type") == "marian":
        raise CheckpointError(
            f"{config}: holds a translation encoder-decoder, whose family attnlab.translation registers; "
            "use `attnlab translate` with it, or import attnlab.translation before attnlab.io.load"
        )
    if raw.get("format") == FORMAT_NAME:
        raise CheckpointError(
            f"{config}: field 'architecture' is {raw.get('architecture')!r}, which no model family reads; "
            f"attnlab reads: {', '.join(_FAMILIES)}"
        )
    if "model_type" in raw:
        raise CheckpointError(
            f"{config}: field 'model_type' is {raw['model_type']!r}, a HF transformers model attnlab does "
            f"not read; attnlab reads the families {', '.join(_FAMILIES)}"
        )
    raise CheckpointError(
        f'{config}: neither an attnlab checkpoint ("format": "attnlab") nor a HF transformers config '
        '("model_type")'
    )


def family_of_model(model: nn.Module) -> ModelFamily:
    """The family whose `save` writes ``model``'s class."""
    for family in _FAMILIES.values():
        if isinstance(model, family.model_types):
            return family
    names = ", ".join(t.__name__ for f in _FAMILIES.values() for t in f.model_types)
    raise TypeError(
        f"{type(model).__name__} is not a registered architecture of any model family; attnlab saves: {names}"
    )
