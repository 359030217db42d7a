"""LSH attention and chunked local attention (Kitaev et al. 2020, Reformer, sections 2-3).

Shapes: B batch, N heads, T positions, D head size, H = N * D, R hash rounds, C chunk length, K = T / C
chunks.

LSH attention, the paper's recipe:

- **shared query/key** (section 2): one projection gives queries and keys; keys are normalised to unit length
  (then divided by sqrt(D)), so a vector's most similar key is its own, which is why
- a token does **not attend to itself** unless nothing else is visible (its score is replaced by -1e5);
- **hashing**: R rounds of a random rotation (D, n_buckets / 2) per head; a vector's bucket is the argmax of
  ``[xR; -xR]`` (angular LSH, Andoni et al. 2015); round r's buckets are offset by r * n_buckets;
- **sort** the R * T (round, bucket, position) entries by bucket (stable, so by position inside a bucket), cut
  them into chunks of C, and let each chunk attend to itself and the chunk **before** it (wrapping around);
- the **causal** option hides keys at later positions (score -1e9); later tokens still move the sort, so which
  earlier keys share a query's chunks can change with them (as in the paper's and HF's code), though no value
  from a later position ever reaches it;
- the R rounds' outputs are combined with weights ``softmax over rounds`` of their log-normalisers
  (the attention over the union of the rounds' keys, each round normalised on its own).

A sequence no longer than one chunk is attended in full (shared-QK attention, no hashing). HF transformers'
``LSHSelfAttention`` computes the same function; ``hash_seed`` seeds the rotations as it does
(``torch.manual_seed``
then ``torch.randn``), and unseeded rotations come from the global generator (fresh every call, as training
wants;
attnlab.nn.reversible replays the generator when it recomputes).

Local attention (the Reformer's "local" layers, HF ``LocalSelfAttention``): separate query, key and value; the
sequence in chunks of C, each attending to itself and the chunk before it (keys scaled by 1 / sqrt(D)).

Interface: `MultiHeadAttention`'s ``forward(x, context=None, mask=None, need_weights=False, cache=None)`` so
the
shared `Residual` carries them; padding masks and caches are not supported (a clear error): sequences must be
multiples of the chunk length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.nn.attention import HeadedAttention, MultiHeadAttention

MASKED = -1e9  # future keys (HF's float32 mask value)
SELF = -1e5  # a token's own key, used only when nothing else is visible


def look_back(x: Tensor) -> Tensor:
    """(B, N, K, C, ...) -> (B, N, K, 2C, ...): each chunk preceded by the one before (0 by the last)."""
    return torch.cat([x.roll(1, dims=2), x], dim=3)


def chunked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    positions: Tensor,
    chunk: int,
    causal: bool,
    self_mask: bool,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """Attention inside chunks of ``chunk`` along L and to the chunk before each.

    q, k, v (B, N, L, D), k already scaled; positions (B, N, L), each entry's position in the sequence (for
    the
    causal and self masks). L <= chunk: one chunk, no look-back. Returns (out (B, N, L, D), log-normaliser
    (B, N, L)).
    """
    b, n, length, d = q.shape
    if length <= chunk:
        scores = q @ k.transpose(-1, -2)  # (B, N, L, L)
        qpos, kpos = positions[..., :, None], positions[..., None, :]
        vv = v
    else:
        kc = length // chunk
        q = q.view(b, n, kc, chunk, d)
        kk = look_back(k.view(b, n, kc, chunk, d))  # (B, N, K, 2C, D)
        vv = look_back(v.view(b, n, kc, chunk, d))
        pos = positions.view(b, n, kc, chunk)
        qpos, kpos = pos[..., :, None], look_back(pos)[..., None, :]  # (B, N, K, C, 1), (B, N, K, 1, 2C)
        scores = q @ kk.transpose(-1, -2)  # (B, N, K, C, 2C)
    if causal:
        scores = torch.where(qpos >= kpos, scores, torch.tensor(MASKED, dtype=scores.dtype))
    if self_mask:
        scores = torch.where(qpos != kpos, scores, torch.tensor(SELF, dtype=scores.dtype))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    probs = torch.exp(scores - lse)
    if dropout > 0 and training:
        probs = nn.functional.dropout(probs, dropout)
    out = probs @ vv
    return out.reshape(b, n, length, d), lse.reshape(b, n, length)


def _check(
    x: Tensor, context: Tensor | None, mask: Tensor | None, cache: dict | None, chunk: int, name: str
) -> None:
    if context is not None or mask is not None or cache is not None:
        raise ValueError(f"{name}: self-attention without padding masks or caches (got context/mask/cache)")
    if x.size(1) > chunk and x.size(1) % chunk != 0:
        raise ValueError(
            f"{name}: sequence length {x.size(1)} is not a multiple of the chunk length {chunk}; pad it"
        )


class LSHSelfAttention(HeadedAttention):
    """Shared-QK LSH self-attention; ``query_key``, ``value``, ``output``: Linear without bias."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        chunk_length: int = 64,
        num_buckets: int = 8,
        num_hashes: int = 1,
        causal: bool = False,
        dropout: float = 0.0,
        hash_seed: int | None = None,
    ) -> None:
        super().__init__(dim, num_heads, dropout)
        if num_buckets < 2 or num_buckets % 2:
            raise ValueError(f"LSHSelfAttention: num_buckets must be even and >= 2, got {num_buckets}")
        if num_hashes < 1:
            raise ValueError(f"LSHSelfAttention: num_hashes must be >= 1, got {num_hashes}")
        self.chunk_length, self.num_buckets, self.num_hashes = chunk_length, num_buckets, num_hashes
        self.causal, self.hash_seed = causal, hash_seed
        self.query_key = Linear(dim, dim, bias=False)
        self.value = Linear(dim, dim, bias=False)
        self.output = Linear(dim, dim, bias=False)

    def rotations(self, rounds: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """(N, D, R, n_buckets / 2) Gaussian rotations, seeded by ``hash_seed`` or from the global RNG."""
        shape = (self.num_heads, self.head_dim, rounds, self.num_buckets // 2)
        if self.hash_seed is None:
            return torch.randn(shape, dtype=dtype, device=device)
        generator = torch.Generator(device=device).manual_seed(self.hash_seed)
        return torch.randn(shape, dtype=dtype, device=device, generator=generator)

    def hash(self, qk: Tensor, rounds: int) -> Tensor:
        """(B, N, T, D) -> buckets (B, N, R * T), round r's offset by r * n_buckets; no gradient."""
        rot = self.rotations(rounds, qk.dtype, qk.device)
        rotated = torch.einsum("bntd,ndhr->bnhtr", qk.detach(), rot)  # (B, N, R, T, n_buckets / 2)
        buckets = torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)  # (B, N, R, T)
        offsets = torch.arange(rounds, device=qk.device)[:, None] * self.num_buckets  # (R, 1)
        return (buckets + offsets).flatten(2)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
        num_hashes: int | None = None,
    ) -> tuple[Tensor, None]:
        """x (B, T, H) -> (out (B, T, H), None). ``num_hashes`` overrides the rounds for this call."""
        _check(x, context, mask, cache, self.chunk_length, "LSHSelfAttention")
        b, t, _ = x.shape
        rounds = num_hashes or self.num_hashes
        qk, v = self._heads(self.query_key(x)), self._heads(self.value(x))  # (B, N, T, D)
        if t <= self.chunk_length:  # one chunk: full shared-QK attention
            positions = torch.arange(t, device=x.device).expand(b, self.num_heads, t)
            keys = _unit(qk) / math.sqrt(self.head_dim)
            out, _ = chunked_attention(
                qk, keys, v, positions, t, self.causal, True, self.dropout, self.training
            )
        else:
            buckets = self.hash(qk, rounds)  # (B, N, R * T)
            order = torch.sort(buckets, dim=-1, stable=True).indices  # (B, N, R * T) into [round, position]
            undo = torch.argsort(order, dim=-1)
            positions = order % t
            index = positions[..., None].expand(-1, -1, -1, self.head_dim)
            sq, sv = qk.gather(2, index), v.gather(2, index)  # (B, N, R * T, D), sorted
            keys = _unit(sq) / math.sqrt(self.head_dim)
            out, lse = chunked_attention(
                sq, keys, sv, positions, self.chunk_length, self.causal, True, self.dropout, self.training
            )
            out = out.gather(2, undo[..., None].expand_as(out)).view(
                b, self.num_heads, rounds, t, self.head_dim
            )
            lse = lse.gather(2, undo).view(b, self.num_heads, rounds, t, 1)
            # rounds weighted by their mass, written as HF does: a first token sees only itself in every round
            # (scores -1e5), where float32's rounding near 1e5 makes softmax's max-shift differ by ~1%
            out = (out * torch.exp(lse - torch.logsumexp(lse, dim=2, keepdim=True))).sum(
                dim=2
            )  # (B, N, T, D)
        return self.output(self._merge_heads(out)), None

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, chunk_length={self.chunk_length}, "
            f"num_buckets={self.num_buckets}, num_hashes={self.num_hashes}, causal={self.causal}"
        )


def _unit(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / RMS(x) over the last dimension (HF's "length normalisation": unit length times sqrt(D))."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class LocalSelfAttention(MultiHeadAttention):
    """Chunked local self-attention: chunks of ``chunk_length`` attend to themselves and the chunk before."""

    def __init__(
        self, dim: int, num_heads: int, chunk_length: int = 64, causal: bool = False, dropout: float = 0.0
    ) -> None:
        super().__init__(dim, num_heads, dropout=dropout, bias=False)
        self.chunk_length, self.causal = chunk_length, causal

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
        num_hashes: int | None = None,
    ) -> tuple[Tensor, None]:
        """x (B, T, H) -> (out (B, T, H), None)."""
        _check(x, context, mask, cache, self.chunk_length, "LocalSelfAttention")
        b, t, _ = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        positions = torch.arange(t, device=x.device).expand(b, self.num_heads, t)
        out, _ = chunked_attention(
            q, k / math.sqrt(self.head_dim), v, positions, self.chunk_length, self.causal, False,
            self.dropout,
            self.training,
        )  # fmt: skip
        return self.output(self._merge_heads(out)), None
