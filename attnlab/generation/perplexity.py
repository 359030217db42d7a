"""Perplexity of a fixed-length causal model with a sliding window (the method HF transformers documents in
its "Perplexity of fixed-length models" guide).

Shapes: N tokens of text, L window (at most the model's context), S stride.

Windows start every S tokens and hold up to L tokens; each window scores only the tokens no earlier window
scored (its last ``end - previous_end``), the tokens before them serving as context. With S = L the windows do
not overlap (fastest, worst context; each window's first token is then not scored, having no context);
S < L gives each scored token at least L - S tokens of context. The text's first token is never scored.

`state_reuse_perplexity` reads a segment-recurrent model (Transformer-XL) segment after segment with its
memory instead: no window is recomputed.

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


def window_and_stride(
    context: int, max_length: int | None = None, stride: int | None = None
) -> tuple[int, int]:
    """The window L (default: the model's ``context``) and stride S (default: half the window, as HF's
    guide has GPT-2's 1024 and 512) that `sliding_window_perplexity` uses; a `ValueError` naming the option
    when either is out of range."""
    max_length = context if max_length is None else max_length
    if not 1 < max_length <= context:
        raise ValueError(
            f"--max-length {max_length}: window length must be in [2, {context}] (the model's context)"
        )
    stride = max(1, max_length // 2) if stride is None else stride
    if not 0 < stride <= max_length:
        raise ValueError(f"--stride {stride}: stride must be in [1, window length {max_length}]")
    return max_length, stride


@torch.no_grad()
def sliding_window_perplexity(
    model: nn.Module, ids: Tensor | list[int], max_length: int | None = None, stride: int | None = None
) -> Perplexity:
    """Perplexity of ``ids`` (N,) under ``model`` (called ``model(ids (1, T)).logits``); windows and stride
    as `window_and_stride` resolves them."""
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    max_length, stride = window_and_stride(model.config.max_positions, max_length, stride)
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


@torch.no_grad()
def state_reuse_perplexity(
    model: nn.Module, ids: Tensor | list[int], segment_length: int | None = None, mem_len: int | None = None
) -> Perplexity:
    """Perplexity of ``ids`` (N,) under a segment-recurrent model (Transformer-XL: ``model(x (1, T), memory=,
    mem_len=)`` returning ``logits`` and ``memory``), read in segments of ``segment_length`` (default: the
    model's) with the memory of the previous segments (``mem_len`` tokens, default the model's training
    memory): every token after the first scored once, each segment computed once (Dai et al. 2019, 3.2: the
    state reuse that makes evaluation up to 1,800x faster than a sliding window). ``windows`` counts
    segments."""
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    segment_length = model.config.segment_length if segment_length is None else segment_length
    mem_len = model.config.mem_len if mem_len is None else mem_len
    if segment_length < 1:
        raise ValueError(f"segment length must be >= 1, got {segment_length}")
    if mem_len < 0:
        raise ValueError(f"memory length must be >= 0, got {mem_len}")
    if ids.numel() < 2:
        raise ValueError(f"the text has {ids.numel()} token(s); perplexity needs at least 2")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        nll_sum, scored, segments, memory = 0.0, 0, 0, None
        for begin in range(0, ids.numel() - 1, segment_length):
            x = ids[begin : begin + segment_length].to(device)  # (T,)
            y = ids[begin + 1 : begin + 1 + segment_length].to(device)  # (T,) or one fewer at the end
            out = model(x[: y.numel()][None], memory=memory, mem_len=mem_len)
            memory = out.memory
            nll_sum += float(F.cross_entropy(out.logits[0].float(), y, reduction="sum"))
            scored += y.numel()
            segments += 1
    finally:
        model.train(was_training)
    mean = nll_sum / scored
    return Perplexity(math.exp(mean), mean, scored, segments)
