"""attnlab.nn.local_attention equals dense attention with the band mask, forward and backward."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.local_attention import LocalSelfAttention, band_mask, key_padding_from_mask, local_attention
from attnlab.nn.masks import to_additive


def test_band_mask_by_hand():
    # T = 5, W = 1, causal, [CLS] global: row i sees i-1, i, and key 0; row 0 sees only itself
    m = band_mask(5, 1, causal=True, global_tokens=1)[0, 0].int().tolist()
    assert m == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 0, 1, 1, 0],
        [1, 0, 0, 1, 1],
    ]
    m = band_mask(5, 1, causal=False, global_tokens=1)[0, 0].int().tolist()
    assert m == [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 0, 1, 1, 1],
        [1, 0, 0, 1, 1],
    ]


CASES = [
    # (T, W, causal, G, padded): lengths not a multiple of the block, a window longer than T, globals
    (37, 8, False, 0, False),
    (37, 8, True, 0, False),
    (37, 8, False, 2, False),
    (37, 8, True, 2, False),
    (29, 5, False, 1, True),
    (29, 5, True, 1, True),
    (16, 4, False, 0, True),
    (7, 16, False, 1, False),
    (7, 16, True, 0, True),
]


@pytest.mark.parametrize("t,w,causal,g,padded", CASES)
def test_local_equals_band_masked_dense(t, w, causal, g, padded):
    torch.manual_seed(0)
    b, n, d = 2, 3, 8
    q, k, v = (torch.randn(b, n, t, d, requires_grad=True) for _ in range(3))
    keep = torch.ones(b, t, dtype=torch.bool)
    if padded:
        keep[1, t - 6 :] = False  # the second row ends in padding
    allowed = band_mask(t, w, causal, g) & keep[:, None, None, :]
    ref, _ = scaled_dot_product_attention(q, k, v, mask=allowed, need_weights=True)
    out = local_attention(q, k, v, w, causal, g, key_padding=keep if padded else None)
    # a real query always sees itself; compare only real queries (padding rows are ignored downstream)
    real = keep[:, None, :, None]
    assert (out - ref).mul(real).abs().max().item() <= 1e-6
    weights = torch.randn_like(out) * real  # a loss over the real positions only
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    grads_ref = torch.autograd.grad((ref * weights).sum(), (q, k, v))
    for got, want in zip(grads, grads_ref):
        assert (got - want).abs().max().item() <= 1e-6


def test_local_is_banded():
    # changing a key outside every window leaves the output unchanged (the test above could pass vacuously
    # if both paths ignored the mask; this one cannot)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 1, 20, 4) for _ in range(3))
    out = local_attention(q, k, v, window=3, causal=True)
    v2 = v.clone()
    v2[..., 15, :] += 10.0
    out2 = local_attention(q, k, v2, window=3, causal=True)
    changed = (out2 - out).abs().amax(dim=-1)[0, 0] > 1e-6
    assert changed.nonzero().flatten().tolist() == [15, 16, 17, 18]


def test_key_padding_from_models_masks():
    keep = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    additive = to_additive(keep[:, None, None, :])  # the encoder's (B, 1, 1, T)
    assert key_padding_from_mask(additive, 4).tolist() == keep.tolist()
    with pytest.raises(ValueError, match="key-padding mask"):
        key_padding_from_mask(to_additive(torch.ones(4, 4, dtype=torch.bool).tril()[None, None]), 4)
    assert key_padding_from_mask(None, 4) is None


@pytest.mark.parametrize("causal", [False, True])
def test_module_matches_multi_head_attention(causal):
    torch.manual_seed(2)
    local = LocalSelfAttention(16, 4, window=3, causal=causal, global_tokens=1).eval()
    dense = MultiHeadAttention(16, 4).eval()
    dense.load_state_dict(local.state_dict())  # same parameters, same names
    x = torch.randn(2, 11, 16)
    keep = torch.ones(2, 11)
    keep[0, 9:] = 0
    mask = to_additive(keep.bool()[:, None, None, :])
    allowed = band_mask(11, 3, causal, 1) & keep.bool()[:, None, None, :]
    out, _ = local(x, mask=mask)
    ref, _ = dense(x, mask=allowed)
    assert torch.allclose(out[0, :9], ref[0, :9], atol=1e-6) and torch.allclose(out[1], ref[1], atol=1e-6)
    # the dense path (attention maps) gives the same output and band-shaped probabilities
    out_w, probs = local(x, mask=mask, need_weights=True)
    assert torch.allclose(out_w[1], out[1], atol=1e-6)
    assert (probs[1] * ~band_mask(11, 3, causal, 1)[0]).abs().max() == 0


def test_query_key_mask_takes_the_dense_path():
    # a (B, 1, T, T) visibility matrix (the encoder's 3-D attention_mask) is combined with the band
    torch.manual_seed(4)
    local = LocalSelfAttention(8, 2, window=2).eval()
    dense = MultiHeadAttention(8, 2).eval()
    dense.load_state_dict(local.state_dict())
    x = torch.randn(1, 6, 8)
    visible = torch.rand(1, 1, 6, 6) > 0.3
    visible |= torch.eye(6, dtype=torch.bool)
    out, _ = local(x, mask=visible)
    ref, _ = dense(x, mask=visible & band_mask(6, 2))
    assert torch.allclose(out, ref, atol=1e-6)


def test_cached_decoding_equals_full_pass():
    torch.manual_seed(3)
    attn = LocalSelfAttention(8, 2, window=2, causal=True).eval()
    x = torch.randn(1, 9, 8)
    full, _ = attn(x)
    cache: dict = {}
    steps = [attn(x[:, i : i + 1], cache=cache)[0] for i in range(9)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-6)


def test_bad_window():
    with pytest.raises(ValueError, match="window"):
        LocalSelfAttention(8, 2, window=0)


def test_local_encoder_equals_full_encoder_with_the_band_as_its_mask():
    # the same weights: EncoderConfig(attention="local") against the full encoder given band & padding as a
    # (B, T, T) visibility mask (the encoder's 3-D attention_mask)
    from attnlab.models import Encoder, EncoderConfig, get_preset

    small = dict(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)
    local_cfg = EncoderConfig(**small, attention="local", attention_window=3, global_tokens=1)
    torch.manual_seed(5)
    local = Encoder(local_cfg).eval()
    full = Encoder(EncoderConfig(**small)).eval()
    full.load_state_dict(local.state_dict())
    ids = torch.randint(1, 50, (2, 13))
    keep = torch.ones(2, 13, dtype=torch.long)
    keep[1, 10:] = 0
    visible = band_mask(13, 3, global_tokens=1)[0, 0] & keep.bool()[:, None, :]  # (B, T, T)
    got = local(ids, attention_mask=keep).last_hidden_state
    want = full(ids, attention_mask=visible.long()).last_hidden_state
    assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1, :10], want[1, :10], atol=1e-5)
    assert get_preset("bert-mini-local").attention == "local"


def test_local_gpt_equals_full_gpt_with_the_band_mask_and_generates():
    # the decoder: GPTConfig(attention="local") against the full GPT on the same weights, the causal band
    # applied by hand (a float mask replaces GPT's own through the attention modules' mask argument)
    from attnlab.generation import generate
    from attnlab.models.gpt import GPTConfig, build_gpt

    cfg = GPTConfig(
        vocab_size=30, max_positions=64, hidden_size=16, num_layers=2, num_heads=2, dropout=0.0,
        embedding_dropout=0.0, attention_dropout=0.0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(6)
    local = build_gpt(dataclasses.replace(cfg, attention="local", attention_window=4)).eval()
    full = build_gpt(cfg).eval()
    full.load_state_dict(local.state_dict())
    ids = torch.randint(0, 30, (2, 21))
    x = full.embed(ids, torch.arange(21)[None])
    band = to_additive(band_mask(21, 4, causal=True), x.dtype)
    want = full.lm_head(full.decoder(x, band))
    got = local(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    # cached generation (the dense band path per step) continues the same text as the uncached blocks
    new = generate(local, ids[:1, :5], max_new_tokens=8, do_sample=False).sequences[0]
    assert len(new) == 8
    out = torch.cat([ids[:1, :5], torch.tensor([new])], dim=1)
    again = local(out).logits[:, 4:-1].argmax(-1)  # each generated token, predicted from its prefix
    assert torch.equal(out[:, 5:], again)
