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

from attnlab.io.format import (
    CONFIG_NAME,
    CheckpointError,
    check_directory,
    read_json,
    written_by_attnlab,
)
from attnlab.io.hf_transfo_xl import load_hf_transfo_xl
from attnlab.io.model_files import placed, read_model_directory, save_model_directory
from attnlab.io.registry import ModelFamily, register
from attnlab.models.transfo_xl import TransfoXL, TransfoXLConfig, build_transfo_xl

ARCHITECTURE = "TransfoXL"


def save_transfo_xl(
    model: TransfoXL,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (each atomically; the tied output
    layer once, under the embedding's name), then the manifest."""
    config = dataclasses.asdict(model.config)
    return save_model_directory(model, directory, ARCHITECTURE, config, dtype=dtype, run_id=run_id)


def load_transfo_xl(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> TransfoXL:
    """A `TransfoXL` in eval mode from a directory `save_transfo_xl` wrote, or one HF's
    ``TransfoXLLMHeadModel.save_pretrained`` wrote."""
    directory = check_directory(directory)
    path = directory / CONFIG_NAME
    raw = read_json(path)
    if raw.get("model_type") == "transfo-xl" and not written_by_attnlab(raw):
        return placed(load_hf_transfo_xl(directory), dtype, device)
    if not written_by_attnlab(raw):
        raise CheckpointError(
            f"{path}: not an attnlab Transformer-XL directory (architecture {raw.get('architecture')!r}); "
            "HF's saved Transformer-XL models (model_type transfo-xl) load with attnlab.io.load"
        )
    model = read_model_directory(directory, raw, ARCHITECTURE, TransfoXLConfig, build_transfo_xl)
    return placed(model, dtype, device)


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
