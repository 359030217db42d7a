"""Pooling a sequence of hidden states into one vector per sequence.

Shapes: B batch, T sequence, H hidden. ``attention_mask`` is HF's (B, T) 1 = token, 0 = padding.
"""

from __future__ import annotations

from torch import Tensor

# The sentence vectors a classifier or the embedding pipeline can read: BERT's [CLS] token, or `masked_mean`.
POOLINGS = ("cls", "mean")


def masked_mean(hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """(B, T, H) -> (B, H): the mean over each sequence's real tokens (padding excluded; every token when
    ``attention_mask`` is None). A row without tokens gives zeros rather than NaN."""
    if attention_mask is None:
        return hidden.mean(1)
    if attention_mask.shape != hidden.shape[:2]:
        expected, got = tuple(hidden.shape[:2]), tuple(attention_mask.shape)
        raise ValueError(f"attention_mask: expected shape {expected} (B, T), got {got}")
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
