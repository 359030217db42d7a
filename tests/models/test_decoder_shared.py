"""One decoder layer and one beam search in the project: GPT and translation are built on the same classes
and call the same search, and translation's checkpoint tensor names did not change with the refactor."""

from __future__ import annotations

import inspect

import torch
from torch import nn

import attnlab.translation.decoding as translation_decoding
import attnlab.translation.model as translation_model
from attnlab.generation import beam
from attnlab.models.decoder import Decoder, DecoderLayer
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.translation.config import transformer_tiny


def test_gpt_and_translation_use_the_same_layer_class() -> None:
    seq2seq = translation_model.build_model(transformer_tiny())
    gpt = build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=65))
    layers = [*seq2seq.encoder.layers, *seq2seq.decoder.layers, *gpt.decoder.layers]
    assert {type(layer) for layer in layers} == {DecoderLayer}
    assert isinstance(seq2seq.decoder, Decoder) and isinstance(gpt.decoder, Decoder)
    assert not isinstance(seq2seq.encoder, Decoder)  # its own stack of the shared layer, not a decoder
    assert all(layer.cross_attn is not None for layer in seq2seq.decoder.layers)
    assert all(layer.cross_attn is None for layer in [*seq2seq.encoder.layers, *gpt.decoder.layers])


def test_translation_defines_no_layer_class_of_its_own() -> None:
    own = [
        name
        for name, obj in vars(translation_model).items()
        if inspect.isclass(obj)
        and issubclass(obj, nn.Module)
        and obj.__module__ == translation_model.__name__
    ]
    assert not [name for name in own if name.endswith("Layer")], own


def test_translation_beam_search_is_the_generation_one() -> None:
    assert translation_decoding.beam_module.beam_search is beam.beam_search
    assert translation_decoding.Hypothesis is beam.Hypothesis
    assert translation_decoding.length_penalty is beam.length_penalty


def test_translation_checkpoint_names_are_unchanged() -> None:
    model = translation_model.build_model(transformer_tiny(num_layers=1, norm_first=True))
    names = set(model.state_dict())
    for name in [
        "encoder.layers.0.self_attn.layer.query.weight",
        "encoder.layers.0.self_attn.norm.weight",
        "encoder.layers.0.feed_forward.layer.up.weight",
        "encoder.final_norm.weight",
        "decoder.layers.0.self_attn.layer.output.bias",
        "decoder.layers.0.cross_attn.layer.key.weight",
        "decoder.layers.0.cross_attn.norm.bias",
        "decoder.layers.0.feed_forward.layer.down.weight",
        "decoder.final_norm.bias",
        "src_embed.word.weight",
        "generator.weight",
    ]:
        assert name in names, name
    assert not any("cross_attn" in n for n in names if n.startswith("encoder."))
    assert len(names) == 49  # as before the refactor (same names, checked against the old code)


def test_cross_attention_layer_without_memory_is_a_clear_error() -> None:
    model = translation_model.build_model(transformer_tiny(num_layers=1))
    try:
        model.decoder(torch.zeros(1, 2, 64))
    except ValueError as e:
        assert "pass `memory`" in str(e)
    else:
        raise AssertionError("expected a ValueError")
