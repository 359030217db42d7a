"""Greedy and beam search for `Seq2Seq`, batched over sentences, with a key/value cache.

Shapes: B sentences, K beam size, S source length, V vocabulary.

The search loops are attnlab.generation's, shared with GPT: greedy is `attnlab.generation.search.search`,
beam search the one `attnlab.generation.beam.beam_search` (its docstring states the algorithm: GNMT's
length penalty, 2K candidates, exact stopping with ``early_stopping="never"``, which translation uses).
This module supplies `Seq2SeqState`, what those loops need of the encoder-decoder: the encoder runs once;
each step feeds one token per hypothesis to the decoder, self-attention keys/values are appended to the
cache, encoder-decoder keys/values are computed from the memory on the first step and reused
(attnlab.nn.MultiHeadAttention's cache). ``use_cache=False`` recomputes the whole prefix each step (the
reference for the tests).

Maximum length: sentence b may generate at most ``src_len_b + max_length_offset`` tokens, EOS included
(the paper decodes up to input length + 50, section 6.1), capped by ``max_length`` and the position table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.generation import beam as beam_module
from attnlab.generation.beam import LENGTH_PENALTY_STYLES, Hypothesis, length_penalty
from attnlab.generation.search import search
from attnlab.models.decoder import reorder_cache

from .model import Seq2Seq

__all__ = [
    "LENGTH_PENALTY_STYLES",
    "Hypothesis",
    "Seq2SeqState",
    "beam_search",
    "greedy_search",
    "length_limits",
    "length_penalty",
    "translate_ids",
]


def length_limits(
    model: Seq2Seq, attention_mask: Tensor, max_length_offset: int, max_length: int | None
) -> Tensor:
    """(B,) the most tokens each sentence may generate (EOS included)."""
    limits = attention_mask.sum(dim=1).long() + max_length_offset
    cap = model.config.max_positions - 1  # the start token takes position 0
    if max_length is not None:
        cap = min(cap, max_length)
    limits = limits.clamp(min=1, max=cap)
    return limits


class Seq2SeqState:
    """`attnlab.generation.state.DecodeState` for `Seq2Seq`: the memory (R, S, H), its source mask (R, S)
    and the decoder's cache follow the rows the search keeps."""

    def __init__(
        self, model: Seq2Seq, memory: Tensor, attention_mask: Tensor, use_cache: bool = True
    ) -> None:
        self.model = model
        self.memory = memory
        self.mask = attention_mask
        self.cache = model.new_cache() if use_cache else None

    def logits(self, tokens: Tensor) -> Tensor:
        """Next-token logits (R, V) after ``tokens`` (R, t) = start token + the tokens generated so far."""
        t = tokens.size(1)
        if self.cache is not None:
            hidden = self.model.decode(tokens[:, -1:], self.memory, self.mask, cache=self.cache, offset=t - 1)
        else:
            hidden = self.model.decode(tokens, self.memory, self.mask)
        return self.model.generator(hidden[:, -1]).float()

    def select(self, rows: Tensor) -> None:
        self.memory = self.memory.index_select(0, rows)
        self.mask = self.mask.index_select(0, rows)
        if self.cache is not None:
            reorder_cache(self.cache, rows)


@torch.no_grad()
def greedy_search(
    model: Seq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    max_length_offset: int = 50,
    max_length: int | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Pick the most probable token at each step, for a batch (B, S) of padded sources."""
    cfg = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    was_training = model.training
    model.eval()
    try:
        b = input_ids.size(0)
        limits = length_limits(model, attention_mask, max_length_offset, max_length)  # (B,)
        state = Seq2SeqState(model, model.encode(input_ids, attention_mask), attention_mask, use_cache)
        start = input_ids.new_full((b, 1), cfg.start_token_id)
        result = search(state, start, limits, cfg.eos_token_id, cfg.pad_token_id, want_scores=True)
        assert result.scores is not None
        return [
            Hypothesis(result.row(i, keep_eos=False), float(result.scores[i]), bool(result.ended_with_eos[i]))
            for i in range(b)
        ]
    finally:
        model.train(was_training)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    length_penalty_style: str = "gnmt",
    max_length_offset: int = 50,
    max_length: int | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Beam search over a batch (B, S) of padded sources; returns the best hypothesis per sentence.

    Defaults are the paper's (section 6.1): beam size 4, length penalty alpha = 0.6, input length + 50.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if alpha < 0:
        raise ValueError(f"length penalty alpha must be >= 0, got {alpha}")
    length_penalty(1, alpha, length_penalty_style)  # validates the style
    cfg = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    was_training = model.training
    model.eval()
    try:
        limits = length_limits(model, attention_mask, max_length_offset, max_length).tolist()  # (B,)
        state = Seq2SeqState(model, model.encode(input_ids, attention_mask), attention_mask, use_cache)
        start = input_ids.new_full((input_ids.size(0), 1), cfg.start_token_id)
        return beam_module.beam_search(
            state,
            start,
            limits,
            cfg.eos_token_id,
            beam_size,
            alpha,
            length_penalty_style,
            early_stopping="never",
        )
    finally:
        model.train(was_training)


@torch.no_grad()
def translate_ids(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    beam_size: int = 4,
    alpha: float = 0.6,
    max_length_offset: int = 50,
    max_length: int | None = None,
    batch_size: int = 64,
) -> list[list[int]]:
    """Translate source id sequences (EOS already appended), batched by similar length; ``beam_size=1``
    is greedy. Returns target ids (no start, no EOS) in input order."""
    cfg = model.config
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = max(len(sources[i]) for i in chunk)
        ids = torch.full((len(chunk), width), cfg.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):
            ids[row, : len(sources[i])] = torch.tensor(list(sources[i]), dtype=torch.long)
            mask[row, : len(sources[i])] = 1
        ids, mask = ids.to(device), mask.to(device)
        if beam_size == 1:
            hyps = greedy_search(model, ids, mask, max_length_offset, max_length)
        else:
            hyps = beam_search(model, ids, mask, beam_size, alpha, "gnmt", max_length_offset, max_length)
        for row, i in enumerate(chunk):
            out[i] = hyps[row].tokens
    return out
