"""Attention masks: building, combining and converting them.

Conventions (docs/architecture.md): a boolean mask means ``True`` = may attend; a float mask is
*additive* (added to the scores before the softmax). Masks broadcast to ``(B, N, T_q, T_k)``:
B batch, N heads, T_q query length, T_k key length.

Fully masked rows. A query whose every key is masked would get ``softmax([-inf, ...]) = NaN``.
We never use ``-inf``: masked scores get the dtype's most negative finite value
(``torch.finfo(dtype).min``), so such a row becomes a uniform average over the (masked) keys:
finite, meaningless, and ignored downstream (its position is padding). This is the convention of
BERT's reference code (it adds -10000) and of HF transformers' eager attention, and it lets the
fast (SDPA) and explicit paths agree exactly. Rows with at least one visible key are unaffected:
``exp(finfo.min - max)`` underflows to exactly 0, so masked keys get probability 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Boolean key-padding mask from an HF-style ``(B, T)`` 1/0 ``attention_mask``.

    Returns ``(B, 1, 1, T)`` bool, ``True`` where the key is a real token (may be attended).
    """
    if attention_mask.dim() != 2:
        raise ValueError(
            f"attention_mask must be 2-D (B, T) with 1 = token and 0 = padding, got shape "
            f"{tuple(attention_mask.shape)}"
        )
    return attention_mask[:, None, None, :].bool()


def causal_mask(
    query_length: int, key_length: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """Boolean causal mask ``(1, 1, T_q, T_k)``: query i may attend key j iff j <= i + (T_k - T_q).

    With ``key_length > query_length`` (incremental decoding with a key/value cache) the queries are
    the *last* ``T_q`` positions of the sequence, so the offset ``T_k - T_q`` lines them up.
    """
    key_length = query_length if key_length is None else key_length
    if key_length < query_length:
        raise ValueError(f"causal_mask: key_length ({key_length}) < query_length ({query_length})")
    ones = torch.ones(query_length, key_length, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_length - query_length)[None, None]


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """An additive float mask of ``dtype``: 0 where attended, ``finfo(dtype).min`` where masked.

    Boolean masks are converted; float masks are cast and clamped to ``finfo.min`` so that ``-inf``
    entries cannot turn a fully masked row into NaN (see the module docstring).
    """
    neg = torch.finfo(dtype).min
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, neg)
    if not mask.is_floating_point():
        raise TypeError(f"attention mask must be bool (True = attend) or float (additive), got {mask.dtype}")
    return mask.to(dtype).clamp(min=neg)


def combine_masks(*masks: Tensor | None, dtype: torch.dtype | None = None) -> Tensor | None:
    """Combine masks so that a key is visible only if every mask allows it. ``None`` entries are skipped.

    All-boolean inputs give a boolean AND (broadcast). If any mask is float (or ``dtype`` is given), the
    result is additive in ``dtype`` (default: the first float mask's dtype), clamped to stay finite.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if dtype is None and all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    if dtype is None:
        dtype = next(m.dtype for m in present if m.is_floating_point())
    out = to_additive(present[0], dtype)
    for m in present[1:]:
        out = out + to_additive(m, dtype)
    # Two finfo.min entries add up to -inf; clamp back so a fully masked row stays finite.
    return out.clamp(min=torch.finfo(dtype).min)
