"""Masked-LM masking in the data pipeline: BERT, whole-word, ALBERT n-gram and SpanBERT span masking.

Choosing *what* to predict (``strategy``):

``"token"``       BERT (Devlin et al. 2019, section 3.1): single tokens, uniformly.
``"whole_word"``  BERT's later whole-word masking: all tokens of a word or none. Words come from the
                  word-start flags the shards store (derived from the tokenizer's word ids), so it works
                  for WordPiece, BPE and Unigram alike, not only for ``##`` continuations.
``"ngram"``       ALBERT (Lan et al. 2020, section 4.1): n-grams of whole words, n <= ``max_ngram`` (3) with
                  p(n) = (1/n) / sum_k (1/k).
``"span"``        SpanBERT (Joshi et al. 2020, section 3.1): span lengths in words drawn from Geo(p=0.2)
                  clipped (renormalised) at 10 words, mean 3.8; the start is a uniformly chosen word start;
                  spans are drawn until ``rate`` of the tokens is masked. The spans' boundary positions are
                  returned for the span-boundary objective (SBO).

How many: ``round(rate * n)`` tokens of the ``n`` maskable ones (at least 1, at most ``max_predictions``),
as BERT's ``create_pretraining_data.py`` does, rather than an independent coin per token. Deviation: BERT
counts ``[CLS]``/``[SEP]`` in ``n``; here only maskable tokens count, so the rate is exactly the rate of text.

How (``mask_prob``/``random_prob``, the rest kept): BERT's 80/10/10. Every row of BERT's Table 8
(MASK/SAME/RND) is ``MaskingConfig(mask_prob=MASK, random_prob=RND)``, e.g. 100/0/0 ``(1.0, 0.0)``,
80/0/20 ``(0.8, 0.2)``, 80/20/0 ``(0.8, 0.0)``, 0/20/80 ``(0.0, 0.8)``, 0/0/100 ``(0.0, 1.0)``. The choice
is per token, except for ``"span"``, where SpanBERT makes it per span. Random replacements are drawn
uniformly from the vocabulary minus the special tokens (deviation: BERT may draw ``[CLS]``/``[PAD]`` too).

Special tokens and padding are never chosen; ``labels`` are -100 where nothing is predicted.

Static or dynamic (:class:`MaskedDataset`): static masks depend on (seed, index) only (BERT's masks written
once, with ``dupe_factor`` copies); dynamic masks on (seed, epoch, index) (RoBERTa, section 4.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnlab.data.instances import STREAM_MASKING, instance_rng

STRATEGIES = ("token", "whole_word", "ngram", "span")
IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingConfig:
    """What to mask and how; validated on construction."""

    rate: float = 0.15  # fraction of maskable tokens predicted (BERT, RoBERTa, SpanBERT: 15%)
    mask_prob: float = 0.8  # of the predicted tokens: replaced by [MASK]
    random_prob: float = 0.1  # replaced by a random token; the remaining 1 - mask - random stay the same
    strategy: str = "token"
    max_predictions: int | None = None  # BERT's max_predictions_per_seq (20 at length 128, 80 at 512)
    max_ngram: int = 3  # ALBERT's n-gram masking
    span_p: float = 0.2  # SpanBERT's geometric parameter
    span_max: int = 10  # SpanBERT's clip on the span length (in words)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"MaskingConfig.strategy: {self.strategy!r}; expected one of {', '.join(STRATEGIES)}"
            )
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"MaskingConfig.rate must be in (0, 1], got {self.rate}")
        if self.mask_prob < 0 or self.random_prob < 0 or self.mask_prob + self.random_prob > 1.0 + 1e-9:
            raise ValueError(
                f"MaskingConfig: mask_prob={self.mask_prob} and random_prob={self.random_prob} must be >= 0 "
                "and sum to at most 1 (the rest is kept unchanged)"
            )
        if self.max_predictions is not None and self.max_predictions < 1:
            raise ValueError(
                f"MaskingConfig.max_predictions must be >= 1 or None, got {self.max_predictions}"
            )
        if self.max_ngram < 1 or self.span_max < 1 or not 0.0 < self.span_p <= 1.0:
            raise ValueError(
                f"MaskingConfig: need max_ngram >= 1, span_max >= 1, 0 < span_p <= 1; got "
                f"{self.max_ngram}, {self.span_max}, {self.span_p}"
            )

    @property
    def keep_prob(self) -> float:
        return 1.0 - self.mask_prob - self.random_prob

    def span_length_probs(self) -> np.ndarray:
        """SpanBERT's p(l) for l = 1..span_max: Geo(span_p) renormalised over the clipped range."""
        lengths = np.arange(1, self.span_max + 1)
        p = self.span_p * (1 - self.span_p) ** (lengths - 1)
        return p / p.sum()

    def ngram_probs(self) -> np.ndarray:
        """ALBERT's p(n) = (1/n) / sum_{k=1..N} (1/k) for n = 1..max_ngram."""
        p = 1.0 / np.arange(1, self.max_ngram + 1)
        return p / p.sum()


