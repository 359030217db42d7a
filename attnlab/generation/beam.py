"""Beam search, the one implementation in attnlab: GPT's `generate` and translation's decoding both call it.

Shapes: B sentences (A of them still active), K beam size, P prefix length (prompt, or the start token), t
tokens so far, V vocabulary.

The search (as in GNMT, Wu et al. 2016, section 7, and the field's implementations, HF transformers' among
them; the tests check identical outputs):

- every step takes the best 2K continuations of the K live hypotheses by summed log-probability; those
  among the best K that end (EOS, or the length limit) join the sentence's finished list, scored
  ``sum log p / lp(length)`` with length = generated tokens including EOS; the best K that do not end
  stay live;
- ``lp(L) = ((5 + L) / 6) ** alpha`` (``style="gnmt"``, the Transformer paper uses alpha = 0.6) or
  ``L ** alpha`` (``"power"``, the normalisation of fairseq and HF transformers);
- a sentence is done at its length limit, or when it has K finished hypotheses and (``early_stopping``):
  ``True``: at once; ``"never"``: when its best live score, normalised with the largest length it could
  still reach (its limit, for alpha > 0), cannot beat the worst of them -- exact for alpha >= 0, since log
  probabilities only decrease; ``False``: the same test normalised with the current length (HF's default
  heuristic).

Finished sentences leave every tensor (hypotheses, scores, and the state's cache through
``DecodeState.select``), so they cost nothing in later steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.generation.processors import Processor, apply_processors, mark_padding
from attnlab.generation.state import DecodeState

LENGTH_PENALTY_STYLES = ("gnmt", "power")
EARLY_STOPPING = (True, False, "never")
NEG = -1.0e9  # score of impossible / excluded candidates (finite, as HF transformers', so ties order alike)


@dataclass
class Hypothesis:
    """``tokens``: generated ids without the prefix and without EOS; ``score``: normalised log-prob."""

    tokens: list[int]
    score: float
    finished: bool  # ended with EOS (False: cut at the length limit)


def length_penalty(length: int | float, alpha: float, style: str = "gnmt") -> float:
    """``((5 + L) / 6) ** alpha`` (GNMT) or ``L ** alpha`` (power)."""
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "power":
        return float(length) ** alpha
    raise ValueError(f"length_penalty_style {style!r} is not one of {', '.join(LENGTH_PENALTY_STYLES)}")


def check_beam_options(beam_size: int, alpha: float, style: str, early_stopping: bool | str) -> None:
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam size must be an integer >= 1, got {beam_size!r}")
    length_penalty(1, alpha, style)  # validates the style
    if not (early_stopping is True or early_stopping is False or early_stopping == "never"):
        raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")


def _step_logprobs(
    state: DecodeState, running: Tensor, processors: Sequence[Processor], prefix_mask: Tensor | None
) -> Tensor:
    """(A*K, V) log-probabilities of the next token, processed (HF applies processors to log-probs here)."""
    lprobs = torch.log_softmax(state.logits(running), dim=-1)
    return apply_processors(processors, mark_padding(running, prefix_mask), lprobs) if processors else lprobs


@torch.no_grad()
def beam_search(
    state: DecodeState,
    prefix: Tensor,
    limits: Sequence[int],
    eos_token_id: int | None,
    beam_size: int = 4,
    alpha: float = 0.6,
    style: str = "gnmt",
    early_stopping: bool | str = "never",
    processors: Sequence[Processor] = (),
    prefix_mask: Tensor | None = None,
) -> list[Hypothesis]:
    """The best hypothesis of each of B sentences.

    Args:
        state: the model's `DecodeState` for the B sentences (one row each); expanded to B*K rows here.
        prefix: (B, P) tokens every hypothesis starts from (the start token; a left-padded prompt).
        limits: most tokens sentence b may generate, EOS included.
        prefix_mask: (B, P) 0 at the prompt's left padding (hidden from the processors).
    """
    check_beam_options(beam_size, alpha, style, early_stopping)
    k = beam_size
    device = prefix.device
    b = prefix.size(0)
    limit_list = [int(x) for x in limits]
    active = list(range(b))  # original index of each active sentence
    limits_t = torch.tensor(limit_list, device=device)  # (A,)
    state.select(torch.arange(b, device=device).repeat_interleave(k))
    running = prefix.repeat_interleave(k, dim=0)  # (A*K, t)
    if prefix_mask is not None:
        prefix_mask = prefix_mask.repeat_interleave(k, dim=0)  # (A*K, P), follows the rows of `running`
    scores = torch.zeros(b, k, dtype=torch.float32, device=device)  # (A, K)
    scores[:, 1:] = NEG  # all beams start identical: only the first may be extended at step 1
    finished: list[list[tuple[float, list[int], bool]]] = [[] for _ in range(b)]
    p = prefix.size(1)
    eos = -1 if eos_token_id is None else eos_token_id
    for step in range(1, max(limit_list) + 1):
        a = len(active)
        lprobs = _step_logprobs(state, running, processors, prefix_mask)  # (A*K, V)
        vocab = lprobs.size(-1)
        candidates = (lprobs.view(a, k, vocab) + scores[:, :, None]).view(a, k * vocab)
        top_scores, top_index = candidates.topk(2 * k, dim=1)  # (A, 2K), best first
        top_beam = top_index // vocab
        top_token = top_index % vocab
        is_eos = top_token.eq(eos)
        ends = is_eos | limits_t.le(step)[:, None]  # (A, 2K)

        # Finished hypotheses: only candidates ranked among the best K may end (the next K are spares).
        ends_k, eos_k = ends[:, :k].tolist(), is_eos[:, :k].tolist()
        penalty = length_penalty(step, alpha, style)
        for j in range(a):
            if not any(ends_k[j]):
                continue
            pool = finished[active[j]]
            for r in range(k):
                if ends_k[j][r]:
                    seq = running[j * k + int(top_beam[j, r]), p:].tolist()
                    if not eos_k[j][r]:
                        seq.append(int(top_token[j, r]))
                    pool.append((float(top_scores[j, r]) / penalty, seq, eos_k[j][r]))
            pool.sort(key=lambda h: -h[0])
            del pool[k:]

        # Live hypotheses: the best K continuations that did not end.
        live_scores = top_scores + ends.float() * NEG
        scores, pick = live_scores.topk(k, dim=1)  # (A, K)
        offsets = torch.arange(a, device=device)[:, None] * k
        origin = (top_beam.gather(1, pick) + offsets).view(-1)  # (A*K,) rows continued
        running = torch.cat([running.index_select(0, origin), top_token.gather(1, pick).view(-1, 1)], dim=1)
        state.select(origin)
        if prefix_mask is not None:
            prefix_mask = prefix_mask.index_select(0, origin)

        # Done: the length limit, or K finished hypotheses that no live one can beat.
        best_live = scores[:, 0].tolist()
        keep = []
        for j in range(a):
            i = active[j]
            if step >= limit_list[i]:
                continue
            if len(finished[i]) == k:
                if early_stopping is True:
                    continue
                bound = limit_list[i] if early_stopping == "never" and alpha > 0 else step
                if not best_live[j] / length_penalty(bound, alpha, style) > finished[i][-1][0]:
                    continue
            keep.append(j)
        if not keep:
            break
        if len(keep) < a:
            kept = torch.tensor(keep, device=device)
            rows = (kept[:, None] * k + torch.arange(k, device=device)).view(-1)
            active = [active[j] for j in keep]
            limits_t, scores = limits_t.index_select(0, kept), scores.index_select(0, kept)
            running = running.index_select(0, rows)
            state.select(rows)
            if prefix_mask is not None:
                prefix_mask = prefix_mask.index_select(0, rows)
    return [Hypothesis(list(f[0][1]), float(f[0][0]), bool(f[0][2])) for f in finished]
