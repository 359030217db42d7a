"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; used by Vaswani et al. 2017, section 5.4),
computed by PyTorch's ``F.cross_entropy(label_smoothing=eps)``.

The target distribution for a token whose reference is y is ``q = (1 - eps) * onehot(y) + eps / V``
(uniform smoothing over all V classes, the form of the Inception paper and of PyTorch). The loss is the
cross-entropy ``-sum_k q_k log p_k = (1 - eps) * (-log p_y) + eps * mean_k(-log p_k)``, averaged over the
target tokens that are not padding (label ``ignore_index``). PyTorch applies ``ignore_index`` before
smoothing, so padding contributes nothing to either term (checked against the formula by hand in
``tests/translation/test_translation_recipe.py``).

A note on the paper's own code: tensor2tensor (and fairseq's ``label_smoothed_cross_entropy``) spread
``eps`` over the V - 1 *other* classes, ``q = (1 - eps) * onehot(y) + eps / (V - 1) * (1 - onehot(y))``, which
is PyTorch's target with ``eps' = eps * V / (V - 1)`` (0.1000125 for eps = 0.1 and V = 8000; tested in
``tests/translation/test_translation_loss.py``); tensor2tensor also subtracts the constant entropy of ``q``
so that a perfect prediction scores 0. The training signal is the same up to that factor; attnlab keeps
PyTorch's form.
"""

from __future__ import annotations

import torch
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
        ``(loss, nll, tokens)``: the smoothed loss and the plain negative log-likelihood (for perplexity;
        a detached metric), both means over the ``tokens`` counted (a 0-d int tensor). With no token counted
        both are 0.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label smoothing epsilon must be in [0, 1), got {epsilon}")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not line up")
    flat_logits = logits.float().reshape(-1, logits.shape[-1])  # (B*T, V)
    flat_labels = labels.reshape(-1)  # (B*T,)
    tokens = labels.ne(ignore_index).sum()
    denom = tokens.clamp(min=1).to(flat_logits.dtype)
    # sums, then one division: a batch of padding only gives 0, where reduction="mean" would give NaN
    loss = F.cross_entropy(
        flat_logits, flat_labels, ignore_index=ignore_index, label_smoothing=epsilon, reduction="sum"
    )
    if epsilon == 0.0:
        nll = loss.detach()
    else:
        with torch.no_grad():
            nll = F.cross_entropy(flat_logits, flat_labels, ignore_index=ignore_index, reduction="sum")
    return loss / denom, nll / denom, tokens
