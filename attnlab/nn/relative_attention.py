"""Relative-position multi-head attention with a memory of past hidden states (Dai et al. 2019,
Transformer-XL,
section 3.3).

Shapes: B batch, N heads, T new (query) positions, M memory positions, K = M + T key positions, H model size,
D = H / N head size.

The score of query i and key j (their distance ``i - j`` counted in the whole sequence, memory first) is the
paper's four terms, with the absolute positions of the vanilla Transformer replaced by a sinusoid
``R_{i-j}`` of
the distance and two learned vectors ``u`` and ``v`` standing for "the query's position" (it is the same for
every key, so a query-independent bias suffices):

    A_ij = (q_i + u)^T k_j          (a) content   + (c) global content bias
         + (q_i + v)^T W_R R_{i-j}  (b) position  + (d) global position bias

``(q + v) W_R R`` is computed once against the K distances K-1 .. 0 and moved into place by the "relative
shift"
(`relative_shift`, the paper's appendix B trick), so the cost is one (T, K) product, not T x K distances.

Memory: pass ``cache={"memory": h}`` with ``h`` (B, M, H) the previous segment's inputs to this layer (the
caller keeps them and cuts their gradient, section 3.2). Keys and values are projected from ``[h; x]``;
queries from ``x`` only. The caller gives the mask for all K keys (``causal_mask(T, K)``). Without a memory
this is causal self-attention with relative positions.

Interface: `MultiHeadAttention`'s, so the shared `DecoderLayer`/`Residual` carry it unchanged. The scores are
computed by the shared `scaled_dot_product_attention` with ``(q + u)`` as the query and the position term
``(b) + (d)`` (scaled) added to the mask, so both its paths (fused and with probabilities) serve here too.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.nn.attention import MultiHeadAttention, _prepare_mask, scaled_dot_product_attention


def relative_sinusoids(
    key_length: int,
    dim: int,
    clamp: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """(K, H) sinusoids of the distances K-1, K-2, ..., 0 (largest first), ``[sin | cos]`` halves as in the
    paper's code (not interleaved); distances above ``clamp`` (if > 0) use ``clamp``'s row."""
    distance = torch.arange(key_length - 1, -1, -1.0, device=device, dtype=dtype)
    if clamp > 0:
        distance = distance.clamp(max=clamp)
    inv_freq = 1.0 / (10_000 ** (torch.arange(0.0, dim, 2.0, device=device, dtype=dtype) / dim))
    angle = torch.outer(distance, inv_freq)  # (K, H/2)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


def relative_shift(scores: Tensor) -> Tensor:
    """(..., T, K) scores against distances ``K-1 .. 0`` -> (..., T, K) against keys ``0 .. K-1``.

    Query i sits at position ``K - T + i``; its score for key j must come from the distance ``K - T + i - j``,
    i.e. column ``T - 1 - i + j`` of its row. Padding one zero column on the left and reading the buffer with
    rows one longer shifts row i left by ``T - 1 - i``. Entries with j > K - T + i (future keys, masked by the
    caller) receive values from the next row, as in the paper's code.
    """
    *lead, t, k = scores.shape
    padded = torch.nn.functional.pad(scores, (1, 0))  # (..., T, K + 1)
    return padded.view(*lead, k + 1, t)[..., 1:, :].reshape(*lead, t, k)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """`MultiHeadAttention` whose positions are relative distances (Transformer-XL).

    Adds ``position`` (W_R: H -> H, no bias) and the biases ``u`` and ``v`` (N, D). Pass ``u``/``v``
    Parameters
    to share them across layers (the paper's code shares them; HF's ``untie_r=True`` gives each layer its
    own).
    Transformer-XL's projections have no bias (``bias=False``). ``clamp`` caps distances (HF ``clamp_len``).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        clamp: int = 0,
        u: nn.Parameter | None = None,
        v: nn.Parameter | None = None,
    ) -> None:
        super().__init__(dim, num_heads, dropout=dropout, bias=bias)
        self.position = Linear(dim, dim, bias=False)
        self.u = u if u is not None else nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.v = v if v is not None else nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.clamp = clamp

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, H), ``cache`` None or ``{"memory": (B, M, H)}`` -> ``(out (B, T, H), probs or None)``."""
        if context is not None:
            raise ValueError("RelativeMultiHeadAttention is self-attention; it takes no `context`")
        memory = cache.get("memory") if cache is not None else None
        full = x if memory is None or memory.size(1) == 0 else torch.cat([memory, x], dim=1)  # (B, K, H)
        b, t, _ = x.shape
        k_len = full.size(1)
        q = self._heads(self.query(x))  # (B, N, T, D)
        k, v = self._heads(self.key(full)), self._heads(self.value(full))  # (B, N, K, D)
        sinusoids = relative_sinusoids(k_len, self.dim, self.clamp, x.dtype, x.device)  # (K, H)
        r = self.position(sinusoids).view(k_len, self.num_heads, self.head_dim).transpose(0, 1)  # (N, K, D)
        position_scores = torch.matmul(q + self.v[:, None], r.transpose(-2, -1))  # (B, N, T, K), distances
        bias = relative_shift(position_scores) * (1.0 / math.sqrt(self.head_dim))  # (B, N, T, K), keys
        if mask is not None:
            bias = bias + _prepare_mask(mask, bias.dtype)
        out, probs = scaled_dot_product_attention(
            q + self.u[:, None],
            k,
            v,
            mask=bias,
            dropout_p=self.dropout,
            need_weights=need_weights,
            training=self.training,
        )
        return self.output(self._merge_heads(out)), probs

    def extra_repr(self) -> str:
        return super().extra_repr() + f", clamp={self.clamp}"
