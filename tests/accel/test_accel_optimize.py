"""`attnlab.accel.optimize`: the fast modules swapped into a finished model in place, its parameters,
state-dict names and ``isinstance`` relations kept, the same function computed, idempotent; the models
themselves are built of plain PyTorch modules."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

from attnlab.accel import optimize
from attnlab.accel.decoding_step import StepCache, SteppedDecoder
from attnlab.accel.fused_encoder import FusedEncoder
from attnlab.accel.linear import FastLinear, GenerationHead
from attnlab.accel.onednn_linear import OneDNNLinear
from attnlab.accel.stacked_attention import StackedSelfAttention
from attnlab.generation import generate
from attnlab.models import Encoder, EncoderForSequenceClassification, get_preset
from attnlab.models.decoder import Decoder
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.nn.buffered_attention import BufferedSelfAttention

TINY = dataclasses.replace(
    get_preset("bert-mini"), vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
    max_position_embeddings=64,
)  # fmt: skip


def classifier() -> EncoderForSequenceClassification:
    torch.manual_seed(0)
    return EncoderForSequenceClassification.from_config(TINY, num_labels=3).eval()


def gpt():
    torch.manual_seed(0)
    return build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=2, max_positions=64)).eval()


def accel_classes(model: nn.Module) -> list[str]:
    return [type(m).__qualname__ for m in model.modules() if type(m).__module__.startswith("attnlab.accel")]


def test_the_models_are_built_of_plain_modules() -> None:
    from attnlab.translation.config import Seq2SeqConfig
    from attnlab.translation.model import build_model

    seq2seq = build_model(Seq2SeqConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=2, num_layers=1))
    for model in (classifier(), gpt(), seq2seq):
        assert not accel_classes(model)
        assert any(type(m) is nn.Linear for m in model.modules())


def test_optimize_swaps_classes_in_place_and_keeps_the_state_dict() -> None:
    model = classifier()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {name: id(p) for name, p in model.named_parameters()}
    assert optimize(model) is model
    assert type(model.encoder) is FusedEncoder and isinstance(model.encoder, Encoder)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is FastLinear for m in linears)
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert {name: id(p) for name, p in model.named_parameters()} == params  # the same tensors, not copies


def test_optimize_is_idempotent_and_names_a_wrong_mode() -> None:
    model = optimize(classifier())
    kinds = [type(m) for m in model.modules()]
    optimize(model)
    assert [type(m) for m in model.modules()] == kinds
    with pytest.raises(ValueError, match="mode must be one of inference, training, got 'fast'"):
        optimize(model, "fast")


def test_an_optimized_encoder_computes_the_plain_function() -> None:
    model = classifier()
    plain = copy.deepcopy(model)
    ids = torch.randint(0, 99, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.inference_mode():
        want = plain(ids, attention_mask=mask).logits
        got = optimize(model)(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_training_mode_swaps_the_linear_layers_only() -> None:
    model = optimize(gpt(), "training")
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {OneDNNLinear}
    assert type(model.decoder) is Decoder and not isinstance(model.new_cache(), StepCache)
    model.train()
    ids = torch.randint(0, 300, (2, 6))
    model(ids, labels=ids).loss.backward()  # its products have gradients
    optimize(model)  # then for inference
    assert type(model.lm_head) is GenerationHead
    assert type(model.decoder.layers[0].feed_forward.layer.up) is FastLinear


def test_an_optimized_gpt_generates_the_plain_tokens() -> None:
    model = gpt()
    plain = copy.deepcopy(model)
    head_weight = model.lm_head.weight
    optimize(model)
    assert type(model.decoder) is SteppedDecoder and isinstance(model.new_cache(), StepCache)
    attn = model.decoder.layers[0].self_attn.layer
    assert type(attn) is StackedSelfAttention and isinstance(attn, BufferedSelfAttention)
    assert type(model.lm_head) is GenerationHead and model.lm_head.weight is head_weight
    prompt = torch.randint(0, 300, (2, 4))
    want = generate(plain, prompt, max_new_tokens=8, ignore_eos=True).sequences
    assert generate(model, prompt, max_new_tokens=8, ignore_eos=True).sequences == want


def test_only_exact_classes_are_swapped() -> None:
    from attnlab.translation.config import Seq2SeqConfig
    from attnlab.translation.model import build_model

    config = Seq2SeqConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=2, num_layers=1)
    model = optimize(build_model(config))
    assert type(model.decoder) is SteppedDecoder
    assert type(model.encoder) is not SteppedDecoder  # translation's encoder subclasses Decoder: kept
    attention = nn.MultiheadAttention(8, 2)  # its out_proj is a subclass of nn.Linear with its own role
    optimize(attention)
    assert type(attention.out_proj) is not FastLinear


def test_an_optimized_encoder_saves_and_exports_as_the_plain_one(tmp_path) -> None:
    from attnlab.io import load, save, to_hf

    torch.manual_seed(0)
    encoder = optimize(Encoder(TINY).eval())
    save(encoder, tmp_path)
    loaded = load(tmp_path)
    assert type(loaded) is Encoder  # loads plain; whoever runs it optimizes it again
    assert loaded.state_dict().keys() == encoder.state_dict().keys()
    assert to_hf(encoder, family="bert")[1].keys() == to_hf(loaded, family="bert")[1].keys()
