"""Perplexity of a fixed-length causal model with a sliding window (the method HF transformers documents in
its "Perplexity of fixed-length models" guide).

Shapes: N tokens of text, L window (at most the model's context), S stride.

Windows start every S tokens and hold up to L tokens; each window scores only the tokens no earlier window
scored (its last ``end - previous_end``), the tokens before them serving as context. With S = L the windows do
not overlap (fastest, worst context; each window's first token is then not scored, having no context);
S < L gives each scored token at least L - S tokens of context. The text's first token is never scored.

``perplexity = exp(sum of scored tokens' NLL / scored tokens)``. HF's guide weights each window's mean loss by
(its targets - 1), a slight miscount after the first window; here every scored token counts once (the tests
check the sum against HF's model token by token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class Perplexity:
    perplexity: float
    nll: float  # mean negative log-likelihood per scored token, nats
    tokens: int  # scored tokens (N - 1)
    windows: int


@torch.no_grad()
def sliding_window_perplexity(
    model: nn.Module, ids: Tensor | list[int], max_length: int | None = None, stride: int = 512
) -> Perplexity:
    """Perplexity of ``ids`` (N,) under ``model`` (called ``model(ids (1, T)).logits``)."""
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    context = model.config.max_positions
    max_length = context if max_length is None else max_length
    if not 1 < max_length <= context:
        raise ValueError(f"window length must be in [2, {context}] (the model's context), got {max_length}")
    if not 0 < stride <= max_length:
        raise ValueError(f"stride must be in [1, window length {max_length}], got {stride}")
    if ids.numel() < 2:
        raise ValueError(f"the text has {ids.numel()} token(s); perplexity needs at least 2")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        nll_sum, scored, windows, prev_end = 0.0, 0, 0, 0
        n = ids.numel()
        for begin in range(0, n, stride):
            end = min(begin + max_length, n)
            window = ids[begin:end].to(device)[None]  # (1, T)
            logits = model(window).logits[0].float()  # (T, V)
            first = max(prev_end, begin + 1) - begin  # first position scored in this window (>= 1)
            targets = window[0, first:]
            nll = F.cross_entropy(logits[first - 1 : -1], targets, reduction="sum")
            nll_sum += float(nll)
            scored += targets.numel()
            windows += 1
            prev_end = end
            if end == n:
                break
    finally:
        model.train(was_training)
    mean = nll_sum / scored
    return Perplexity(math.exp(mean), mean, scored, windows)
