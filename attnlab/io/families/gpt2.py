"""The GPT family: attnlab's own GPT directories and HF GPT-2 directories, one loader.

An attnlab GPT directory is ``config.json`` (``{"format": "attnlab", "architecture": "GPT", "config":
<GPTConfig>}``) + ``model.safetensors`` (the tied output projection stored once, under the word embedding's
name) + tokenizer files (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``). `load_causal_lm` also reads
HF GPT-2 directories (`attnlab.io.hf_gpt2`), and tells a user who points it at an encoder or a translation
model which command fits that model instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    check_directory,
    read_json,
    written_by_attnlab,
)
from attnlab.io.hf_gpt2 import (
    config_to_gpt2,
    config_to_openai_gpt,
    load_gpt2,
    save_gpt2,
    state_dict_from_gpt2,
    state_dict_to_gpt2,
)
from attnlab.io.hf_layout import HF_FAMILY_FIELD
from attnlab.io.model_files import placed, read_model_directory, save_model_directory
from attnlab.io.registry import ModelFamily, register
from attnlab.models.gpt import GPT, MODEL_TYPE, GPTConfig, build_gpt

ARCHITECTURE = "GPT"
# HF model types that are encoders (fill-mask / classification), for the error message
_HF_ENCODERS = ("bert", "roberta", "albert", "electra", "distilbert", "xlm-roberta", "camembert")


def gpt2_form(model: GPT) -> tuple[dict, dict[str, Tensor], str] | str:
    """``(HF config dict, HF state dict, family)`` when ``model`` has an exact HF form, else the reason it
    has none: GPT-2's (``"gpt2"``) for a pre-LN model, OpenAI GPT's (``"openai-gpt"``) for a post-LN one; full
    attention, float32, and the weights must come back bit for bit through `state_dict_from_gpt2`."""
    family = "gpt2" if model.config.norm_first else "openai-gpt"
    try:
        hf_config = (config_to_gpt2 if family == "gpt2" else config_to_openai_gpt)(model.config)
    except ValueError as e:
        return str(e)
    state = model.state_dict()
    if any(t.dtype != torch.float32 for t in state.values() if t.is_floating_point()):
        return "not float32"
    tensors = state_dict_to_gpt2(state, model.config, family)
    back = state_dict_from_gpt2(tensors, model.config, family)
    if set(back) != set(state) or any(not torch.equal(back[k], state[k]) for k in state):
        return f"the weights do not come back unchanged from {family}'s layout"
    return hf_config, tensors, family


def save_causal_lm(
    model: GPT,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` into ``directory`` (atomically each). A model with an
    exact HF form (`gpt2_form`: GPT-2 for pre-LN, OpenAI GPT for post-LN) is written in HF's layout with
    attnlab's fields beside HF's, so ``transformers.AutoModelForCausalLM`` and ``pipeline("text-generation")``
    load the directory as it is (`attnlab.io.hf_layout` does the same for encoders)."""
    tensors, fields = None, None
    form = gpt2_form(model)
    if not isinstance(form, str):
        fields, tensors, family = form
        fields = {**fields, HF_FAMILY_FIELD: family}
    return save_model_directory(
        model, directory, ARCHITECTURE, model.config.to_dict(), dtype=dtype, run_id=run_id, tensors=tensors,
        hf_fields=fields,
    )  # fmt: skip


def wrong_model_hint(raw: dict, path: Path) -> str | None:
    """The sentence that says which command fits a model directory that holds no causal decoder."""
    if raw.get("format") == "attnlab" and raw.get("architecture") == ARCHITECTURE:
        return None  # attnlab's own GPT directory, in HF's layout or not
    if raw.get("model_type") == "attnlab-seq2seq" or raw.get("architecture") == "Seq2Seq":
        return f"{path}: holds a translation encoder-decoder, not a causal decoder; use `attnlab translate`"
    if raw.get("format") == "attnlab" and raw.get("architecture") == "TransfoXL":
        return (
            f"{path}: holds a Transformer-XL (attnlab.io.families.transfo_xl), not a GPT; `attnlab generate` "
            "and "
            "`attnlab perplexity` read it with its memory (attnlab.io.load)"
        )
    if raw.get("format") == "attnlab" and raw.get("architecture") != ARCHITECTURE:
        return (
            f"{path}: holds an encoder (attnlab architecture {raw.get('architecture')!r}), not a causal "
            "decoder; use `attnlab fill-mask` or `attnlab predict` with it"
        )
    if raw.get("model_type") in _HF_ENCODERS:
        return (
            f"{path}: holds a HF {raw['model_type']} encoder, not a causal decoder; use `attnlab fill-mask` "
            "or `attnlab predict` with it"
        )
    if raw.get("model_type") not in (None, "gpt2", MODEL_TYPE):
        return f"{path}: model_type {raw['model_type']!r} is not a causal decoder attnlab reads (gpt2)"
    return None


def load_causal_lm(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> GPT:
    """A `GPT` in eval mode from an attnlab GPT directory or a HF GPT-2 directory."""
    directory = check_directory(directory)
    path = directory / CONFIG_NAME
    raw = read_json(path)
    hint = wrong_model_hint(raw, path)
    if hint is not None:
        raise CheckpointError(hint)
    if raw.get("model_type") == "gpt2" and not written_by_attnlab(raw):
        return placed(load_gpt2(directory), dtype, device)
    if raw.get("format") != "attnlab":
        raise CheckpointError(f'{path}: neither an attnlab GPT checkpoint ("format": "attnlab") nor HF GPT-2')
    family = raw.get(HF_FAMILY_FIELD)
    if family not in (None, "gpt2", "openai-gpt"):
        raise CheckpointError(
            f"{path}: field {HF_FAMILY_FIELD!r} is {family!r}; a GPT directory takes 'gpt2' or 'openai-gpt'"
        )

    def from_hf_layout(tensors: dict[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
        try:  # written in HF's layout by save_causal_lm
            return state_dict_from_gpt2(tensors, config, family)
        except CheckpointError as e:
            raise CheckpointError(f"{directory / WEIGHTS_NAME}: {e}") from None

    model = read_model_directory(
        directory,
        raw,
        ARCHITECTURE,
        _gpt_config,
        build_gpt,
        convert=None if family is None else from_hf_layout,
    )
    return placed(model, dtype, device)


def _gpt_config(data: object, source: str) -> GPTConfig:
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{source}: expected an object of GPTConfig fields, found {type(data).__name__}"
        )
    try:
        return GPTConfig.from_dict(data, source=source)
    except (TypeError, ValueError) as e:
        raise CheckpointError(str(e)) from e


def reads(directory: Path, raw: dict | None) -> bool:
    """attnlab's GPT directories (``architecture`` GPT) and HF GPT-2's (``model_type`` gpt2)."""
    if raw is None:
        return False
    if written_by_attnlab(raw):
        return raw.get("architecture") == ARCHITECTURE
    return raw.get("model_type") in ("gpt2", MODEL_TYPE)


FAMILY = register(
    ModelFamily(
        name="gpt2",
        what="a causal language model (GPT)",
        model_types=(GPT,),
        reads=reads,
        load=load_causal_lm,
        save=save_causal_lm,
        save_hf=lambda model, directory, **_: save_gpt2(model, directory),
        commands="`attnlab generate` or `attnlab perplexity`",
    )
)
