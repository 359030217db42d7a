"""A decoding step's query, key and value as one product: `StackedSelfAttention`.

Shapes: B batch, T new positions, H hidden, N heads, D head size.
"""

from __future__ import annotations

from torch import Tensor

from attnlab.accel.derived import stacked_qkv
from attnlab.accel.linear import small_product, small_rows
from attnlab.nn.buffered_attention import BufferedSelfAttention

__all__ = ["StackedSelfAttention"]


class StackedSelfAttention(BufferedSelfAttention):
    """`BufferedSelfAttention` (same parameters and cache) whose decoding step runs the query, key and value
    projections as one product on their weights stacked, (3H, H) (GPT-2's ``c_attn``).

    One decoding step (`attnlab.accel.linear.small_rows`: a few rows, no gradient) takes one call instead of
    three (a third of a small model's step time was the calls' overhead), in the layout
    `attnlab.accel.linear.small_product` picks for its shape. The stacked copy
    (`attnlab.accel.derived.stacked_qkv`, shared with the fused encoder layer) is rebuilt when any of them
    changes or moves; at one or two rows `small_product` keeps a column-major copy of it too (not on Intel
    CPUs, where MKL's plain product is as fast), so decoding holds the q/k/v weights up to three times
    (gpt-bpe-small: two copies of 10.6 MB beside its 56 MB). Other calls (training, the prompt) take the
    three projections. `attnlab.accel.decoding_step` computes the same step without the module calls.
    `attnlab.accel.optimize` re-classes a model's `BufferedSelfAttention` layers to this class.
    """

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, H) -> q, k, v (B, N, T, D)."""
        weight = getattr(self.query, "weight", None)  # none on int8 layers (`attnlab.inference.quantize`)
        if not isinstance(weight, Tensor) or not small_rows(x, weight):  # training, the prompt: 3 products
            return super()._project(x)
        weight, bias = stacked_qkv(self)
        return self.split_qkv(small_product(self, x, weight, bias, "_qkv_t"))

    def split_qkv(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The stacked product's output (B, T, 3H) -> q, k, v (B, N, T, D)."""
        b, t, _ = qkv.shape
        q, k, v = qkv.reshape(b, t, 3, self.num_heads, self.head_dim).unbind(2)  # each (B, T, N, D)
        # A product of 3-8 rows comes back column-major; SDPA's fused CPU kernel wants each head's D
        # features adjacent (else its math path, 2.5x slower), so the query is copied (B x H floats); the
        # keys and values are copied into the cache anyway.
        return q.transpose(1, 2).contiguous(), k.transpose(1, 2), v.transpose(1, 2)
