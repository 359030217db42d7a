"""The encoder family: BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT and their heads
(`attnlab.models.ARCHITECTURES`).

Its directory is ``config.json`` + ``model.safetensors`` (+ ``manifest.json``): ``config.json`` holds
``{"format": "attnlab", "architecture": <name in ARCHITECTURES>, "options": <keyword options of its
from_config>, "config": <EncoderConfig.to_dict()>, "dtype": ..., "tied": {alias: source}}``, and every
tensor is stored once (tied weights under their first name; the rebuilt model ties them by construction). A
model with an exact HF form is written in HF's layout too (`attnlab.io.hf_layout`), so
``AutoModel*.from_pretrained`` loads the directory as it is. The family also reads HF transformers' own
encoder directories (`attnlab.io.hf_encoders`, ``model_type`` bert, roberta, roberta-prelayernorm, albert,
electra, distilbert) and exports to them (`attnlab.io.hf_encoders.save_hf`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab import __version__
from attnlab.atomic import write_json_atomic
from attnlab.io.checkpoint import (
    architecture_of,
    build_model,
    load_state_checked,
    read_checkpoint_config,
    short_list,
)
from attnlab.io.format import (
    CONFIG_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    WEIGHTS_NAME,
    CheckpointError,
    dtype_name,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    write_safetensors_atomic,
    written_by_attnlab,
)
from attnlab.io.hf_encoders import load_hf, save_hf
from attnlab.io.hf_layout import HF_FAMILY_FIELD, hf_form, to_attnlab_names
from attnlab.io.hf_tables import FAMILIES
from attnlab.io.registry import ModelFamily, directory_config, register
from attnlab.manifest import write_manifest
from attnlab.models import ARCHITECTURES


def save_encoder(
    model: nn.Module,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    hf_layout: bool = True,
) -> Path:
    """Write ``model`` to ``directory`` (created if needed) as ``config.json`` + ``model.safetensors``,
    then ``manifest.json`` listing those two (with ``run_id``, the run that produced the model).

    ``dtype`` (float32 / bfloat16 / float16) casts floating-point tensors on the way out; None keeps
    the model's dtype. With ``hf_layout`` (the default) a model that has an exact HF form is written in
    HF's layout too (HF config fields and tensor names, `attnlab.io.hf_layout`), so HF transformers loads
    the directory as it is. Returns the directory.
    """
    target = resolve_dtype(dtype)
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"{type(model).__name__} has no EncoderConfig `config` attribute; cannot save it")
    architecture, options = architecture_of(model)

    state = model.state_dict()
    aliases = tied_aliases(model)
    # Check the architecture and options rebuild the same parameters and ties (cheap: on the meta device).
    rebuilt_model = build_model(architecture, config, options, meta=True)
    rebuilt = rebuilt_model.state_dict()
    if set(rebuilt) != set(state) or any(tuple(rebuilt[k].shape) != tuple(state[k].shape) for k in state):
        diff = short_list(set(rebuilt) ^ set(state))
        raise CheckpointError(
            f"{architecture}.from_config(config, **{options}) does not rebuild this model "
            f"(differing keys: {diff or 'shapes differ'}); was the model changed after construction?"
        )
    if tied_aliases(rebuilt_model) != aliases:
        raise CheckpointError(
            f"{architecture}.from_config(config, **{options}) ties {tied_aliases(rebuilt_model)} "
            f"but this model ties {aliases}; was the model changed after construction?"
        )

    tensors: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if name in aliases:
            continue
        if target is not None and tensor.is_floating_point():
            tensor = tensor.to(target)
        tensors[name] = tensor
    floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
    stored = (
        dtype_name(target)
        if target is not None
        else (dtype_name(floats.pop()) if len(floats) == 1 else "mixed")
    )
    fields: dict[str, Any] = {}  # HF's config fields, when the directory takes HF's layout
    if hf_layout:
        form = hf_form(model, target)
        if not isinstance(form, str):
            fields, tensors, family = form
            fields[HF_FAMILY_FIELD] = family

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_atomic(
        tensors, directory / WEIGHTS_NAME, metadata={"format": "pt", "producer": FORMAT_NAME}
    )
    write_json_atomic(
        {
            **fields,
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "attnlab_version": __version__,
            "architecture": architecture,
            "options": options,
            "dtype": stored,
            "tied": aliases,
            "config": config.to_dict(),
        },
        directory / CONFIG_NAME,
    )
    write_manifest(directory, [WEIGHTS_NAME, CONFIG_NAME], run_id=run_id)
    return directory


def attnlab_tensors(
    tensors: dict[str, Tensor], raw: Mapping[str, Any], model: nn.Module, source: str | os.PathLike
) -> dict[str, Tensor]:
    """The weights of a directory under ``model``'s state-dict names: as stored, or mapped back from HF's
    names when ``config.json`` (``raw``) says the directory uses HF's layout (`attnlab.io.hf_layout`)."""
    family = raw.get(HF_FAMILY_FIELD)
    if family is None:
        return tensors
    if family not in FAMILIES:
        raise CheckpointError(
            f"{source}: field {HF_FAMILY_FIELD!r} is {family!r}; valid: {', '.join(FAMILIES)}"
        )
    try:
        return to_attnlab_names(tensors, model, family)
    except CheckpointError as e:  # name the weights file beside the config
        raise CheckpointError(f"{Path(source).parent / WEIGHTS_NAME}: {e}") from None


