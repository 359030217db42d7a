"""Extractive QA post-processing: from per-window start/end logits to answer strings (pure functions).

A passage longer than the model's window is split into overlapping windows (BERT §4.2, "doc stride"),
each ``[CLS] question [SEP] context piece [SEP]``. For every window the model gives start and end
logits per token; here they become answers:

1. **Candidates per window**: the ``n_best`` highest start and end logits among the window's *context*
   tokens; a pair is a candidate when ``end >= start`` and it spans at most ``max_answer_length`` tokens.
   Score = start logit + end logit.
2. **Across windows** the candidates are pooled. A character span found in several windows is scored by
   one of them: by default the window that gives the span its *maximum context*, ``min(context tokens
   left of its start, context tokens right of its end) + 0.01 * context length`` (BERT's
   ``_check_is_max_context`` rule, applied to the span); with ``use_max_context=False`` the window with
   the highest score (HF's ``run_qa`` behaviour). The ``n_best`` best spans get softmax probabilities.
3. **Back to the passage**: each token's ``offsets`` entry is its ``(start, end)`` character span in the
   context (end exclusive; ``None`` for question and special tokens), so a span maps to
   ``context[offsets[start][0]:offsets[end][1]]`` exactly, with no de-tokenisation heuristics.
4. **SQuAD 2.0**: the null score of a window is ``start_logits[cls] + end_logits[cls]``; the example's is
   the minimum over its windows (as in BERT's ``run_squad.py``); ``null_odds = null score - best non-null
   score``, and the answer is ``""`` when ``null_odds > null_threshold``. ``null_odds`` is what the
   official v2.0 evaluation takes as ``na_prob`` (higher = more likely unanswerable).

Deviations (named): step 1 takes the top-``n_best`` over context positions only, where BERT and HF take
them over all positions and then discard non-context ones; restricting first never loses a candidate the
other order finds, and finds more when question tokens have high logits. Step 2 applies BERT's
maximum-context rule to the whole span, where BERT applies it to the start token only: BERT's rule
discards a long answer whose start is most central in a window that does not hold its end (the answer is
then found in no window); the span rule keeps it, and a span that fits in one window only is scored there.
BERT's token-level masks remain available (:func:`max_context_masks`, ``window_candidates(max_context=)``).

Shapes: T tokens in a window. Logits may be lists, numpy arrays or CPU tensors (anything ``np.asarray``
reads); nothing here needs torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnlab.atomic import write_json_atomic

Offset = tuple[int, int] | None


@dataclass(frozen=True)
class QAWindow:
    """The model's output for one window of one example.

    ``start_logits``, ``end_logits``: (T,). ``offsets``: (T,) ``(char_start, char_end)`` into the
    example's context for context tokens, ``None`` for every other token. ``cls_index``: where the
    [CLS] token is (its logits score "no answer").
    """

    example_id: str
    start_logits: Sequence[float]
    end_logits: Sequence[float]
    offsets: Sequence[Offset]
    cls_index: int = 0


@dataclass(frozen=True)
class SpanCandidate:
    """One candidate answer: a character span of the context and the token span it came from."""

    text: str
    start_char: int
    end_char: int
    score: float
    start_logit: float
    end_logit: float
    window: int
    start_token: int
    end_token: int
    probability: float = 0.0


@dataclass(frozen=True)
class QAPrediction:
    """The answer for one example.

    ``text`` is ``context[start_char:end_char]`` or ``""`` (null answer, ``start_char = end_char = -1``).
    ``best_non_null`` is the top non-null candidate (``None`` when no window had a valid span);
    ``null_score`` is ``None`` unless null answers were scored (``version_2``).
    """

    example_id: str
    text: str
    start_char: int
    end_char: int
    is_null: bool
    null_score: float | None
    best_non_null: SpanCandidate | None
    null_odds: float | None
    nbest: tuple[SpanCandidate, ...] = field(default_factory=tuple)


def _check_window(start_logits: np.ndarray, end_logits: np.ndarray, offsets: Sequence[Offset], context: str):
    if start_logits.ndim != 1 or start_logits.shape != end_logits.shape:
        raise ValueError(
            "start/end logits must be 1-D (T,) and the same shape, "
            f"got {start_logits.shape}, {end_logits.shape}"
        )
    if len(offsets) != start_logits.shape[0]:
        raise ValueError(
            f"offsets has {len(offsets)} entries but the window has {start_logits.shape[0]} tokens"
        )
    for i, span in enumerate(offsets):
        if span is None:
            continue
        s, e = span
        if not (0 <= s <= e <= len(context)):
            raise ValueError(
                f"token {i}: offset {span} is not a span of the {len(context)}-character context "
                "(offsets must be character positions in the context, end exclusive)"
            )


def context_offsets(
    offsets: Sequence[Sequence[int]], sequence_ids: Sequence[int | None], context_sequence: int = 1
) -> list[Offset]:
    """Offsets in this module's convention from a tokenizer's ``(T, 2)`` offsets and sequence ids.

    Tokenizers give every token a pair, ``(0, 0)`` for special tokens and question-relative spans for
    question tokens; here only tokens of ``context_sequence`` (1 for ``question, context`` pairs, 0 for
    ``context, question``) keep theirs, the rest become ``None``.
    """
    if len(offsets) != len(sequence_ids):
        raise ValueError(f"{len(offsets)} offsets but {len(sequence_ids)} sequence ids")
    return [
        (int(o[0]), int(o[1])) if sid == context_sequence else None for o, sid in zip(offsets, sequence_ids)
    ]


def max_context_masks(windows_offsets: Sequence[Sequence[Offset]]) -> list[list[bool]]:
    """For each window and token, whether this window gives the token its maximum context.

    Tokens are identified across windows by their character span. A token's score in a window is
    ``min(context tokens to its left, context tokens to its right) + 0.01 * context tokens in the window``;
    the first window with the highest score wins (BERT's rule). Non-context tokens are ``False``.
    """
    best: dict[tuple[int, int], tuple[float, int]] = {}
    positions: list[list[int]] = []
    for w, offsets in enumerate(windows_offsets):
        ctx = [i for i, span in enumerate(offsets) if span is not None]
        positions.append(ctx)
        n = len(ctx)
        for rank, i in enumerate(ctx):
            score = min(rank, n - 1 - rank) + 0.01 * n
            key = tuple(offsets[i])
            if key not in best or score > best[key][0]:
                best[key] = (score, w)
    masks = []
    for w, offsets in enumerate(windows_offsets):
        mask = [False] * len(offsets)
        for i in positions[w]:
            mask[i] = best[tuple(offsets[i])][1] == w
        masks.append(mask)
    return masks


def window_candidates(
    start_logits: Sequence[float],
    end_logits: Sequence[float],
    offsets: Sequence[Offset],
    context: str,
    n_best: int = 20,
    max_answer_length: int = 30,
    max_context: Sequence[bool] | None = None,
    window: int = 0,
) -> list[SpanCandidate]:
    """Valid answer spans of one window, best first (see step 1 of the module docstring).

    ``max_context``: (T,) mask of tokens allowed to start an answer here (from :func:`max_context_masks`);
    ``None`` allows every context token.
    """
    if n_best < 1 or max_answer_length < 1:
        raise ValueError(f"n_best and max_answer_length must be >= 1, got {n_best}, {max_answer_length}")
    start = np.asarray(start_logits, dtype=np.float64)  # (T,)
    end = np.asarray(end_logits, dtype=np.float64)  # (T,)
    _check_window(start, end, offsets, context)
    ctx = np.array([span is not None for span in offsets], dtype=bool)  # (T,)
    starts_ok = ctx if max_context is None else ctx & np.asarray(max_context, dtype=bool)
    start_idx = _top(start, starts_ok, n_best)
    end_idx = _top(end, ctx, n_best)
    out = []
    for s in start_idx:
        for e in end_idx:
            if e < s or e - s + 1 > max_answer_length:
                continue
            if not ctx[s : e + 1].all():  # a span may not leave the context part of the window
                continue
            c0, c1 = offsets[s][0], offsets[e][1]
            out.append(
                SpanCandidate(
                    text=context[c0:c1],
                    start_char=int(c0),
                    end_char=int(c1),
                    score=float(start[s] + end[e]),
                    start_logit=float(start[s]),
                    end_logit=float(end[e]),
                    window=window,
                    start_token=int(s),
                    end_token=int(e),
                )
            )
    out.sort(key=lambda c: -c.score)
    return out


def _top(values: np.ndarray, allowed: np.ndarray, k: int) -> list[int]:
    idx = np.flatnonzero(allowed)
    order = np.argsort(-values[idx], kind="stable")[:k]
    return [int(i) for i in idx[order]]


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    m = max(scores)
    exps = [math.exp(s - m) for s in scores]
    total = sum(exps)
    return [x / total for x in exps]


def postprocess_example(
    windows: Sequence[QAWindow],
    context: str,
    n_best: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
    use_max_context: bool = True,
) -> QAPrediction:
    """Combine one example's windows into its answer (steps 1-4 of the module docstring).

    Args:
        windows: this example's windows, in passage order.
        context: the original passage (the string the offsets index).
        n_best: candidates kept per window side and in the final list.
        max_answer_length: longest answer, in tokens.
        version_2: score the null answer (SQuAD 2.0).
        null_threshold: predict ``""`` when ``null_odds`` exceeds it (tune it on dev with the
            best-threshold search of :func:`attnlab.metrics.squad.squad_v2_scores`).
        use_max_context: score a span found in several windows by the window where it is most central
            (default) rather than by the window where it scores highest.
    """
    if not windows:
        raise ValueError("an example needs at least one window")
    ids = {w.example_id for w in windows}
    if len(ids) != 1:
        raise ValueError(f"windows of several examples were passed together: {sorted(ids)}")
    by_span: dict[tuple[int, int], tuple[tuple[float, float], SpanCandidate]] = {}
    null_score = None
    for k, w in enumerate(windows):
        ctx = [i for i, span in enumerate(w.offsets) if span is not None]
        rank = {i: r for r, i in enumerate(ctx)}  # token position → index among the window's context tokens
        for cand in window_candidates(
            w.start_logits, w.end_logits, w.offsets, context, n_best, max_answer_length, window=k
        ):
            key = (cand.start_char, cand.end_char)
            if use_max_context:
                left, right = rank[cand.start_token], len(ctx) - 1 - rank[cand.end_token]
                order = (min(left, right) + 0.01 * len(ctx), cand.score)
            else:
                order = (cand.score, 0.0)
            if key not in by_span or order > by_span[key][0]:
                by_span[key] = (order, cand)
        if version_2:
            cls = w.cls_index
            score = float(np.asarray(w.start_logits)[cls] + np.asarray(w.end_logits)[cls])
            null_score = score if null_score is None else min(null_score, score)
    ranked = sorted((cand for _, cand in by_span.values()), key=lambda c: -c.score)[:n_best]
    scores = [c.score for c in ranked] + ([null_score] if version_2 else [])
    probs = _softmax(scores)  # with version_2 the null answer takes its share: the n-best sum to <= 1
    nbest = tuple(dataclasses.replace(c, probability=p) for c, p in zip(ranked, probs))
    best = nbest[0] if nbest else None
    example_id = windows[0].example_id
    if version_2:
        # With no valid span anywhere, compare against a zero-score placeholder (BERT's "empty" entry).
        null_odds = null_score - (best.score if best is not None else 0.0)
        if null_odds > null_threshold or best is None:
            return QAPrediction(example_id, "", -1, -1, True, null_score, best, null_odds, nbest)
        return QAPrediction(
            example_id, best.text, best.start_char, best.end_char, False, null_score, best, null_odds, nbest
        )
    if best is None:
        return QAPrediction(example_id, "", -1, -1, True, None, None, None, nbest)
    return QAPrediction(example_id, best.text, best.start_char, best.end_char, False, None, best, None, nbest)


def postprocess_predictions(
    contexts: Mapping[str, str] | Iterable,
    windows: Iterable[QAWindow],
    n_best: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
    use_max_context: bool = True,
) -> dict[str, QAPrediction]:
    """Answers for a whole evaluation set: windows are grouped by ``example_id``.

    ``contexts``: ``{example id: context}`` or an iterable of :class:`~attnlab.tasks.examples.QAExample`.
    Every example gets a prediction; an example with no window raises (it was lost in feature building).
    """
    if not isinstance(contexts, Mapping):
        contexts = {ex.id: ex.context for ex in contexts}
    grouped: dict[str, list[QAWindow]] = {qid: [] for qid in contexts}
    for w in windows:
        if w.example_id not in grouped:
            raise ValueError(f"window for unknown example id {w.example_id!r}")
        grouped[w.example_id].append(w)
    lost = [qid for qid, ws in grouped.items() if not ws]
    if lost:
        raise ValueError(f"{len(lost)} example(s) have no window, e.g. {lost[:3]}")
    return {
        qid: postprocess_example(
            ws, contexts[qid], n_best, max_answer_length, version_2, null_threshold, use_max_context
        )
        for qid, ws in grouped.items()
    }


def predictions_dict(predictions: Mapping[str, QAPrediction]) -> dict[str, str]:
    """``{question id: answer text}``: the official ``predictions.json`` content."""
    return {qid: p.text for qid, p in predictions.items()}


def null_odds_dict(predictions: Mapping[str, QAPrediction]) -> dict[str, float]:
    """``{question id: null odds}``: the official v2.0 ``na_prob`` file (``null_odds.json``) content."""
    missing = [qid for qid, p in predictions.items() if p.null_odds is None]
    if missing:
        raise ValueError(f"null odds exist only for version_2 predictions; missing for e.g. {missing[:3]}")
    return {qid: float(p.null_odds) for qid, p in predictions.items()}


def _write_json(path: str | os.PathLike, obj: object) -> None:
    write_json_atomic(obj, path, indent=4, ensure_ascii=False)  # never a half-written predictions file


def write_predictions_json(path: str | os.PathLike, predictions: Mapping[str, QAPrediction]) -> None:
    """Write ``predictions.json`` as the official SQuAD scripts read it: ``{id: text}``."""
    _write_json(path, predictions_dict(predictions))


def write_null_odds_json(path: str | os.PathLike, predictions: Mapping[str, QAPrediction]) -> None:
    """Write ``null_odds.json`` (``{id: float}``), the v2.0 script's ``--na-prob-file``."""
    _write_json(path, null_odds_dict(predictions))


def write_nbest_json(path: str | os.PathLike, predictions: Mapping[str, QAPrediction]) -> None:
    """Write ``nbest_predictions.json``: per id, the n-best ``text``, ``probability``, logits, offsets."""
    _write_json(
        path,
        {
            qid: [
                {"text": c.text, "probability": c.probability, "start_logit": c.start_logit,
                 "end_logit": c.end_logit, "start_char": c.start_char, "end_char": c.end_char}
                for c in p.nbest
            ]
            for qid, p in predictions.items()
        },
    )  # fmt: skip