@dataclass
class MaskResult:
    input_ids: np.ndarray  # (T,) int64, with replacements
    labels: np.ndarray  # (T,) int64, original id where predicted, -100 elsewhere
    # (S, 2) [start, end) token positions of the masked units; for "span", in the order drawn (only the
    # last one can have been shortened to end at the budget), otherwise sorted
    spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))


class Masker:
    """Applies a :class:`MaskingConfig` to one sequence with a given generator.

    Args:
        config: the masking recipe.
        mask_id: id of ``[MASK]`` / ``<mask>``.
        vocab_size: V; random replacements are drawn from ``range(V)`` minus ``special_ids``.
        special_ids: ids never used as random replacements (``SpecialIds.all`` plus any others).
    """

    def __init__(
        self, config: MaskingConfig, mask_id: int, vocab_size: int, special_ids: tuple[int, ...] = ()
    ):
        if not 0 <= mask_id < vocab_size:
            raise ValueError(f"mask_id {mask_id} outside the vocabulary of size {vocab_size}")
        self.config, self.mask_id, self.vocab_size = config, mask_id, vocab_size
        pool = np.setdiff1d(np.arange(vocab_size), np.asarray(special_ids + (mask_id,), dtype=np.int64))
        if pool.size == 0 and config.random_prob > 0:
            raise ValueError("no non-special token to draw random replacements from")
        self._random_pool = pool

    def __call__(
        self,
        input_ids: np.ndarray,
        word_starts: np.ndarray | None,
        special_tokens_mask: np.ndarray,
        rng: np.random.Generator,
    ) -> MaskResult:
        """Mask one sequence.

        Args:
            input_ids: (T,) token ids.
            word_starts: (T,) bool, True where a word starts (needed for whole_word, ngram, span; ``None``
                treats every token as a word).
            special_tokens_mask: (T,) bool, True at special tokens and padding (never masked).
            rng: the generator for this (seed, epoch, index).
        """
        ids = np.asarray(input_ids, dtype=np.int64)
        special = np.asarray(special_tokens_mask, dtype=bool)
        if ids.shape != special.shape:
            raise ValueError(f"input_ids {ids.shape} and special_tokens_mask {special.shape} differ in shape")
        cfg = self.config
        n_maskable = int((~special).sum())
        labels = np.full_like(ids, IGNORE_INDEX)
        if n_maskable == 0:
            return MaskResult(ids.copy(), labels)
        budget = max(1, int(round(n_maskable * cfg.rate)))
        if cfg.max_predictions is not None:
            budget = min(budget, cfg.max_predictions)
        if cfg.strategy == "token":
            chosen = np.sort(rng.choice(np.flatnonzero(~special), size=budget, replace=False))
            spans = np.stack([chosen, chosen + 1], axis=1)
        else:
            ws = np.ones_like(special) if word_starts is None else np.asarray(word_starts, dtype=bool)
            if ws.shape != ids.shape:
                raise ValueError(f"word_starts {ws.shape} and input_ids {ids.shape} differ in shape")
            starts, ends = _words(ws, special)
            if cfg.strategy == "whole_word":
                spans = _whole_words(starts, ends, budget, rng)
            elif cfg.strategy == "ngram":
                spans = _ngrams(starts, ends, budget, cfg.ngram_probs(), rng)
            else:
                spans = _spans(starts, ends, budget, cfg.span_length_probs(), rng)
        out = ids.copy()
        if len(spans) == 0:
            return MaskResult(out, labels, spans.reshape(0, 2))
        lengths = spans[:, 1] - spans[:, 0]
        positions = np.repeat(spans[:, 0], lengths) + _ranges(lengths)  # (M,) token positions
        labels[positions] = ids[positions]
        # the MASK / RANDOM / SAME decision: one per span for SpanBERT, one per token otherwise
        u = rng.random(len(spans)) if cfg.strategy == "span" else rng.random(len(positions))
        if cfg.strategy == "span":
            u = np.repeat(u, lengths)
        to_mask = u < cfg.mask_prob
        to_random = (u >= cfg.mask_prob) & (u < cfg.mask_prob + cfg.random_prob)
        out[positions[to_mask]] = self.mask_id
        n_rand = int(to_random.sum())
        if n_rand:
            out[positions[to_random]] = self._random_pool[rng.integers(self._random_pool.size, size=n_rand)]
        return MaskResult(out, labels, spans)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """[0..l0-1, 0..l1-1, ...] for the given lengths."""
    total = int(lengths.sum())
    return np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _words(word_starts: np.ndarray, special: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maskable words as (W,) start and end positions. A word ends at the next word start or special token."""
    boundary = word_starts | special
    boundary[0] = True
    b = np.flatnonzero(boundary)
    ends_all = np.append(b[1:], len(special))
    keep = ~special[b]
    return b[keep], ends_all[keep]


def _whole_words(starts: np.ndarray, ends: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
    """BERT: shuffle the words, take whole words while they fit in the budget."""
    lengths = ends - starts
    chosen: list[int] = []
    used = 0
    for w in rng.permutation(len(starts)).tolist():
        if used >= budget:
            break
        if used + lengths[w] > budget:  # BERT skips a word that would overshoot
            continue
        chosen.append(w)
        used += int(lengths[w])
    chosen.sort()
    return np.stack([starts[chosen], ends[chosen]], axis=1).astype(np.int64).reshape(-1, 2)


def _ngrams(starts, ends, budget: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """ALBERT: from shuffled start words, mask n consecutive words (n ~ p(n)), shortening n to fit."""
    n_words = len(starts)
    contiguous = np.append(starts[1:] == ends[:-1], False)  # word w+1 follows word w with no special between
    covered = np.zeros(n_words, dtype=bool)
    spans: list[tuple[int, int]] = []
    used = 0
    ns = rng.choice(np.arange(1, len(probs) + 1), size=n_words, p=probs)
    for k, w in enumerate(rng.permutation(n_words).tolist()):
        if used >= budget:
            break
        n = int(ns[k])
        last = w
        while last - w + 1 < n and contiguous[last]:  # extend over following words in the same segment
            last += 1
        while last >= w and (covered[w : last + 1].any() or used + ends[last] - starts[w] > budget):
            last -= 1  # shorten the n-gram until it fits and overlaps nothing
        if last < w:
            continue
        covered[w : last + 1] = True
        spans.append((int(starts[w]), int(ends[last])))
        used += int(ends[last] - starts[w])
    spans.sort()
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _spans(starts, ends, budget: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SpanBERT: sample a length l in words, then a start word uniformly among those where l whole,
    unmasked words follow without crossing a special token; repeat until the budget is spent.

    Choosing among the starts where the span fits (instead of cutting it at a masked word or a segment
    end) keeps the realised lengths distributed as sampled, except near the end of the budget: spans
    that would overshoot it are shortened (whole words), as SpanBERT stops at 15%. That shortens the
    mean realised span when the budget is small (measured with words of 1-4 tokens: ~3.4 words at
    T=512, ~2.6 at T=128, against 3.8 drawn; ~3.8 at T=4096). When no start fits l words, the longest
    free run is used; only starts whose first word fits in the remaining budget are considered.
    """
    n_words = len(starts)
    word_idx = np.arange(n_words)
    contiguous = np.append(starts[1:] == ends[:-1], False)  # word w+1 follows w with no special between
    covered = np.zeros(n_words, dtype=bool)
    spans: list[tuple[int, int]] = []
    used = 0
    drawn = rng.choice(len(probs), size=budget, p=probs) + 1  # at most `budget` spans: each takes >= 1 token
    for length in drawn.tolist():
        if used >= budget:
            break
        free = ~covered
        run_ends = ~np.append(contiguous[:-1] & free[1:], False)  # w is the last word of its free run
        last_of_run = np.minimum.accumulate(np.where(run_ends, word_idx, n_words)[::-1])[::-1]
        run = np.where(free, last_of_run - word_idx + 1, 0)  # free words from w on, (W,)
        startable = (run > 0) & (ends - starts <= budget - used)  # free, and its first word fits the budget
        if not startable.any():
            break
        length = min(length, int(run[startable].max()))
        fits = np.flatnonzero(startable & (run >= length))
        w = int(fits[rng.integers(len(fits))])
        last = w + length - 1
        while used + ends[last] - starts[w] > budget:
            last -= 1  # the budget is nearly spent: shorten the span, whole words only
        covered[w : last + 1] = True
        spans.append((int(starts[w]), int(ends[last])))
        used += int(ends[last] - starts[w])
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def span_boundary_targets(spans: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Per-token inputs of SpanBERT's span-boundary objective (section 3.2) for one sequence of ``length``.

    For a token x_i inside the masked span (x_s, ..., x_e), SBO predicts it from the boundary tokens x_{s-1}
    and x_{e+1} and the relative position i - s + 1. Returns (T,) int64 arrays, -1 outside spans:
    ``span_left`` (s - 1), ``span_right`` (e + 1) and ``span_position`` (i - s, 0-based).
    """
    left = np.full(length, -1, np.int64)
    right = np.full(length, -1, np.int64)
    pos = np.full(length, -1, np.int64)
    for s, e in np.asarray(spans).tolist():  # e exclusive
        left[s:e] = s - 1
        right[s:e] = e
        pos[s:e] = np.arange(e - s)
    return {"span_left": left, "span_right": right, "span_position": pos}


class MaskedDataset:
    """Wraps a dataset of instances (``input_ids``, ``special_tokens_mask``, ``word_starts``) and masks each.

    ``static=True``: the mask of item i depends on (seed, i) only, as in BERT's pre-generated data (use
    the instances' ``dupe_factor`` for BERT's k copies with different masks). ``static=False``: a new mask
    each epoch, from (seed, epoch, i) (RoBERTa's dynamic masking). Call :meth:`set_epoch` every epoch;
    it is passed on to the wrapped dataset.

    Items gain ``labels`` (T,) and, for span masking, ``span_left``/``span_right``/``span_position`` (T,)
    unless ``boundary_targets`` is False (span masking without the span-boundary objective, SpanBERT's
    Table 6 row "Span Masking (1seq)").
    """

    def __init__(
        self,
        dataset: Any,
        masker: Masker,
        *,
        seed: int = 0,
        static: bool = False,
        boundary_targets: bool = True,
    ) -> None:
        if static and getattr(dataset, "static", None) is False:
            raise ValueError(
                "static masking over instances that change each epoch: build the instances with static=True "
                "(and dupe_factor=k for BERT's k differently masked copies)"
            )
        self.dataset, self.masker, self.seed, self.static = dataset, masker, seed, static
        self.boundary_targets = boundary_targets
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = dict(self.dataset[index])
        index = index % len(self)
        rng = instance_rng(self.seed, 0 if self.static else self.epoch, index, STREAM_MASKING)
        res = self.masker(item["input_ids"], item.get("word_starts"), item["special_tokens_mask"], rng)
        item["input_ids"] = res.input_ids
        item["labels"] = res.labels
        if self.masker.config.strategy == "span" and self.boundary_targets:
            item.update(span_boundary_targets(res.spans, len(res.input_ids)))
        return item
