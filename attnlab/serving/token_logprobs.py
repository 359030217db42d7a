"""Log-probabilities of a token sequence under a causal LM, for OpenAI's ``logprobs`` and ``echo``.

After generating, the whole sequence (prompt + new tokens) is scored in one forward pass: position t's
log-probability is that of token t given tokens before it (the model's distribution, before temperature or
top-p, as OpenAI reports it), with the ``top_n`` most likely alternatives. The first token has none (no
context). A sequence longer than the model's context is scored over its last ``max_positions`` tokens; the
tokens before that window get none either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TokenLogprobs:
    logprobs: list[float | None]  # per token of the sequence; None where there is no context
    top: list[list[tuple[int, float]] | None]  # (token id, log-probability), most likely first


@torch.no_grad()
def score_tokens(model: nn.Module, ids: list[int], top_n: int) -> TokenLogprobs:
    """``ids``' log-probabilities (see the module docstring) with the ``top_n`` best alternatives each."""
    window = model.config.max_positions
    skipped = max(len(ids) - window, 0)
    seq = torch.tensor(ids[skipped:], dtype=torch.long, device=next(model.parameters()).device)[None]
    logp = F.log_softmax(model(seq).logits[0].float(), dim=-1)  # (T, V)
    lps: list[float | None] = [None] * (skipped + 1)
    tops: list[list[tuple[int, float]] | None] = [None] * (skipped + 1)
    targets = seq[0, 1:]
    chosen = logp[:-1].gather(1, targets[:, None])[:, 0].tolist()
    k = min(max(top_n, 0), logp.size(-1))
    values, indices = logp[:-1].topk(k, dim=-1) if k else (None, None)
    for t, lp in enumerate(chosen):
        lps.append(lp)
        tops.append(list(zip(indices[t].tolist(), values[t].tolist())) if k else [])
    return TokenLogprobs(lps, tops)


def completion_logprobs(
    scored: TokenLogprobs, ids: list[int], first: int, decode: Callable[[list[int]], str], offset: int
) -> dict:
    """OpenAI's completions ``logprobs`` object for ``ids[first:]``: ``tokens``, ``token_logprobs``,
    ``top_logprobs`` (token text -> log-probability) and ``text_offset`` (characters, from ``offset``)."""
    tokens, offsets, tops = [], [], []
    at = offset
    for t in range(first, len(ids)):
        piece = decode([ids[t]])
        tokens.append(piece)
        offsets.append(at)
        at += len(piece)
        top = scored.top[t]
        tops.append(None if top is None else {decode([i]): lp for i, lp in top})
    return {
        "tokens": tokens,
        "token_logprobs": scored.logprobs[first:],
        "top_logprobs": tops,
        "text_offset": offsets,
    }
