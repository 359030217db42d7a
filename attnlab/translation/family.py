"""Translation models as an `attnlab.io` model family, so `attnlab.io.load` and `attnlab.io.save` take them.

The family is registered from here, above `attnlab.io`, because `Seq2Seq` lives in `attnlab.translation`
and `attnlab.io` imports no task package. Its directory (``config.json`` + ``model.safetensors`` +
``tokenizer.json``, in Marian's layout where the model has an exact Marian form) is
`attnlab.translation.recipe.save_pretrained`'s; `attnlab.io.load` returns the model, and the directory's
tokenizer is ``attnlab.tokenizers.load_tokenizer(directory)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnlab.io.format import resolve_dtype
from attnlab.io.registry import ModelFamily, register
from attnlab.tokenizers import Tokenizer

from .config import is_seq2seq_config
from .model import Seq2Seq
from .recipe import load_pretrained, save_pretrained


def load_seq2seq(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> Seq2Seq:
    model, _ = load_pretrained(Path(directory), device=device)
    target = resolve_dtype(dtype)
    return model if target is None else model.to(dtype=target)


def save_seq2seq(
    model: Seq2Seq,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    tokenizer: Tokenizer | None = None,
) -> Path:
    if tokenizer is None:
        raise ValueError("a translation model directory holds its tokenizer: pass tokenizer=")
    if dtype is not None and resolve_dtype(dtype) != torch.float32:
        raise ValueError(f"translation directories hold float32 weights, not {dtype}")
    return save_pretrained(model, tokenizer, directory, run_id=run_id)


def reads(directory: Path, raw: Mapping[str, Any] | None) -> bool:
    """attnlab's translation directories: its own layout or Marian's with attnlab's fields beside."""
    return is_seq2seq_config(raw)


FAMILY = register(
    ModelFamily(
        name="marian",
        what="a translation encoder-decoder",
        model_types=(Seq2Seq,),
        reads=reads,
        load=load_seq2seq,
        save=save_seq2seq,
        commands="`attnlab translate`",
    )
)
