"""Attention and masks: the fast (SDPA) and explicit paths agree for every mask type; masked keys
get probability 0; fully masked rows stay finite; the key/value cache reproduces full attention."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.nn import MultiHeadAttention, causal_mask, combine_masks, padding_mask, to_additive
from attnlab.nn.attention import scaled_dot_product_attention

B, N, TQ, TK, D = 2, 3, 5, 7, 8


def qkv(seed: int = 0, tq: int = TQ, tk: int = TK) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, N, tq, D, generator=g),
        torch.randn(B, N, tk, D, generator=g),
        torch.randn(B, N, tk, D, generator=g),
    )


def masks(kind: str, tq: int = TQ, tk: int = TK) -> torch.Tensor | None:
    g = torch.Generator().manual_seed(1)
    if kind == "none":
        return None
    if kind == "padding":
        am = torch.ones(B, tk, dtype=torch.long)
        am[1, 4:] = 0
        return padding_mask(am)  # (B, 1, 1, TK)
    if kind == "causal":
        return causal_mask(tq, tk)  # (1, 1, TQ, TK)
    if kind == "boolean":
        m = torch.rand(B, N, tq, tk, generator=g) > 0.4
        m[..., 0] = True  # at least one visible key per row
        return m
    if kind == "additive":
        return torch.randn(B, 1, tq, tk, generator=g)  # arbitrary biases (e.g. relative positions)
    if kind == "additive_inf":
        m = torch.zeros(B, 1, tq, tk)
        m[0, 0, :, 2:] = float("-inf")
        return m
    if kind == "combined":
        am = torch.ones(B, tk, dtype=torch.long)
        am[0, 5:] = 0
        return combine_masks(padding_mask(am), causal_mask(tq, tk), torch.randn(1, N, tq, tk, generator=g))
    raise AssertionError(kind)


MASK_KINDS = ["none", "padding", "causal", "boolean", "additive", "additive_inf", "combined"]


def reference(q, k, v, mask):
    """The formula written out in float64: softmax(Q K^T / sqrt(D) + mask) V."""
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.double()
    p = torch.softmax(scores, -1)
    return p @ v.double(), p


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_fast_and_explicit_paths_agree(kind: str) -> None:
    q, k, v = qkv()
    mask = masks(kind)
    fast, none = scaled_dot_product_attention(q, k, v, mask=mask)
    slow, probs = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    assert none is None and probs is not None
    assert probs.shape == (B, N, TQ, TK)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    ref_out, ref_p = reference(q, k, v, mask)
    torch.testing.assert_close(slow.double(), ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(probs.double(), ref_p, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_multihead_paths_agree_self_and_cross(kind: str) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, N, dropout=0.3).eval()  # dropout is off in eval
    x, ctx = torch.randn(B, TQ, 24), torch.randn(B, TK, 24)
    mask = masks(kind)
    fast, _ = mha(x, context=ctx, mask=mask)
    slow, probs = mha(x, context=ctx, mask=mask, need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    assert fast.shape == (B, TQ, 24) and probs.shape == (B, N, TQ, TK)
    # self-attention (square masks)
    smask = masks(kind, TQ, TQ)
    fast, _ = mha(x, mask=smask)
    slow, _ = mha(x, mask=smask, need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["padding", "causal", "boolean"])
def test_masked_keys_get_zero_probability(kind: str) -> None:
    q, k, v = qkv()
    mask = masks(kind)
    _, probs = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    hidden = ~mask.expand_as(probs)
    assert hidden.any()
    assert torch.all(probs[hidden] == 0.0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(B, N, TQ))


def test_masked_values_do_not_leak() -> None:
    q, k, v = qkv()
    mask = masks("padding")
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    v2 = v.clone()
    v2[1, :, 4:] = 1e4  # change only padded keys' values
    k2 = k.clone()
    k2[1, :, 4:] = -7.0
    out2, _ = scaled_dot_product_attention(q, k2, v2, mask=mask)
    torch.testing.assert_close(out, out2)


def test_fully_masked_row_is_finite_on_both_paths() -> None:
    q, k, v = qkv()
    mask = torch.ones(B, 1, TQ, TK, dtype=torch.bool)
    mask[0, 0, 2] = False  # query 2 of batch 0 sees nothing
    fast, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    slow, probs = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    assert torch.isfinite(fast).all() and torch.isfinite(slow).all()
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    # the documented choice: a uniform average over the keys
    torch.testing.assert_close(probs[0, :, 2], torch.full((N, TK), 1.0 / TK))
    # also with an additive -inf mask
    add = torch.zeros(B, 1, TQ, TK)
    add[1, 0, 0] = float("-inf")
    fast, _ = scaled_dot_product_attention(q, k, v, mask=add)
    assert torch.isfinite(fast).all()


def test_golden_single_head() -> None:
    # Two keys with scores 0 and ln(3)*sqrt(D)/sqrt(D): weights 1/4, 3/4.
    q = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])  # (1, 1, 1, 4), D = 4, scale 1/2
    k = torch.tensor([[[[0.0, 0.0, 0.0, 0.0], [2 * math.log(3.0), 0.0, 0.0, 0.0]]]])
    v = torch.tensor([[[[4.0, 0.0, 0.0, 0.0], [0.0, 8.0, 0.0, 0.0]]]])
    out, probs = scaled_dot_product_attention(q, k, v, need_weights=True)
    torch.testing.assert_close(probs, torch.tensor([[[[0.25, 0.75]]]]))
    torch.testing.assert_close(out, torch.tensor([[[[1.0, 6.0, 0.0, 0.0]]]]))


@settings(max_examples=25, deadline=None)
@given(
    tq=st.integers(1, 6),
    tk=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    density=st.floats(0.0, 1.0),
)
def test_paths_agree_on_random_boolean_masks(tq: int, tk: int, seed: int, density: float) -> None:
    q, k, v = qkv(seed, tq, tk)
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, N, tq, tk, generator=g) < density  # rows may be fully masked
    fast, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    slow, probs = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    visible_rows = mask.any(-1)
    assert torch.all(probs[visible_rows.unsqueeze(-1).expand_as(mask) & ~mask] == 0)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    a, _ = mha(x)
    b, _ = mha(x)
    torch.testing.assert_close(a, b)
    mha.train()
    c, _ = mha(x)
    assert not torch.allclose(a, c)


def test_self_attention_cache_matches_full_causal_attention() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    full, _ = mha(x, mask=causal_mask(6))
    cache: dict = {}
    steps = []
    for t in range(6):  # one token at a time
        out, _ = mha(x[:, t : t + 1], mask=causal_mask(1, t + 1), cache=cache)
        steps.append(out)
        assert cache["key"].shape == (2, 4, t + 1, 4)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # a prefix then a chunk of two
    cache = {}
    a, _ = mha(x[:, :4], mask=causal_mask(4), cache=cache)
    b, _ = mha(x[:, 4:], mask=causal_mask(2, 6), cache=cache)
    torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-5, rtol=1e-5)


def test_cross_attention_cache_reuses_context_projection() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, ctx = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    full, _ = mha(x, context=ctx)
    cache: dict = {}
    first, _ = mha(x[:, :1], context=ctx, cache=cache)
    key = cache["key"]
    second, _ = mha(x[:, 1:], context=ctx, cache=cache)
    assert cache["key"] is key  # computed once
    torch.testing.assert_close(torch.cat([first, second], 1), full, atol=1e-5, rtol=1e-5)


def test_heads_must_divide_dim() -> None:
    with pytest.raises(ValueError, match="hidden size 30 is not divisible by the number of heads 4"):
        MultiHeadAttention(30, 4)


# -- masks -------------------------------------------------------------------------------------------
def test_padding_mask() -> None:
    am = torch.tensor([[1, 1, 0], [1, 0, 0]])
    m = padding_mask(am)
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    with pytest.raises(ValueError, match=r"2-D \(B, T\)"):
        padding_mask(torch.ones(2, 3, 4))


def test_causal_mask_with_offset() -> None:
    assert causal_mask(3)[0, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert causal_mask(2, 4)[0, 0].int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    with pytest.raises(ValueError, match="key_length"):
        causal_mask(4, 2)


def test_combine_and_additive() -> None:
    a = torch.tensor([True, True, False])
    b = torch.tensor([True, False, False])
    assert combine_masks(a, None, b).tolist() == [True, False, False]
    assert combine_masks(None) is None
    add = combine_masks(a, torch.tensor([0.5, 0.0, 0.0]))
    neg = torch.finfo(torch.float32).min
    assert add.dtype == torch.float32 and add.tolist() == [0.5, 0.0, neg]
    both = combine_masks(to_additive(b), to_additive(a))  # two finfo.min stay finite
    assert torch.isfinite(both).all()
    assert to_additive(torch.tensor([0.0, float("-inf")])).tolist() == [0.0, neg]
    with pytest.raises(TypeError, match="bool .* or float"):
        to_additive(torch.tensor([1, 0]))
