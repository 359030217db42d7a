"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, section 3.2).

Shapes: B batch, N heads, T_q / T_k query / key length, H model size, D = H / N head size.
Masks follow attnlab.nn.masks: bool ``True`` = may attend, or additive float; broadcastable to
``(B, N, T_q, T_k)``.

Two paths compute the same function:

- the fast path calls ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels, the
  probabilities are never materialised);
- the explicit path (``need_weights=True``) writes ``softmax(Q K^T / sqrt(D) + mask) V`` out and also
  returns the probabilities ``(B, N, T_q, T_k)``, e.g. for attention maps.

Boolean masks are turned into additive ``finfo.min`` masks before either path, so a fully masked row
is finite (a uniform average) on both paths; see attnlab.nn.masks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.nn.masks import to_additive


def _prepare_mask(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Additive mask in the scores' dtype; a no-op for an additive mask already in that dtype.

    (Float masks of the right dtype are trusted as built by `to_additive`/`combine_masks`, so the
    encoder's mask, built once per forward, costs nothing per layer.)
    """
    if mask is None or (mask.dtype == dtype and mask.is_floating_point()):
        return mask
    return to_additive(mask, dtype)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    training: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``softmax(Q K^T / sqrt(D) + mask) V``.

    Args:
        query: (B, N, T_q, D); key: (B, N, T_k, D); value: (B, N, T_k, D_v).
        mask: bool (True = attend) or additive float, broadcastable to (B, N, T_q, T_k).
        dropout_p: dropout on the attention probabilities, applied only when ``training``.
        need_weights: use the explicit path and return the probabilities.

    Returns:
        ``(output (B, N, T_q, D_v), probabilities (B, N, T_q, T_k) or None)``. With dropout the
        returned probabilities are the ones *before* dropout.
    """
    mask = _prepare_mask(mask, query.dtype)
    p = dropout_p if training else 0.0
    if not need_weights:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=p), None
    scores = torch.matmul(query, key.transpose(-2, -1)) * (
        1.0 / math.sqrt(query.size(-1))
    )  # (B, N, T_q, T_k)
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1)
    attn = F.dropout(probs, p) if p > 0 else probs
    return torch.matmul(attn, value), probs  # (B, N, T_q, D_v)


class HeadedAttention(nn.Module):
    """What every attention layer shares: ``dim`` split into ``num_heads`` heads of ``head_dim``, the split
    (B, T, H) -> (B, N, T, D) and the merge back. The projections are the subclass's."""

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"hidden size {dim} is not divisible by the number of heads {num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.dropout = dropout

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, H) -> (B, N, T, D), a view (no copy)."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, out: Tensor) -> Tensor:
        """(B, N, T, D) -> (B, T, H)."""
        b, _, t, _ = out.shape
        return out.transpose(1, 2).reshape(b, t, self.dim)


class MultiHeadAttention(HeadedAttention):
    """Multi-head attention with separate ``query``, ``key``, ``value`` and ``output`` projections (H -> H).

    Self-attention when ``context`` is None; cross-attention (queries from ``x``, keys and values from
    ``context``) otherwise.

    Incremental decoding: pass the same ``cache`` dict at every step. For self-attention the step's
    keys/values are appended to ``cache["key"]`` / ``cache["value"]`` (B, N, T_past + T, D); for
    cross-attention they are computed from ``context`` on the first call and reused afterwards. The
    caller supplies the mask for the full key length (e.g. ``causal_mask(T, T_past + T)``).
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__(dim, num_heads, dropout)
        self.query = Linear(dim, dim, bias=bias)
        self.key = Linear(dim, dim, bias=bias)
        self.value = Linear(dim, dim, bias=bias)
        self.output = Linear(dim, dim, bias=bias)
        # Optional H -> 3H product of the query, key and value projections stacked, used for self-attention
        # when set (`attnlab.inference.quantize` sets an int8 one: one product and one quantization of x
        # instead of three). Not part of the state dict; cross-attention keeps the separate projections.
        self.qkv: nn.Module | None = None

    def _self_projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, H) -> q, k, v (B, N, T, D), views."""
        if self.qkv is None:
            return self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        b, t, _ = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, N, T, D), each head's D adjacent
        return q, k, v

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (B, T_q, H) to itself or to ``context`` (B, T_k, H).

        Returns ``(output (B, T_q, H), probabilities (B, N, T_q, T_k) if need_weights else None)``.
        """
        if context is None:
            q, k, v = self._self_projections(x)
            if cache is not None:
                if "key" in cache:
                    k = torch.cat([cache["key"], k], dim=2)
                    v = torch.cat([cache["value"], v], dim=2)
                cache["key"], cache["value"] = k, v
        elif cache is not None and "key" in cache:
            q = self._heads(self.query(x))
            k, v = cache["key"], cache["value"]
        else:
            q = self._heads(self.query(x))
            k, v = self._heads(self.key(context)), self._heads(self.value(context))
            if cache is not None:
                cache["key"], cache["value"] = k, v
        out, probs = scaled_dot_product_attention(
            q, k, v, mask=mask, dropout_p=self.dropout, need_weights=need_weights, training=self.training
        )
        return self.output(self._merge_heads(out)), probs

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, dropout={self.dropout}"
