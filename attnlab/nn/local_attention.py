"""Local (sliding-window) attention, computed in blocks so memory grows linearly with length.

Shapes: B batch, N heads, T length, D head size, W window, G global tokens, C = T_pad / W blocks.

Which keys a query sees (`band_mask` writes it out as the dense mask this module must equal):

- query i sees key j when ``i - W <= j <= i + W`` (bidirectional) or ``i - W <= j <= i`` (causal): the W keys
  on each side (before it) and itself; Beltagy et al. 2020 (Longformer) section 3.1 and Child et al. 2019
  section 4.2 (the local pattern); Mistral's "sliding window" is the causal one;
- the first G positions are *global* (Longformer's global attention, e.g. [CLS]): they see every key and every
  query sees them (causal: only keys j <= i, both ways, so no future leaks).

Blocked computation: the sequence is cut into C blocks of W queries; block c attends only to key blocks
c - 1, c, c + 1 (c - 1, c when causal), a (W, 3W) tile, so scores take ``B * N * T * 3W`` floats instead
of ``B * N * T * T``. The global keys add a (T, G) strip and the global queries a (G, T) strip. A tile's
out-of-window entries are masked with ``finfo.min`` (attnlab.nn.masks), so they get probability exactly 0
and the result equals dense attention with `band_mask` up to summation order.

Rows with no visible key (a padding query whose whole window is padding) are finite but differ from the
dense path's (a uniform average over another set of keys); such positions are padding and ignored.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.masks import combine_masks


def band_mask(
    query_length: int,
    window: int,
    causal: bool = False,
    global_tokens: int = 0,
    key_length: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """The dense boolean mask ``(1, 1, T_q, T_k)`` local attention computes (True = may attend).

    With ``key_length > query_length`` (a key/value cache) the queries are the last ``T_q`` positions.
    """
    key_length = query_length if key_length is None else key_length
    i = torch.arange(key_length - query_length, key_length, device=device)[:, None]  # (T_q, 1)
    j = torch.arange(key_length, device=device)[None, :]  # (1, T_k)
    allowed = (j >= i - window) & (j <= i if causal else j <= i + window)
    if global_tokens:
        is_global = (j < global_tokens) | (i < global_tokens)
        allowed = allowed | (is_global & (j <= i) if causal else is_global)
    return allowed[None, None]


def _blocks(x: Tensor, window: int, before: int, after: int) -> Tensor:
    """(B, N, T_pad, D), T_pad = C * W -> (B, N, C, (before + 1 + after) * W, D): for block c, the key blocks
    c - before .. c + after (zeros beyond the ends), concatenated along the key axis."""
    b, n, t, d = x.shape
    padded = F.pad(x, (0, 0, before * window, after * window))  # (B, N, T_pad + (before + after) W, D)
    c = t // window
    shifts = [padded[:, :, s * window : s * window + t] for s in range(before + 1 + after)]
    return torch.stack([s.reshape(b, n, c, window, d) for s in shifts], dim=3).flatten(3, 4)


def local_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    window: int,
    causal: bool = False,
    global_tokens: int = 0,
    key_padding: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Sliding-window attention with optional global tokens, in blocks of ``window`` queries.

    Args:
        query, key, value: (B, N, T, D) self-attention projections (same length).
        window: W >= 1 keys on each side (before only, when ``causal``).
        global_tokens: G, the first G positions attend and are attended everywhere.
        key_padding: (B, T) bool, True = a real token (may be attended); None = no padding.
        dropout_p: dropout on the probabilities, applied only when ``training``.

    Returns (B, N, T, D). Equal to ``scaled_dot_product_attention`` with `band_mask` (and the padding).
    """
    if window < 1:
        raise ValueError(f"local_attention: window must be >= 1, got {window}")
    b, n, t, d = query.shape
    w = window
    g = min(global_tokens, t)
    neg = torch.finfo(query.dtype).min
    p = dropout_p if training else 0.0
    scale = 1.0 / math.sqrt(d)
    pad = -t % w
    c = (t + pad) // w
    before, after = 1, 0 if causal else 1

    def padded(x: Tensor) -> Tensor:
        return F.pad(x, (0, 0, 0, pad)) if pad else x

    # which key slots of each tile are real keys: inside [0, T), not padding, not global (those come once,
    # from the global strip below)
    valid = torch.ones(b, t, dtype=torch.bool, device=query.device) if key_padding is None else key_padding
    band_valid = valid.clone()
    band_valid[:, :g] = False
    band_valid = F.pad(band_valid, (0, pad))[:, None, :, None].to(query.dtype)  # (B, 1, T_pad, 1)
    tile_valid = _blocks(band_valid, w, before, after)[..., 0].bool()  # (B, 1, C, K), K = (before+1+after) W
    r_q = torch.arange(w, device=query.device)[:, None]  # query's place in its block
    r_k = torch.arange((before + 1 + after) * w, device=query.device)[None, :]  # key's place in the tile
    offset = r_q + before * w - r_k  # i - j
    in_band = (offset <= w) & (offset >= (0 if causal else -w))  # (W, K)
    tile_mask = torch.zeros(b, 1, c, w, r_k.size(1), dtype=query.dtype, device=query.device)
    tile_mask.masked_fill_(~(in_band & tile_valid[:, :, :, None, :]), neg)  # (B, 1, C, W, K)

    q = padded(query).reshape(b, n, c, w, d)  # (B, N, C, W, D)
    k_tiles = _blocks(padded(key), w, before, after)  # (B, N, C, K, D)
    v_tiles = _blocks(padded(value), w, before, after)
    scores = torch.matmul(q, k_tiles.transpose(-2, -1)) * scale + tile_mask  # (B, N, C, W, K)
    if g:
        # every query against the G global keys: (B, N, C, W, G)
        glob_scores = torch.matmul(q, key[:, :, None, :g].transpose(-2, -1)) * scale
        i = torch.arange(c * w, device=query.device).view(c, w, 1)
        j = torch.arange(g, device=query.device).view(1, 1, g)
        glob_ok = valid[:, None, None, None, :g]  # (B, 1, 1, 1, G)
        if causal:
            glob_ok = glob_ok & (j <= i)  # (B, 1, C, W, G)
        glob_scores = glob_scores.masked_fill(~glob_ok, neg)
        scores = torch.cat([scores, glob_scores], dim=-1)  # (B, N, C, W, K + G)
    probs = torch.softmax(scores, dim=-1)
    if p > 0:
        probs = F.dropout(probs, p)
    out = torch.matmul(probs[..., : k_tiles.size(3)], v_tiles)  # (B, N, C, W, D)
    if g:
        out = out + torch.matmul(probs[..., k_tiles.size(3) :], value[:, :, None, :g])
    out = out.reshape(b, n, c * w, d)[:, :, :t]  # (B, N, T, D)
    if g:
        # the global queries see every key: a (G, T) strip of dense attention
        allowed = valid[:, None, None, :]  # (B, 1, 1, T)
        if causal:
            positions = torch.arange(t, device=query.device)
            ahead = positions[None, :] <= positions[:g, None]
            allowed = allowed & ahead  # (B, 1, G, T): global query i sees keys j <= i
        glob_out, _ = scaled_dot_product_attention(
            query[:, :, :g], key, value, mask=allowed, dropout_p=dropout_p, training=training
        )
        out = torch.cat([glob_out, out[:, :, g:]], dim=2)
    return out