def load_attnlab_encoder(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> nn.Module:
    """Rebuild the model saved by ``save_pretrained`` in ``directory``.

    ``dtype`` None keeps the stored dtype; float32 / bfloat16 / float16 cast floating-point tensors.
    The model is returned in eval mode on ``device``.
    """
    target = resolve_dtype(dtype)
    architecture, options, config, raw = read_checkpoint_config(directory)
    weights = Path(directory) / WEIGHTS_NAME
    if not weights.is_file():
        others = sorted(
            p.name for p in Path(directory).iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")
        )
        hint = f" (found {', '.join(others)}: attnlab never unpickles weights)" if others else ""
        raise FileNotFoundError(f"{weights}: missing weights file{hint}")
    tensors, _ = read_safetensors(weights)
    model = build_model(architecture, config, options, init=False)
    tensors = attnlab_tensors(tensors, raw, model, Path(directory) / CONFIG_NAME)
    load_state_checked(model, tensors, source=str(weights), architecture=architecture, config=config)
    if target is None:
        floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
        target = floats.pop() if len(floats) == 1 else None
    if target is not None:
        model.to(dtype=target)
    return model.to(device).eval()


def load_encoder(
    directory: str | os.PathLike,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    architecture: str | None = None,
) -> nn.Module:
    """An encoder (with its heads) from an attnlab directory or a HF transformers one. ``architecture`` picks
    what to read of a HF directory (`attnlab.io.hf_encoders.load_hf`: ``"Encoder"``, the encoder alone)."""
    raw = directory_config(directory)[1]
    if raw is not None and written_by_attnlab(raw):
        return load_attnlab_encoder(directory, dtype=dtype, device=device)
    return load_hf(directory, architecture=architecture, dtype=dtype, device=device)


def reads(directory: Path, raw: Mapping[str, Any] | None) -> bool:
    """attnlab's own encoder directories (``architecture`` in `ARCHITECTURES`, and any other architecture no
    family reads: `read_checkpoint_config` names the valid ones) and HF's encoder families."""
    if raw is None:
        return False
    if written_by_attnlab(raw):
        return True
    return raw.get("model_type") in FAMILIES


FAMILY = register(
    ModelFamily(
        name="bert",
        what="an encoder",
        model_types=tuple(ARCHITECTURES.values()),
        reads=reads,
        load=load_encoder,
        save=save_encoder,
        save_hf=save_hf,
        commands="`attnlab fill-mask`, `attnlab predict` or `attnlab finetune`",
        fallback=True,
    )
)
