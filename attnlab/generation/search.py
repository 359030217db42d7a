"""Greedy decoding and sampling: one loop, the choice of the next token passed in.

Shapes: B rows, P prefix length, t tokens so far, V vocabulary.

Each step asks the `DecodeState` for next-token logits, runs the logit processors (HF's order, see
`attnlab.generation.processors`) and takes the argmax (greedy) or draws from ``softmax(scores)`` with a
seeded ``torch.Generator`` (sampling: the same seed gives the same tokens). A row ends at EOS, at its length
limit, or when ``stop`` says so (stop strings); ended rows are padded with ``pad_token_id`` while the others
go on, and the loop ends when every row has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.generation.processors import Processor, apply_processors, mark_padding
from attnlab.generation.state import DecodeState

# Called after each step with the step's tokens (B,), which rows are now done (B,) bool, and the tokens'
# log-probabilities (B,) under the model's own distribution (before the processors, as OpenAI's logprobs).
StepCallback = Callable[[Tensor, Tensor, Tensor], None]
# Given a row and its generated ids so far, True ends the row (e.g. a stop string appeared).
StopCheck = Callable[[int, list[int]], bool]


@dataclass
class SearchResult:
    """``tokens`` (B, steps): generated ids, ``pad_token_id`` after a row ended; ``lengths`` (B,): ids each
    row generated, EOS included; ``ended_with_eos`` (B,) bool; ``scores`` (B,): summed log-probabilities of
    the chosen tokens (raw model distribution) when asked for, else None."""

    tokens: Tensor
    lengths: Tensor
    ended_with_eos: Tensor
    scores: Tensor | None = None

    def row(self, i: int, keep_eos: bool = True) -> list[int]:
        ids = self.tokens[i, : int(self.lengths[i])].tolist()
        if not keep_eos and bool(self.ended_with_eos[i]):
            ids = ids[:-1]
        return ids


@torch.no_grad()
def search(
    state: DecodeState,
    prefix: Tensor,
    limits: Tensor,
    eos_token_id: int | None,
    pad_token_id: int,
    processors: Sequence[Processor] = (),
    do_sample: bool = False,
    generator: torch.Generator | None = None,
    want_scores: bool = False,
    on_step: StepCallback | None = None,
    stop: StopCheck | None = None,
    prefix_mask: Tensor | None = None,
) -> SearchResult:
    """Greedy (``do_sample=False``) or sampled continuations of ``prefix`` (B, P); ``limits`` (B,) the most
    tokens each row may generate; ``prefix_mask`` (B, P) 0 at left padding (hidden from the processors)."""
    b, p = prefix.shape
    device = prefix.device
    steps = int(limits.max()) if b else 0
    buffer = prefix.new_full((b, p + steps), pad_token_id)  # (B, P + steps): written one column per step
    buffer[:, :p] = prefix
    done = torch.zeros(b, dtype=torch.bool, device=device)
    ended = torch.zeros(b, dtype=torch.bool, device=device)
    lengths = torch.zeros(b, dtype=torch.long, device=device)
    scores = torch.zeros(b, dtype=torch.float32, device=device) if want_scores else None
    # Rows can only end early with EOS, a stop check or unequal limits; without any, skip the bookkeeping.
    track = eos_token_id is not None or stop is not None or bool(limits.min() != limits.max())
    step = 0
    for step in range(1, steps + 1):
        tokens = buffer[:, : p + step - 1]  # (B, t)
        logits = state.logits(tokens)  # (B, V)
        if processors:
            processed = apply_processors(processors, mark_padding(tokens, prefix_mask), logits)
        else:
            processed = logits
        if do_sample:
            probs = torch.softmax(processed, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
        else:
            nxt = processed.argmax(dim=-1)
        if track:
            nxt = nxt.masked_fill(done, pad_token_id)
        chosen = None  # (B,) log-probabilities of the chosen tokens, where scored or streamed
        if scores is not None or on_step is not None:
            chosen = logits.gather(1, nxt[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
        if scores is not None:
            scores += chosen.masked_fill(done, 0.0)
        buffer[:, p + step - 1] = nxt
        if not track:
            if on_step is not None:
                on_step(nxt, done if step < steps else ~done, chosen)
            continue
        lengths += (~done).long()
        newly = limits.le(step)
        if eos_token_id is not None:
            is_eos = nxt.eq(eos_token_id) & ~done
            ended |= is_eos
            newly |= is_eos
        if stop is not None:
            generated = buffer[:, p : p + step]
            for i in (~done & ~newly).nonzero().flatten().tolist():
                if stop(i, generated[i, : int(lengths[i])].tolist()):
                    newly[i] = True
        done |= newly
        if on_step is not None:
            on_step(nxt, done, chosen)
        if bool(done.all()):
            break
    if not track:
        lengths.fill_(step)
    return SearchResult(buffer[:, p : p + step], lengths, ended, scores)
