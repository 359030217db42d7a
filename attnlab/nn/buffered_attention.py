"""Self-attention with a key/value cache written in place: the attention of the decoder-only models' decoding.

Shapes: B batch, T new positions, T_past cached positions, H hidden, N heads, D head size.
"""

from __future__ import annotations

from torch import Tensor

from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.derived import stacked_qkv
from attnlab.nn.linear import small_product, small_rows


class BufferedSelfAttention(MultiHeadAttention):
    """`MultiHeadAttention` whose self-attention cache is a preallocated buffer written in place.

    The base class appends each step's keys/values with ``torch.cat``, copying the whole cache every step
    (quadratic in the generated length; 30% of a small GPT's generation time on CPU). Here the cache holds
    ``key_buffer``/``value_buffer`` (B, N, capacity, D), doubled when full, and ``key``/``value`` are views
    of their first T_past + T positions, so a step writes only its own keys/values (`append`). Same
    parameters, same results; cross-attention and uncached calls are the base class's.

    One decoding step (`attnlab.nn.linear.small_rows`: a few rows, no gradient) runs the query, key and
    value projections as one product on their weights stacked, (3H, H) (GPT-2's ``c_attn``): one call
    instead of three (a third of a small model's step time was the calls' overhead), in the layout
    `attnlab.nn.linear.small_product` picks for its shape. The stacked copy (`attnlab.nn.derived.stacked_qkv`,
    shared with the fused encoder layer) is rebuilt when any of them changes or moves; at one or
    two rows `small_product` keeps a column-major copy of it too (not on Intel CPUs, where MKL's plain product
    is as fast), so decoding holds the q/k/v weights up to three times (gpt-bpe-small: two copies of 10.6 MB
    beside its 56 MB). Other calls (training, the prompt) take the three projections.
    `attnlab.nn.decoding_step` computes the same step without the module calls.
    """

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, H) -> q, k, v (B, N, T, D)."""
        weight = getattr(self.query, "weight", None)  # none on int8 layers (`attnlab.inference.quantize`)
        if not isinstance(weight, Tensor) or not small_rows(x, weight):  # training, the prompt: 3 products
            return self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
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

    @staticmethod
    def append(cache: dict, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Write this call's keys/values (B, N, T, D) after the cached ones; returns all keys and values
        (B, N, T_past + T, D), views of the buffers (grown by doubling when full)."""
        b, n, t, d = k_new.shape
        past = cache["key"].size(2) if "key" in cache else 0
        buffer = cache.get("key_buffer")
        if buffer is None or buffer.size(2) < past + t:
            capacity = max(64, 2 * (past + t))  # doubling: amortised O(1) copies per step
            for name, new in (("key", k_new), ("value", v_new)):
                grown = new.new_empty(b, n, capacity, d)
                if past:
                    grown[:, :, :past] = cache[name]
                cache[f"{name}_buffer"] = grown
        cache["key_buffer"][:, :, past : past + t] = k_new
        cache["value_buffer"][:, :, past : past + t] = v_new
        k = cache["key"] = cache["key_buffer"][:, :, : past + t]  # (B, N, T_past + T, D), a view
        v = cache["value"] = cache["value_buffer"][:, :, : past + t]
        return k, v

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if context is not None or cache is None:
            return super().forward(x, context, mask, need_weights, cache)
        q, k_new, v_new = self._project(x)  # (B, N, T, D) each
        k, v = self.append(cache, k_new, v_new)
        out, probs = scaled_dot_product_attention(
            q, k, v, mask=mask, dropout_p=self.dropout, need_weights=need_weights, training=self.training
        )
        return self.output(self._merge_heads(out)), probs
