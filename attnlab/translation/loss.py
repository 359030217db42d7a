"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; used by Vaswani et al. 2017, section 5.4).

The target distribution for a token whose reference is y is ``q = (1 - eps) * onehot(y) + eps / V``
(uniform smoothing over all V classes, the form of the Inception paper and of
``torch.nn.functional.cross_entropy(label_smoothing=eps)``). The loss is the cross-entropy
``-sum_k q_k log p_k = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k)``, averaged over the target tokens
that are not padding (label ``ignore_index``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_cross_entropy(
    logits: Tensor, labels: Tensor, epsilon: float, ignore_index: int = -100
) -> tuple[Tensor, Tensor, Tensor]:
    """Mean label-smoothed loss over the non-ignored tokens.

    Args:
        logits: (B, T, V) unnormalised scores (any float dtype; computed in float32).
        labels: (B, T) target ids, ``ignore_index`` at padding.
        epsilon: smoothing mass in [0, 1).

    Returns:
        ``(loss, nll, tokens)``: the smoothed loss and the plain negative log-likelihood (for perplexity),
        both means over the ``tokens`` counted (a 0-d int tensor). With no token counted both are 0.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label smoothing epsilon must be in [0, 1), got {epsilon}")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not line up")
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = labels.ne(ignore_index)  # (B, T)
    target = labels.masked_fill(~keep, 0)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth = -lprobs.mean(dim=-1)  # (B, T): the cross-entropy against the uniform distribution
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    tokens = keep.sum()
    denom = tokens.clamp(min=1).to(lprobs.dtype)
    return (loss * keep).sum() / denom, (nll * keep).sum() / denom, tokens
