"""The model a pre-training run trains: its config from the recipe, preset and tokenizer, the module the
Trainer runs for the recipe's objective, and what is kept of it afterwards.

A masked LM (`MaskedLMPreTrainer`), SpanBERT (`SpanBertForPreTraining`), ELECTRA (`ElectraPreTrainer`: a
generator and a discriminator with tied embeddings), a GPT (objective "clm") or a Transformer-XL with its
memory carried between steps (`SegmentRecurrence`). A caller may pass its own module instead (`attnlab
distill`: `DistillationPreTrainer`, the student around a frozen teacher).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import nn

from attnlab.data import SpecialIds
from attnlab.data.protocol import vocab_size_of
from attnlab.models import EncoderConfig, EncoderForPreTraining, ReplacedTokenDetection, get_preset
from attnlab.models.gpt import GPTConfig, build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.models.transfo_xl import TRANSFO_XL_PRESETS, TransfoXLConfig, build_transfo_xl
from attnlab.pretraining.causal_lm import gpt_config
from attnlab.pretraining.distillation import DistillationPreTrainer
from attnlab.pretraining.electra import ElectraPreTrainer, generator_config
from attnlab.pretraining.masked_lm import MaskedLMPreTrainer
from attnlab.pretraining.recipes import Recipe
from attnlab.pretraining.span_boundary import SpanBertForPreTraining
from attnlab.pretraining.transfo_xl import SegmentRecurrence, transfo_xl_config

ModelConfig = EncoderConfig | GPTConfig | TransfoXLConfig


def check_model_overrides(recipe: Recipe, preset: str, overrides: Mapping[str, Any]) -> None:
    """``overrides`` name fields of the config ``recipe`` builds from ``preset`` (an encoder's, a GPT's or a
    Transformer-XL's) and hold values it accepts (the config's own checks); ValueError naming them, before
    any data is read. ``preset`` is one of the recipe's family."""
    if recipe.segment_recurrence:
        cls, build = TransfoXLConfig, lambda: dataclasses.replace(TRANSFO_XL_PRESETS[preset](), **overrides)
    elif recipe.objective == "clm":
        cls, build = GPTConfig, lambda: get_gpt_preset(preset, **overrides)
    else:
        cls, build = EncoderConfig, lambda: dataclasses.replace(get_preset(preset), **overrides)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"model: unknown {cls.__name__} field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    try:
        build()
    except TypeError as e:  # a comparison with a value of the wrong type
        raise ValueError(f"model: {e}") from None


def model_config(recipe: Recipe, preset: str | ModelConfig, tokenizer: Any, **overrides: Any) -> ModelConfig:
    """The encoder config: the preset with the tokenizer's vocabulary and padding id, the recipe's dropout,
    a pooler only for NSP/SOP, room for the longest stage, the recipe's architecture (ALBERT's sharing and
    factorised embeddings at any size), then ``overrides`` (EncoderConfig fields). A causal LM (objective
    "clm"): the GPT preset's config (`attnlab.pretraining.causal_lm.gpt_config`); with segment recurrence the
    Transformer-XL preset's (`attnlab.pretraining.transfo_xl.transfo_xl_config`)."""
    if recipe.segment_recurrence:
        segment = max(s.max_length for s in recipe.stages)
        return transfo_xl_config(preset, tokenizer, segment, recipe.dropout, **overrides)  # type: ignore[arg-type]
    if recipe.objective == "clm":
        longest = max(s.max_length for s in recipe.stages)
        return gpt_config(preset, tokenizer, longest, recipe.dropout, **overrides)  # type: ignore[arg-type]

    config = get_preset(preset) if isinstance(preset, str) else preset
    special = SpecialIds.from_tokenizer(tokenizer)
    longest = max(s.max_length for s in recipe.stages)
    offset = special.pad + 1 if config.position_offset > 0 else 0  # RoBERTa numbers positions after <pad>
    config = dataclasses.replace(
        config,
        vocab_size=vocab_size_of(tokenizer),
        pad_token_id=special.pad,
        position_offset=offset,
        max_position_embeddings=max(config.max_position_embeddings - config.position_offset, longest)
        + offset,
        hidden_dropout=recipe.dropout,
        attention_dropout=recipe.dropout,
        add_pooler=recipe.has_pair_head,
    )
    if recipe.sharing is not None:
        config = dataclasses.replace(config, sharing=recipe.sharing)
    if recipe.embedding_size is not None:
        config = dataclasses.replace(
            config, embedding_size=min(recipe.embedding_size, config.hidden_size // 2)
        )
    if overrides:
        known = {f.name for f in dataclasses.fields(EncoderConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"model: unknown EncoderConfig field(s) {', '.join(unknown)}")
        config = dataclasses.replace(config, **overrides)
    return config


def build_pretraining_model(recipe: Recipe, config: ModelConfig) -> nn.Module:
    """The module the Trainer runs for ``recipe.objective`` (BERT-initialised, GPT-2-initialised for a causal
    LM; seed before calling)."""
    if isinstance(config, TransfoXLConfig):  # the memory between steps lives around the model
        return SegmentRecurrence(build_transfo_xl(config))
    if isinstance(config, GPTConfig):  # objective "clm": GPT's own forward takes labels and returns the loss
        return build_gpt(config)
    if recipe.objective == "electra":
        generator = EncoderForPreTraining.from_config(generator_config(config, recipe.generator_fraction))
        discriminator = ReplacedTokenDetection.from_config(config)
        return ElectraPreTrainer(generator, discriminator, rtd_weight=recipe.rtd_weight)
    if recipe.objective == "sbo":
        return SpanBertForPreTraining.from_config(config, max_positions=recipe.sbo_max_positions)
    return MaskedLMPreTrainer(EncoderForPreTraining.from_config(config, pair_head=recipe.has_pair_head))


def final_model(model: nn.Module) -> nn.Module:
    """What is kept after pre-training: the masked LM (without SBO head) or ELECTRA's discriminator."""
    if isinstance(model, ElectraPreTrainer):
        return model.discriminator_only()
    if isinstance(model, SpanBertForPreTraining):
        return model.mlm_only()
    if isinstance(model, (MaskedLMPreTrainer, DistillationPreTrainer, SegmentRecurrence)):
        return model.model  # distillation: the student (the teacher is not kept); Transformer-XL: no memory
    return model


def masked_lm_of(model: nn.Module) -> EncoderForPreTraining:
    """The masked LM inside a pre-training model (ELECTRA: the generator)."""
    if isinstance(model, ElectraPreTrainer):
        return model.generator
    if isinstance(model, (SpanBertForPreTraining, MaskedLMPreTrainer, DistillationPreTrainer)):
        return final_model(model)
    if isinstance(model, EncoderForPreTraining):
        return model
    raise TypeError(f"{type(model).__name__} holds no masked LM")
