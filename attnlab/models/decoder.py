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

from attnlab.nn.buffered_attention import BufferedSelfAttention
from attnlab.nn.residual import Residual

__all__ = [
    "BufferedSelfAttention", "Cache", "Decoder", "DecoderLayer", "LayerCache", "cache_length",
    "reorder_cache",
]  # fmt: skip

LayerCache = dict[str, dict]  # {"self": {"key", "value"}, "cross": {"key", "value"}}
Cache = list[LayerCache]  # one per layer


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
