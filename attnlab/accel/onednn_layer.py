"""`onednn_encoder_layer`: an encoder layer's inference on oneDNN with its weights packed once.

Where `attnlab.accel.onednn_linear` sends the float32 products to oneDNN (``cpu_gemm() == "onednn"``: CPUs
with AVX-512 not made by Intel), each ``_linear_pointwise`` call reorders its weight into oneDNN's blocked
layout before multiplying. This path keeps each weight of the layer reordered once
(``torch.ops.mkldnn._reorder_linear_weight``, beside the layer through `attnlab.accel.derived` until a weight
changes), stacks the query, key and value into one (3H, H) product, and runs the feed-forward's GELU in the
first product's epilogue (oneDNN's ``gelu_erf`` / ``gelu_tanh`` post-op). At bert-mini's 128 tokens that
takes about 8% off a forward on one thread (``benchmarks/inference.py``; figures in docs/performance.md).

Outputs within float32 rounding of the module calls (the same products and summation order; tested to 1e-5).
Memory: a packed copy of every weight of the layer, beside the module's own.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from attnlab.accel.derived import derived, stacked_qkv
from attnlab.accel.fused_layer import attend_stacked, untouched
from attnlab.accel.linear import FastLinear
from attnlab.accel.onednn_linear import MIN_MACS, cpu_gemm
from attnlab.accel.unpadded import Rows
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.residual import Residual

__all__ = ["onednn_encoder_layer", "onednn_layer_applies"]

_OP = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
_REORDER = getattr(getattr(torch.ops, "mkldnn", None), "_reorder_linear_weight", None)


def _epilogue(ffn: FeedForward) -> tuple[str, str] | None:
    """oneDNN's post-op for the feed-forward's activation: (attr, algorithm); None where it has none here."""
    act = ffn.activation
    if type(act) is nn.GELU:
        return ("gelu", "none") if act.approximate == "none" else ("gelu", "tanh")
    return ("relu", "") if type(act) is nn.ReLU else None


def onednn_layer_applies(attention: nn.Module, feed_forward: nn.Module, x: Tensor) -> bool:
    """Whether `onednn_encoder_layer` computes ``feed_forward(attention(x))``: oneDNN chosen for float32
    products and its operators present; the plain sub-layers (`Residual` of `MultiHeadAttention` and of
    `FeedForward`, eval mode, no hooks) with float32 `FastLinear` projections with biases (not int8), weights
    that keep a version counter (not made under ``inference_mode``: their packed copies could not be kept);
    products large enough for oneDNN (`MIN_MACS`). For a caller that checked `fast_path_allowed`."""
    if _OP is None or _REORDER is None or cpu_gemm() != "onednn":
        return False
    if type(attention) is not Residual or type(feed_forward) is not Residual:
        return False
    attn, ffn = attention.layer, feed_forward.layer
    if type(attn) is not MultiHeadAttention or type(ffn) is not FeedForward or attn.qkv is not None:
        return False
    projections = (attn.query, attn.key, attn.value, attn.output, ffn.up, ffn.down)
    for p in projections:
        if type(p) is not FastLinear or p.bias is None:
            return False
        w = p.weight
        if w.dtype is not torch.float32 or not w.is_cpu or w.is_inference():
            return False
    rows = x.numel() // x.shape[-1]
    return (
        rows * attn.output.weight.numel() >= MIN_MACS
        and _epilogue(ffn) is not None
        and untouched(attention)
        and untouched(feed_forward)
    )


class _Packed(NamedTuple):
    """A layer's weights in oneDNN's layout, with their biases. Tensors only: the plan is kept in a dictionary
    weak on the layer's module, which a reference back would keep alive."""

    qkv: Tensor  # (3H, H) packed
    qkv_bias: Tensor
    output: Tensor
    output_bias: Tensor
    up: Tensor
    up_bias: Tensor
    down: Tensor
    down_bias: Tensor


def _packed(attention: Residual, feed_forward: Residual) -> _Packed:
    attn, ffn = attention.layer, feed_forward.layer
    linears = (attn.query, attn.key, attn.value, attn.output, ffn.up, ffn.down)
    sources = [t for p in linears for t in (p.weight, p.bias)]

    def build() -> _Packed:
        weight, bias = stacked_qkv(attn)
        pack = [(_REORDER(weight, None), bias)]
        for p in (attn.output, ffn.up, ffn.down):
            pack.append((_REORDER(p.weight.detach(), None), p.bias.detach()))
        return _Packed(*(t for pair in pack for t in pair))

    return derived(attention, "_onednn_packed", sources, build)


def onednn_encoder_layer(
    attention: Residual, feed_forward: Residual, x: Tensor, mask: Tensor | None, rows: Rows | None = None
) -> Tensor:
    """``feed_forward(attention(x, mask=mask))`` on oneDNN's packed products (see the module docstring), for
    layers where `onednn_layer_applies`. ``x`` (B, T, H), or (1, N, H) a padded batch's real tokens with
    ``rows`` (`attnlab.accel.unpadded`); ``mask`` the encoder's additive mask or None."""
    attn, ffn = attention.layer, feed_forward.layer
    w = _packed(attention, feed_forward)
    qkv = _OP(attention.branch_input(x), w.qkv, w.qkv_bias, "none", [], "")  # (.., 3H)
    out = attend_stacked(attn, qkv, mask, rows)  # (.., H), heads merged
    x = attention.merge(x, _OP(out, w.output, w.output_bias, "none", [], ""))  # dropouts: identity in eval
    attr, algorithm = _epilogue(ffn)
    h = _OP(feed_forward.branch_input(x), w.up, w.up_bias, attr, [], algorithm)  # act(up(x)) in one product
    return feed_forward.merge(x, _OP(h, w.down, w.down_bias, "none", [], ""))
