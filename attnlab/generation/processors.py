"""Logit processors: what HF transformers calls logits processors and warpers, with its order and semantics.

Shapes: R rows (batch x beams), t tokens so far (prompt included), V vocabulary. Each processor maps
``(tokens (R, t), scores (R, V)) -> scores (R, V)``; removed tokens get ``-inf``. The loops pass the left
padding of a batched prompt as id -1 (`mark_padding`): not part of the sequence (HF does the same).

`build_processors` chains them in HF's order: repetition penalty (on the raw scores), then, only when
sampling, temperature, top-k, top-p -- so temperature changes the distribution that top-p measures:

- repetition penalty (Keskar et al. 2019, CTRL section 4.1): every token already in the sequence (prompt
  included) has its score divided by ``penalty`` if positive, multiplied if negative;
- temperature: ``scores / T``;
- top-k (Fan et al. 2018): keep the tokens scoring at least the k-th highest score (ties at the k-th value
  all stay);
- top-p, the nucleus (Holtzman et al. 2020, section 3.1): keep the smallest set of most probable tokens whose
  probability reaches ``p``, the token that crosses ``p`` included. Computed as HF does, from the ascending
  order: a token goes when the probability of it and every token below it is at most ``1 - p``; at least one
  token always stays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

Processor = Callable[[Tensor, Tensor], Tensor]


def check_sampling_options(
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
) -> None:
    """Raise ValueError naming the option and its valid range."""
    if not temperature > 0:
        raise ValueError(
            f"temperature must be > 0 (1.0 leaves the distribution unchanged), got {temperature}"
        )
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"top_k must be a positive integer (or unset for no top-k), got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1.0 keeps every token), got {top_p}")
    if not repetition_penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1.0 is none), got {repetition_penalty}")


def repetition_penalty(penalty: float) -> Processor:
    def apply(tokens: Tensor, scores: Tensor) -> Tensor:
        v = scores.size(-1)
        # (R, V) True for every token in the sequence; ids < 0 (left padding, see the module doc) count not.
        seen = torch.zeros(scores.size(0), v + 1, dtype=torch.bool, device=scores.device)
        seen.scatter_(1, tokens.masked_fill(tokens < 0, v), True)
        penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
        return torch.where(seen[:, :v], penalised, scores)

    return apply


def temperature(value: float) -> Processor:
    def apply(tokens: Tensor, scores: Tensor) -> Tensor:
        return scores / value

    return apply


def top_k(k: int) -> Processor:
    def apply(tokens: Tensor, scores: Tensor) -> Tensor:
        kth = scores.topk(min(k, scores.size(-1)), dim=-1).values[:, -1:]  # (R, 1) the k-th highest score
        return scores.masked_fill(scores < kth, -float("inf"))

    return apply


def top_p(p: float) -> Processor:
    def apply(tokens: Tensor, scores: Tensor) -> Tensor:
        ascending, order = torch.sort(scores, descending=False)  # (R, V)
        mass_at_or_below = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = mass_at_or_below <= (1 - p)
        drop_sorted[:, -1] = False  # the most probable token always stays
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)  # back to vocabulary order
        return scores.masked_fill(drop, -float("inf"))

    return apply


def mark_padding(tokens: Tensor, prefix_mask: Tensor | None) -> Tensor:
    """``tokens`` (R, t) with the prompt's padding (``prefix_mask`` (R, P) == 0) replaced by -1."""
    if prefix_mask is None or bool(prefix_mask.all()):
        return tokens
    p = prefix_mask.size(1)
    return torch.cat([tokens[:, :p].masked_fill(prefix_mask == 0, -1), tokens[:, p:]], dim=1)


def build_processors(
    do_sample: bool,
    temperature_value: float = 1.0,
    top_k_value: int | None = None,
    top_p_value: float | None = None,
    repetition_penalty_value: float = 1.0,
) -> list[Processor]:
    """The processors these options call for, in HF's order (identity ones left out)."""
    check_sampling_options(temperature_value, top_k_value, top_p_value, repetition_penalty_value)
    out: list[Processor] = []
    if repetition_penalty_value != 1.0:
        out.append(repetition_penalty(repetition_penalty_value))
    if do_sample:
        if temperature_value != 1.0:
            out.append(temperature(temperature_value))
        if top_k_value is not None:
            out.append(top_k(top_k_value))
        if top_p_value is not None and top_p_value < 1.0:
            out.append(top_p(top_p_value))
    return out


def apply_processors(processors: Sequence[Processor], tokens: Tensor, scores: Tensor) -> Tensor:
    for process in processors:
        scores = process(tokens, scores)
    return scores
