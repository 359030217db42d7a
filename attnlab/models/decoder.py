"""The one decoder layer and its stack, shared by GPT (models.gpt) and translation (attnlab.translation).

Shapes: B batch, T target (query) length, T_past cached positions, S source (memory) length, H hidden,
N heads, D head size.

A layer is three sub-layers, each in a `Residual` (post-LN as Vaswani et al. 2017 and GPT, Radford et al.
2018; pre-LN as GPT-2, Radford et al. 2019 section 2.3):

- masked self-attention (the caller passes the causal mask, combined with any padding mask);
- encoder-decoder attention over a ``memory`` (only in an encoder-decoder; GPT has none);
- the position-wise feed-forward network.

Without cross-attention and given a padding mask instead of a causal one, the same layer is the encoder layer
of the encoder-decoder (self-attention, feed-forward): translation builds its encoder from it too, so no layer
class exists twice.

Incremental decoding: a per-layer cache ``{"self": {}, "cross": {}}`` (`new_cache`); self-attention
keys/values (B, N, T_past + T, D) are appended at each call, encoder-decoder keys/values are computed from
the memory once (attnlab.nn.MultiHeadAttention). `reorder_cache` keeps or reorders batch rows (beam search).
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.derived import stacked_qkv
from attnlab.nn.linear import small_product, small_rows
from attnlab.nn.residual import Residual

LayerCache = dict[str, dict]  # {"self": {"key", "value"}, "cross": {"key", "value"}}
Cache = list[LayerCache]  # one per layer


class BufferedSelfAttention(MultiHeadAttention):
    """`MultiHeadAttention` whose self-attention cache is a preallocated buffer written in place.

    The base class appends each step's keys/values with ``torch.cat``, copying the whole cache every step
    (quadratic in the generated length; 30% of a small GPT's generation time on CPU). Here the cache holds
    ``key_buffer``/``value_buffer`` (B, N, capacity, D), doubled when full, and ``key``/``value`` are views
    of their first T_past + T positions, so a step writes only its own keys/values. Same parameters, same
    results; cross-attention and uncached calls are the base class's.

    One decoding step (`attnlab.nn.linear.small_rows`: a few rows, no gradient) runs the query, key and
    value projections as one product on their weights stacked, (3H, H) (GPT-2's ``c_attn``): one call
    instead of three (a third of a small model's step time was the calls' overhead), in the layout
    `attnlab.nn.linear.small_product` picks for its shape. The stacked copy (`attnlab.nn.derived.stacked_qkv`,
    shared with the fused encoder layer) is rebuilt when any of them changes or moves; at one or
    two rows `small_product` keeps a column-major copy of it too (not on Intel CPUs, where MKL's plain product
    is as fast), so decoding holds the q/k/v weights up to three times (gpt-bpe-small: two copies of 10.6 MB
    beside its 56 MB). Other calls (training, the prompt) take the three projections.
    """

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, H) -> q, k, v (B, N, T, D)."""
        if not small_rows(x, self.query.weight):  # training, the prompt: three products
            return self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        b, t, _ = x.shape
        weight, bias = stacked_qkv(self)
        qkv = small_product(self, x, weight, bias, "_qkv_t").reshape(b, t, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(2)  # each (B, T, N, D)
        # A product of 3-8 rows comes back column-major; SDPA's fused CPU kernel wants each head's D
        # features adjacent (else its math path, 2.5x slower), so the query is copied (B x H floats); the
        # keys and values are copied into the cache anyway.
        return q.transpose(1, 2).contiguous(), k.transpose(1, 2), v.transpose(1, 2)

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
        out, probs = scaled_dot_product_attention(
            q, k, v, mask=mask, dropout_p=self.dropout, need_weights=need_weights, training=self.training
        )
        return self.output(self._merge_heads(out)), probs


class DecoderLayer(nn.Module):
    """Masked self-attention, optional encoder-decoder attention, feed-forward; each a `Residual`."""

    def __init__(
        self, self_attn: Residual, feed_forward: Residual, cross_attn: Residual | None = None
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.feed_forward = feed_forward

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """x (B, T, H) [, memory (B, S, H)] -> (B, T, H).

        ``self_mask`` broadcastable to (B, N, T, T_past + T); ``memory_mask`` to (B, N, T, S).
        """
        x = self.self_attn(x, mask=self_mask, cache=cache["self"] if cache is not None else None)[0]
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("DecoderLayer: this layer has encoder-decoder attention; pass `memory`")
            cross_cache = cache["cross"] if cache is not None else None
            x = self.cross_attn(x, context=memory, mask=memory_mask, cache=cross_cache)[0]
        return self.feed_forward(x)


class Decoder(nn.Module):
    """A stack of `DecoderLayer`; ``final_norm`` after it (pre-LN models: GPT-2, pre-LN translation)."""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: Cache | None = None,
    ) -> Tensor:
        """(B, T, H) -> (B, T, H); ``cache`` from `new_cache` (one entry per layer) or None."""
        for i, layer in enumerate(self.layers):
            x = layer(x, self_mask, memory, memory_mask, cache[i] if cache is not None else None)
        return self.final_norm(x) if self.final_norm is not None else x

    def new_cache(self) -> Cache:
        return [{"self": {}, "cross": {}} for _ in self.layers]


def cache_length(cache: Cache | None) -> int:
    """Positions held by the self-attention cache (0 when empty or None)."""
    if not cache or "key" not in cache[0]["self"]:
        return 0
    return int(cache[0]["self"]["key"].size(2))


def reorder_cache(cache: Cache, rows: Tensor) -> None:
    """Keep batch rows ``rows`` (B',) of every cached key/value, in that order (in place)."""
    for layer in cache:
        for part in layer.values():
            if "key_buffer" in part:  # BufferedSelfAttention: select the buffers, views of them again
                length = part["key"].size(2)
                for name in ("key", "value"):
                    part[f"{name}_buffer"] = part[f"{name}_buffer"].index_select(0, rows)
                    part[name] = part[f"{name}_buffer"][:, :, :length]
            elif "key" in part:
                part["key"] = part["key"].index_select(0, rows)
                part["value"] = part["value"].index_select(0, rows)
