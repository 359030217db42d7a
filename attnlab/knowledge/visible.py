"""K-BERT's visible matrix for a batch, from the compact ids `attnlab.knowledge.sentence_tree` stores.

Shapes: B batch, T sequence. ``branch_ids`` (B, T): 0 for sentence tokens, k >= 1 for the k-th branch,
-1 for padding; ``entity_ids`` (B, T): k >= 1 for the k-th entity's tokens and its branches' tokens.
The result (B, T, T) bool is what `attnlab.models.encoder.Encoder` takes as a 3-D ``attention_mask``
and applies in every layer (the paper's Mask-Transformer, section 3.4).
"""

from __future__ import annotations

from torch import Tensor


def visible_matrix(branch_ids: Tensor, entity_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """``visible[b, i, j]``: token i may attend to token j (both real tokens; see sentence_tree)."""
    if branch_ids.shape != entity_ids.shape or branch_ids.dim() != 2:
        raise ValueError(
            f"visible_matrix: branch_ids and entity_ids must both be (B, T), got {tuple(branch_ids.shape)} "
            f"and {tuple(entity_ids.shape)}"
        )
    bi, bj = branch_ids[:, :, None], branch_ids[:, None, :]  # (B, T, 1), (B, 1, T)
    ei, ej = entity_ids[:, :, None], entity_ids[:, None, :]
    same_branch = bi == bj  # the sentence sees the sentence; a branch sees itself
    entity_and_branch = (ei == ej) & (ei > 0) & ((bi == 0) != (bj == 0))  # an entity <-> its own branches
    visible = same_branch | entity_and_branch  # (B, T, T)
    real = branch_ids >= 0 if attention_mask is None else (attention_mask != 0) & (branch_ids >= 0)
    return visible & real[:, None, :]


__all__ = ["visible_matrix"]
