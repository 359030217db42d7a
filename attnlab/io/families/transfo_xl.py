"""The Transformer-XL family: what ``attnlab pretrain --recipe transfo-xl`` saves and ``attnlab
perplexity`` reads.

A directory is ``config.json`` (``{"format": "attnlab", "architecture": "TransfoXL", "config":
<TransfoXLConfig>}``) + ``model.safetensors`` (`TransfoXL`'s state dict, the tied output layer stored once,
under the embedding's name) + tokenizer files. No memory is stored: it is the state of a pass over a text, not
of the model. The directory is attnlab's layout, not HF's: transformers 5 removed ``TransfoXLLMHeadModel``,
and the CPU presets (pre-LN, GELU, a final LayerNorm) have no HF form; `attnlab.io.hf_transfo_xl` reads HF's
saved directories (``model_type`` transfo-xl), which this family loads too.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch

from attnlab.io.checkpoint import load_state_checked
from attnlab.io.format import (
    CheckpointError,
    check_directory,
    read_json,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    write_model_files,
    written_by_attnlab,
)
from attnlab.io.hf_transfo_xl import load_hf_transfo_xl
from attnlab.io.registry import ModelFamily, register
from attnlab.manifest import write_manifest
from attnlab.models.transfo_xl import TransfoXL, TransfoXLConfig, build_transfo_xl

ARCHITECTURE = "TransfoXL"


def config_to_dict(config: TransfoXLConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(data: dict[str, Any], source: str = "config") -> TransfoXLConfig:
    """A `TransfoXLConfig` from its fields; unknown names and bad values raise naming ``source``."""
    known = {f.name for f in dataclasses.fields(TransfoXLConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise CheckpointError(f"{source}: unknown TransfoXLConfig field(s) {', '.join(unknown)}")
    try:
        return TransfoXLConfig(**data)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from e


def is_transfo_xl_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory/config.json`` names attnlab's Transformer-XL."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return False
    raw = read_json(path)
    return raw.get("format") == "attnlab" and raw.get("architecture") == ARCHITECTURE


def save_transfo_xl(
    model: TransfoXL,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (each atomically), then the
    manifest."""
    aliases = tied_aliases(model)  # lm_head.weight -> embed.weight
    target = resolve_dtype(dtype)
    tensors = {
        k: v.to(target) if target is not None and v.is_floating_point() else v
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    write_model_files(directory, tensors, ARCHITECTURE, config_to_dict(model.config), aliases)
    write_manifest(directory, ["model.safetensors", "config.json"], run_id=run_id)
    return Path(directory)


def load_transfo_xl(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> TransfoXL:
    """A `TransfoXL` in eval mode from a directory `save_transfo_xl` wrote, or one HF's
    ``TransfoXLLMHeadModel.save_pretrained`` wrote."""
    directory = check_directory(directory)
    path = directory / "config.json"
    raw = read_json(path)
    if raw.get("model_type") == "transfo-xl" and not written_by_attnlab(raw):
        model = load_hf_transfo_xl(directory)
    else:
        model = _load_attnlab(directory, path, raw)
    target = resolve_dtype(dtype)
    return (model if target is None else model.to(dtype=target)).to(device).eval()


def _load_attnlab(directory: Path, path: Path, raw: dict[str, Any]) -> TransfoXL:
    if raw.get("format") != "attnlab" or raw.get("architecture") != ARCHITECTURE:
        raise CheckpointError(
            f"{path}: not an attnlab Transformer-XL directory (architecture {raw.get('architecture')!r}); "
            "HF's saved Transformer-XL models (model_type transfo-xl) load with attnlab.io.load"
        )
    if not isinstance(raw.get("config"), dict):
        raise CheckpointError(f"{path}: field 'config' must be a mapping of TransfoXLConfig fields")
    config = config_from_dict(raw["config"], source=f"{path}: field 'config'")
    tensors, _ = read_safetensors(directory / "model.safetensors")
    model = build_transfo_xl(config)
    load_state_checked(model, tensors, source=str(directory), architecture=ARCHITECTURE, config=config)
    return model.eval()


def reads(directory: Path, raw: dict[str, Any] | None) -> bool:
    """attnlab's Transformer-XL directories (``architecture`` TransfoXL) and HF's (``model_type``
    transfo-xl)."""
    if raw is None:
        return False
    if written_by_attnlab(raw):
        return raw.get("architecture") == ARCHITECTURE
    return raw.get("model_type") == "transfo-xl"


FAMILY = register(
    ModelFamily(
        name="transfo_xl",
        what="a Transformer-XL",
        model_types=(TransfoXL,),
        reads=reads,
        load=load_transfo_xl,
        save=save_transfo_xl,
        commands="`attnlab generate` or `attnlab perplexity`",
    )
)
