"""Reformer: HF parity (LSH and local layers, same hashing seed), reversible vs ordinary gradients, masks."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from attnlab.models.reformer import ChunkedFeedForward, Reformer, ReformerConfig
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.lsh_attention import LocalSelfAttention, LSHSelfAttention

transformers = pytest.importorskip("transformers")
from transformers.models.reformer import modeling_reformer as hf_reformer  # noqa: E402

from attnlab.io.hf_reformer import reformer_from_hf_state  # noqa: E402


def hf_config(**overrides):
    base = dict(
        vocab_size=40, hidden_size=32, num_attention_heads=4, attention_head_size=8, feed_forward_size=48,
        attn_layers=["lsh", "local"], is_decoder=True, num_hashes=3, num_buckets=4, lsh_attn_chunk_length=8,
        local_attn_chunk_length=8, axial_pos_embds=False, max_position_embeddings=64, hash_seed=7,
        hidden_dropout_prob=0.0, lsh_attention_probs_dropout_prob=0.0, local_attention_probs_dropout_prob=0.0,
        chunk_size_feed_forward=0, tie_word_embeddings=False, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    return transformers.ReformerConfig(**{**base, **overrides})


def randomise(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.3)


@pytest.mark.parametrize(
    "layers, length",
    [(["lsh", "local"], 32), (["local", "lsh"], 64), (["lsh", "lsh"], 8)],  # 8: one chunk, full attention
)
def test_logits_equal_hf_reformer_with_the_same_hash_seed(layers, length):
    torch.manual_seed(0)
    cfg = hf_config(attn_layers=layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.ReformerModelWithLMHead(cfg).eval()
    randomise(hf)
    ours = reformer_from_hf_state(cfg.to_dict(), hf.state_dict())
    ids = torch.randint(0, 40, (2, length))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_hashes", [1, 4])
def test_lsh_layer_equals_hf_bidirectional_and_causal(causal, num_hashes):
    torch.manual_seed(0)
    hf = hf_reformer.LSHSelfAttention(hf_config(is_decoder=causal, num_hashes=num_hashes)).eval()
    ours = LSHSelfAttention(
        32, 4, chunk_length=8, num_buckets=4, num_hashes=num_hashes, causal=causal, hash_seed=7
    )
    ours.query_key.weight.data.copy_(hf.query_key.weight)
    ours.value.weight.data.copy_(hf.value.weight)
    torch.nn.init.eye_(ours.output.weight)
    x = torch.randn(3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], hf(x).hidden_states, atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_local_layer_equals_hf(causal):
    torch.manual_seed(0)
    hf = hf_reformer.LocalSelfAttention(hf_config(is_decoder=causal)).eval()
    ours = LocalSelfAttention(32, 4, chunk_length=8, causal=causal)
    for name in ("query", "key", "value"):
        getattr(ours, name).weight.data.copy_(getattr(hf, name).weight)
    torch.nn.init.eye_(ours.output.weight)
    x = torch.randn(2, 24, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], hf(x).hidden_states, atol=1e-5, rtol=0)


def test_a_token_attends_to_itself_only_when_nothing_else_is_visible():
    torch.manual_seed(0)
    attn = LSHSelfAttention(8, 1, chunk_length=16, causal=True)
    torch.nn.init.eye_(attn.output.weight)
    x = torch.randn(1, 4, 8)
    out, _ = attn(x)
    v = attn.value(x)
    torch.testing.assert_close(out[0, 0], v[0, 0])  # the first token sees only itself
    torch.testing.assert_close(out[0, 1], v[0, 0])  # the second sees the first, not itself


def tiny(**overrides) -> ReformerConfig:
    base = dict(vocab_size=20, max_positions=32, hidden_size=16, num_heads=2, intermediate_size=24,
                attention_layers=["lsh", "local", "lsh"], num_hashes=2, num_buckets=4, lsh_chunk_length=4,
                local_chunk_length=4)  # fmt: skip
    return ReformerConfig(**{**base, **overrides})


def test_reversible_gradients_equal_the_ordinary_residual_network_float64():
    """Dropout on and unseeded hashing: the backward pass must replay the forward pass's randomness."""
    cfg = tiny(dropout=0.1, attention_dropout=0.1, ffn_chunk_size=8)
    torch.manual_seed(0)
    rev = Reformer(cfg).double().train()
    plain = Reformer(dataclasses.replace(cfg, reversible=False)).double().train()
    plain.load_state_dict(rev.state_dict())
    ids = torch.randint(0, 20, (3, 32))
    grads = []
    for model in (rev, plain):
        torch.manual_seed(123)
        model.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-4, rtol=0, msg=name)
    assert any(g.abs().sum() > 0 for g in grads[0].values())


def test_reversible_forward_equals_ordinary_and_no_activation_graph_is_kept():
    cfg = tiny(hash_seed=3)
    torch.manual_seed(0)
    rev = Reformer(cfg)
    plain = Reformer(dataclasses.replace(cfg, reversible=False))
    plain.load_state_dict(rev.state_dict())
    ids = torch.randint(0, 20, (2, 16))
    torch.testing.assert_close(rev(ids).logits, plain(ids).logits, atol=1e-5, rtol=0)
    e = torch.randn(2, 16, 16, requires_grad=True)
    y1, _ = rev.layers(e, e)
    assert type(y1.grad_fn).__name__ == "_ReversibleBackward"  # one node for the whole stack


def test_evaluation_hash_rounds_can_change():
    torch.manual_seed(0)
    model = Reformer(tiny()).eval()
    model.set_num_hashes(8)
    assert {m.num_hashes for m in model.modules() if isinstance(m, LSHSelfAttention)} == {8}
    assert model(torch.randint(0, 20, (1, 32))).logits.shape == (1, 32, 20)


def test_chunked_feed_forward_equals_whole():
    ffn = FeedForward(8, 16)
    x = torch.randn(2, 10, 8)
    torch.testing.assert_close(ChunkedFeedForward(ffn, 3)(x), ffn(x))


def test_bad_config_and_lengths_are_clear_errors():
    with pytest.raises(ValueError, match="attention_layers"):
        tiny(attention_layers=["lsh", "linear"])
    with pytest.raises(ValueError, match="even"):
        tiny(num_buckets=3)
    with pytest.raises(ValueError, match="multiple of the chunk length"):
        Reformer(tiny())(torch.randint(0, 20, (1, 6)))


def test_gpt_with_lsh_attention_trains_and_refuses_a_cache():
    from attnlab.models.gpt import build_gpt, count_parameters
    from attnlab.models.gpt_presets import get_gpt_preset

    cfg = get_gpt_preset("gpt-char-tiny", attention="lsh", lsh_chunk_length=16, lsh_num_buckets=8)
    model = build_gpt(cfg)
    assert count_parameters(cfg) == sum(p.numel() for p in model.parameters())
    assert isinstance(model.decoder.layers[0].self_attn.layer, LSHSelfAttention)
    ids = torch.randint(0, 256, (2, 64))
    model(ids, labels=ids).loss.backward()
    with pytest.raises(ValueError, match="no key/value cache"):
        model(ids[:, :16], cache=model.new_cache())
    with pytest.raises(ValueError, match="attention"):
        get_gpt_preset("gpt-char-tiny", attention="lsh2")
