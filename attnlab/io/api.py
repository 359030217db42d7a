"""`load` and `save`: the one way in and out of a model directory, for every family.

``load(directory)`` asks the registered families (`attnlab.io.registry`, keyed by ``config.json``'s
``architecture`` or HF's ``model_type``) which one reads the directory and returns its model in eval mode;
``save(model, directory)`` writes ``model`` with its family's writer (``hf=True``: HF transformers' own
layout, for the families that have one). Loading never executes code from a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

import attnlab.io.families  # noqa: F401  (registers the built-in families)
from attnlab.io.format import CONFIG_NAME, CheckpointError
from attnlab.io.registry import ModelFamily, family_of_directory, family_of_model, registered


def load(
    directory: str | os.PathLike,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    expect: str | tuple[str, ...] | None = None,
    **options: Any,
) -> nn.Module:
    """The model ``directory`` holds (attnlab's or HF's layout), in eval mode on ``device``.

    ``dtype`` None keeps the stored dtype; float32 / bfloat16 / float16 cast floating-point tensors.
    ``expect`` names the families a caller takes ("gpt2", ("gpt2", "transfo_xl")): another is an error naming
    the commands that take it. ``options`` go to the family's loader (``architecture="Encoder"``: an encoder
    family's encoder alone).
    """
    family = family_of(directory, expect)
    return family.load(directory, dtype=dtype, device=device, **options)


def family_of(directory: str | os.PathLike, expect: str | tuple[str, ...] | None = None) -> ModelFamily:
    """The family that reads ``directory``; with ``expect``, one of those or an error saying what it holds."""
    family = family_of_directory(directory)
    wanted = (expect,) if isinstance(expect, str) else expect
    if wanted is not None and family.name not in wanted:
        known = {f.name: f.what for f in registered()}
        takes = " or ".join(known.get(name, name) for name in wanted)
        raise CheckpointError(
            f"{Path(directory) / CONFIG_NAME}: holds {family.what}, not {takes}; "
            f"use {family.commands} with it"
        )
    return family


def save(
    model: nn.Module,
    directory: str | os.PathLike,
    *,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    hf: bool = False,
    **options: Any,
) -> Path:
    """Write ``model`` into ``directory`` (created if needed) in its family's layout; returns the directory.

    ``dtype`` casts floating-point tensors on the way out; ``run_id`` goes into the manifest. ``hf=True``
    writes HF transformers' own layout instead (no attnlab fields: what `attnlab convert --to hf` and the
    runs'    ``hf/`` exports write). ``options`` go to the family's writer (the encoders' ``hf_layout``; a
    translation model's ``tokenizer``; ELMo's ``vocab``; a HF export's ``tokenizer``, ``family`` and
    ``card``).
    """
    family = family_of_model(model)
    if hf:
        if family.save_hf is None:
            raise ValueError(f"{type(model).__name__}: the {family.name} family has no HF export")
        return family.save_hf(model, directory, dtype=dtype, **options)
    return family.save(model, directory, dtype=dtype, run_id=run_id, **options)
