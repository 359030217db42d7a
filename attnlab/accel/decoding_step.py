"""Inference fast path for a decoding step: each decoder layer as one function over its tensors.

A step of a small decoder at batch size 1 reads every weight for one row, and beside those products it
spends much of its time in Python: some 15 module calls a layer (`Residual`, LayerNorm, the attention, four
`Linear`, the feed-forward, its activation, three dropouts that are identities in eval), each deciding again
what it decided at the step before (`attnlab.accel.linear.small_rows`, the weight layout, the cached copies'
version checks). `LayerStep` resolves all of that once for a layer and a number of rows, and then computes
the layer with the modules' own operations in the same order, so its outputs are bit-identical to the
modules'. `SteppedDecoder` (what `attnlab.accel.optimize` re-classes a `Decoder` to) holds the steps in its
decoding cache, `StepCache`.

Why: for a small decoder the module calls are a fifth of a step's time. ``benchmarks/generation.py``
(figures in docs/design_measurements.md).

`decoding_steps` returns the steps of a stack of (self-attention, feed-forward) residual pairs, or None
(the caller runs the modules) unless every pair is the plain decoder layer in eval mode:

- ``Residual(BufferedSelfAttention)`` then ``Residual(FeedForward)``, both residuals with one placement
  (post-LN or pre-LN), LayerNorms with weights, the projections float ``nn.Linear`` (not int8 ones from
  `attnlab.inference.quantize`, no stacked ``qkv`` module set);
- every module in eval mode and without forward hooks.

Those are checked once, when the steps are made; the call's own conditions (no gradient, float32 on the
CPU, no global hooks, no tracing, `attnlab.accel.fused_layer.fused_layers` on, at most
`attnlab.accel.linear.SMALL_ROWS` rows) at every step by `SteppedDecoder`. A module switched to training or
given a hook after the steps were made is not seen by them: the decoding cache that holds them is made for
one generation (`SteppedDecoder.new_cache`), and a new cache checks again. Cross-attention layers (the
encoder-decoder) keep the modules.

Shapes: R rows (B x T with T new positions), B batch, T new positions, H hidden, V vocabulary.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.accel.derived import stacked_qkv
from attnlab.accel.fused_layer import fast_path_allowed, untouched
from attnlab.accel.linear import SMALL_ROWS, FastLinear, small_product_fn
from attnlab.accel.stacked_attention import StackedSelfAttention
from attnlab.models.decoder import Cache, Decoder, DecoderLayer
from attnlab.nn.attention import scaled_dot_product_attention
from attnlab.nn.buffered_attention import BufferedSelfAttention
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.residual import Residual

__all__ = ["LayerStep", "StepCache", "SteppedDecoder", "decoding_steps", "plain_decoder_layer"]


def _plain_norm(norm: nn.Module) -> bool:
    return type(norm) is nn.LayerNorm and norm.weight is not None


def _float_linear(layer: nn.Module) -> bool:
    return type(layer) in (nn.Linear, FastLinear)  # not int8 ones, nor wrappers


def plain_decoder_layer(attention: nn.Module, feed_forward: nn.Module) -> bool:
    """Whether ``feed_forward(attention(x, mask=..., cache=...))`` is the plain decoder layer `LayerStep`
    computes (see the module docstring)."""
    if type(attention) is not Residual or type(feed_forward) is not Residual:
        return False
    attn, ffn = attention.layer, feed_forward.layer
    return (
        type(attn) in (BufferedSelfAttention, StackedSelfAttention)
        and attn.qkv is None
        and type(ffn) is FeedForward
        and all(_float_linear(p) for p in (attn.query, attn.key, attn.value, attn.output, ffn.up, ffn.down))
        and attention.norm_first == feed_forward.norm_first
        and _plain_norm(attention.norm)
        and _plain_norm(feed_forward.norm)
        and untouched(attention)
        and untouched(feed_forward)
    )


def _activation(module: nn.Module) -> Callable[[Tensor], Tensor]:
    """The activation as a function: the functional form of GELU and ReLU (what their modules call), else
    the module itself."""
    if type(module) is nn.GELU:
        return functools.partial(F.gelu, approximate=module.approximate)
    if type(module) is nn.ReLU:
        return F.relu
    return module


def _layer_norm(norm: nn.LayerNorm) -> Callable[[Tensor], Tensor]:
    """``norm`` as a function (`nn.LayerNorm.forward`'s own call)."""
    return functools.partial(
        F.layer_norm, normalized_shape=norm.normalized_shape, weight=norm.weight, bias=norm.bias, eps=norm.eps
    )


class LayerStep:
    """One plain decoder layer (`plain_decoder_layer`) for inputs of ``rows`` rows, resolved: its norms as
    functions, its four products in `attnlab.accel.linear.small_product`'s layout for that many rows (the
    stacked query/key/value weight as the attention's own step takes it). ``step(x, mask, cache)`` equals
    ``feed_forward(attention(x, mask=mask, cache=cache))`` in eval mode, bit for bit."""

    def __init__(self, attention: Residual, feed_forward: Residual, rows: int) -> None:
        attn, ffn = attention.layer, feed_forward.layer
        self.attn: BufferedSelfAttention = attn
        self.norm_first = attention.norm_first
        self.norm1 = _layer_norm(attention.norm)
        self.norm2 = _layer_norm(feed_forward.norm)
        qkv_weight, qkv_bias = stacked_qkv(attn)
        self.qkv = small_product_fn(attn, qkv_weight, qkv_bias, rows, "_qkv_t")
        self.out = small_product_fn(attn.output, attn.output.weight, attn.output.bias, rows)
        self.up = small_product_fn(ffn.up, ffn.up.weight, ffn.up.bias, rows)
        self.down = small_product_fn(ffn.down, ffn.down.weight, ffn.down.bias, rows)
        self.act = _activation(ffn.activation)  # the feed-forward's inner dropout: identity in eval

    def __call__(self, x: Tensor, mask: Tensor | None, cache: dict) -> Tensor:
        """x (B, T, H); ``mask`` the layer's self-attention mask (or None); ``cache`` its self-attention
        cache (`BufferedSelfAttention`'s buffers, written here as there) -> (B, T, H)."""
        attn = self.attn
        h = self.norm1(x) if self.norm_first else x
        q, k, v = StackedSelfAttention.split_qkv(attn, self.qkv(h))
        k, v = attn.append(cache, k, v)
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask)  # eval: no dropout
        a = self.out(attn._merge_heads(out))
        x = x + a if self.norm_first else self.norm1(x + a)  # the residuals' dropouts: identity in eval
        h = self.norm2(x) if self.norm_first else x
        f = self.down(self.act(self.up(h)))
        return x + f if self.norm_first else self.norm2(x + f)