def key_padding_from_mask(mask: Tensor | None, length: int) -> Tensor | None:
    """The (B, T) key padding of a key-only mask (bool or additive, (B, 1, 1, T) as the encoder builds it);
    None when ``mask`` is None."""
    if mask is None:
        return None
    if mask.size(-1) != length or mask.size(-2) != 1:
        raise ValueError(
            f"local attention: expected a key-padding mask (B, 1, 1, {length}), got {tuple(mask.shape)}"
        )
    row = mask[..., 0, :]  # (B or 1, 1 or N, T)
    keep = row if row.dtype == torch.bool else row > torch.finfo(row.dtype).min / 2
    return keep.all(dim=1)


class LocalSelfAttention(MultiHeadAttention):
    """`MultiHeadAttention` (same parameters and interface) whose self-attention is `local_attention`.

    The band (and causality, when ``causal``) is this module's own; ``mask`` adds to it. A key-padding
    ``mask`` (B, 1, 1, T) or none takes the blocked path. A mask with a query axis (a (B, 1, T, T)
    visibility matrix, a causal mask), ``need_weights`` (attention maps are T x T anyway) and incremental
    decoding (``cache``: one new query sees at most 2W + G + 1 keys) take the dense path with `band_mask`
    combined with ``mask``: the same function, quadratic memory.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window: int,
        causal: bool = False,
        global_tokens: int = 0,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, dropout=dropout, bias=bias)
        if window < 1 or global_tokens < 0:
            raise ValueError(
                f"LocalSelfAttention: want window >= 1, global_tokens >= 0; got {window}, {global_tokens}"
            )
        self.window = window
        self.causal = causal
        self.global_tokens = global_tokens

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if context is not None:
            raise ValueError("LocalSelfAttention is self-attention only (cross: MultiHeadAttention)")
        b, t, _ = x.shape
        if need_weights or cache is not None or (mask is not None and mask.size(-2) > 1):
            past = cache["key"].size(2) if cache is not None and "key" in cache else 0
            band = band_mask(t, self.window, self.causal, self.global_tokens, past + t, device=x.device)
            mask = combine_masks(band, mask, dtype=x.dtype)  # (B or 1, N or 1, T, T_past + T) additive
            return super().forward(x, mask=mask, need_weights=need_weights, cache=cache)
        q, k, v = (self._heads(proj(x)) for proj in (self.query, self.key, self.value))  # (B, N, T, D)
        out = local_attention(
            q, k, v, self.window, self.causal, self.global_tokens,
            key_padding=key_padding_from_mask(mask, t), dropout_p=self.dropout, training=self.training,
        )  # fmt: skip
        return self.output(self._merge_heads(out)), None

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, window={self.window}, causal={self.causal}, "
            f"global_tokens={self.global_tokens}"
        )