def decoding_steps(pairs: Sequence[tuple[nn.Module, nn.Module]], rows: int) -> list[LayerStep] | None:
    """A `LayerStep` for each (self-attention, feed-forward) pair at ``rows`` rows, or None unless every
    pair is plain (`plain_decoder_layer`)."""
    if not all(plain_decoder_layer(a, f) for a, f in pairs):
        return None
    return [LayerStep(a, f, rows) for a, f in pairs]


class StepCache(list):
    """A decoding `Cache` (one ``{"self": {}, "cross": {}}`` per layer) that also holds, once made, the
    stack's decoding steps by number of rows (None where the layers are not plain): made at the first step
    that can take them and kept for this cache's generation."""

    def __init__(self, layers: int) -> None:
        super().__init__({"self": {}, "cross": {}} for _ in range(layers))
        self.steps: dict[int, list[LayerStep] | None] = {}

    def __deepcopy__(self, memo: dict) -> StepCache:
        """A copy of the cached keys and values without the steps (they refer to the model's modules, which a
        deep copy would copy too): the copy makes its own at its first step."""
        copied = StepCache(0)
        copied.extend(copy.deepcopy(list(self), memo))
        return copied


class SteppedDecoder(Decoder):
    """`Decoder` (same modules and results) whose decoding step of a few rows in CPU inference runs each
    plain layer as one function (`LayerStep`, bit-identical), made once per cache (`StepCache`)."""

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> Tensor:
        steps = self._decoding_steps(x, cache) if memory is None else None
        if steps is None:
            return super().forward(x, self_mask, memory, memory_mask, cache)
        for step, layer_cache in zip(steps, cache, strict=True):  # type: ignore[arg-type]
            x = step(x, self_mask, layer_cache["self"])
        return self.final_norm(x) if self.final_norm is not None else x

    def _decoding_steps(self, x: Tensor, cache: Cache | None) -> list[LayerStep] | None:
        """The cache's decoding steps for ``x`` (B, T, H) where the call allows them, else None."""
        # fast_path_allowed first: it refuses tracing before the size test could guard symbolic sizes
        if not isinstance(cache, StepCache) or not fast_path_allowed(x):
            return None
        rows = x.shape[0] * x.shape[1]
        if rows > SMALL_ROWS:
            return None
        if rows not in cache.steps:
            plain = all(
                type(layer) is DecoderLayer
                and layer.cross_attn is None
                and not (layer.training or layer._forward_hooks or layer._forward_pre_hooks)
                for layer in self.layers
            )
            pairs = [(layer.self_attn, layer.feed_forward) for layer in self.layers]
            cache.steps[rows] = decoding_steps(pairs, rows) if plain else None
        return cache.steps[rows]

    def new_cache(self) -> StepCache:
        return StepCache(len(self.layers))
