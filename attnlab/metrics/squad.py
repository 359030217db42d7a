"""SQuAD exact match and F1 (Rajpurkar et al., 2016; 2018), as the official evaluation scripts compute them.

Written here from the scripts' published algorithm:

* **Normalisation** of an answer string: lowercase; delete every ASCII punctuation character
  (``string.punctuation``); replace the whole words ``a``, ``an``, ``the`` by a space; collapse runs of
  whitespace to one space and strip.
* **EM** of a prediction against one gold answer: 1 if the normalised strings are equal.
* **F1**: the normalised strings are split on whitespace; overlap is the size of the multiset
  intersection of the two token lists; P = overlap / |prediction|, R = overlap / |gold|, F1 = 2PR/(P+R),
  0 when the overlap is 0. v2.0 adds: when either side has no tokens, F1 = EM of the token lists (so an
  empty prediction for an unanswerable question scores 1).
* A question's score is the maximum over its gold answers; the totals are 100 × the mean over questions.
* **v2.0**: gold answers that normalise to the empty string are dropped; a question left with none (an
  unanswerable one) has the single gold answer ``""``. With no-answer probabilities (``na_probs``, higher
  = more likely unanswerable) a prediction is replaced by ``""`` when its probability exceeds the
  threshold (default 1.0: never). The report splits the scores into ``HasAns_*`` and ``NoAns_*`` and
  searches the best threshold: start from "every question predicted unanswerable" (score = the number of
  unanswerable questions), walk the questions in increasing ``na_prob`` (ties in the order of
  ``na_probs``), switching each to its answer (+its score if answerable; −1 if unanswerable and the
  answer is non-empty), and keep the best running total and the ``na_prob`` at which it was reached.

Deviation (named): the official v2.0 script crashes (KeyError) when an answerable question has no
prediction; here a missing prediction scores 0 on every question, as in the v1.1 script, and the count
is reported as ``missing``.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, fix whitespace (the official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the two strings are equal after :func:`normalize_answer`, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version: str = "2.0") -> float:
    """Token-overlap F1 of two answers after normalisation.

    ``version="1.1"`` reproduces the v1.1 script (0 when there is no overlap, including two empty
    strings); ``"2.0"`` scores an empty side as 1.0 if both are empty, else 0.0.
    """
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if version == "2.0" and (not pred_tokens or not gold_tokens):
        return float(pred_tokens == gold_tokens)
    if version not in ("1.1", "2.0"):
        raise ValueError(f"version must be '1.1' or '2.0', got {version!r}")
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def max_over_golds(prediction: str, golds: Iterable[str], version: str = "2.0") -> tuple[float, float]:
    """(EM, F1) of a prediction: each the maximum over the gold answers."""
    golds = list(golds)
    if not golds:
        raise ValueError("a question needs at least one gold answer (use [''] for unanswerable ones)")
    em = max(exact_match(prediction, g) for g in golds)
    f1 = max(f1_score(prediction, g, version) for g in golds)
    return em, f1


def squad_gold_from_json(dataset: Mapping | list) -> dict[str, list[str]]:
    """``{question id: [gold answer texts]}`` from a SQuAD JSON (the whole file or its ``"data"`` list)."""
    articles = dataset["data"] if isinstance(dataset, Mapping) else dataset
    gold: dict[str, list[str]] = {}
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                gold[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
    return gold


def _gold_texts(gold: Mapping) -> dict[str, list[str]]:
    """Accept ``{id: [texts]}``, ``{id: QAExample}``, a SQuAD JSON, or an iterable of QAExample."""
    if isinstance(gold, Mapping) and "data" in gold:
        return squad_gold_from_json(gold)
    items = gold.items() if isinstance(gold, Mapping) else ((g.id, g) for g in gold)
    out = {}
    for qid, value in items:
        if hasattr(value, "answers"):
            out[qid] = [text for text, _ in value.answers]
        else:
            out[qid] = list(value)
    return out


def squad_v1_scores(predictions: Mapping[str, str], gold) -> dict[str, float]:
    """The v1.1 script's ``{"exact_match", "f1"}`` (percentages), plus ``total`` and ``missing``.

    ``gold``: ``{id: [answer texts]}``, ``{id: QAExample}``, QAExample list, or the SQuAD JSON.
    Questions without a prediction count as 0 (as the v1.1 script does); predictions for unknown ids
    are ignored.
    """
    golds = _gold_texts(gold)
    em_sum = f1_sum = 0.0
    missing = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            missing += 1
            continue
        em, f1 = max_over_golds(predictions[qid], answers, version="1.1")
        em_sum += em
        f1_sum += f1
    total = len(golds)
    if total == 0:
        raise ValueError("no gold questions to score")
    return {
        "exact_match": 100.0 * em_sum / total,
        "f1": 100.0 * f1_sum / total,
        "total": total,
        "missing": missing,
    }


@dataclass(frozen=True)
class _Raw:
    exact: dict[str, float]
    f1: dict[str, float]
    has_answer: dict[str, bool]


def _v2_raw(predictions: Mapping[str, str], golds: Mapping[str, list[str]]) -> _Raw:
    exact, f1, has_answer = {}, {}, {}
    for qid, answers in golds.items():
        # As the official script: "has an answer" is whether the gold list is non-empty at all, while
        # the answers scored against are those that do not normalise to "" (falling back to [""]).
        has_answer[qid] = bool(answers)
        answers = [a for a in answers if normalize_answer(a)]
        if not answers:
            answers = [""]
        prediction = predictions.get(qid)
        if prediction is None:
            exact[qid] = f1[qid] = 0.0
            continue
        exact[qid], f1[qid] = max_over_golds(prediction, answers, version="2.0")
    return _Raw(exact, f1, has_answer)


def _apply_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
    threshold: float,
) -> dict[str, float]:
    out = {}
    for qid, score in scores.items():
        if na_probs[qid] > threshold:
            out[qid] = float(not has_answer[qid])  # predicted "no answer": right iff unanswerable
        else:
            out[qid] = score
    return out


def best_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
    predictions: Mapping[str, str],
) -> tuple[float, float]:
    """(best score in %, threshold) of the v2.0 sweep described in the module docstring."""
    running = sum(1 for qid in scores if not has_answer[qid])
    best, best_at = running, 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):  # stable: ties keep na_probs' order
        if qid not in scores:
            continue
        if has_answer[qid]:
            running += scores[qid]
        elif predictions.get(qid):
            running -= 1
        if running > best:
            best, best_at = running, na_probs[qid]
    return 100.0 * best / len(scores), best_at


def squad_v2_scores(
    predictions: Mapping[str, str],
    gold,
    na_probs: Mapping[str, float] | None = None,
    na_prob_threshold: float = 1.0,
) -> dict[str, float]:
    """The v2.0 script's report.

    Returns ``exact``, ``f1``, ``total``, ``HasAns_exact``, ``HasAns_f1``, ``HasAns_total``, ``NoAns_*``
    (when there are such questions), ``best_exact``, ``best_exact_thresh``, ``best_f1``,
    ``best_f1_thresh`` (only when ``na_probs`` is given, as in the official script), and ``missing``.
    ``na_probs`` defaults to 0.0 for every question.
    """
    golds = _gold_texts(gold)
    if not golds:
        raise ValueError("no gold questions to score")
    raw = _v2_raw(predictions, golds)
    given_probs = na_probs is not None
    if na_probs is None:
        na_probs = {qid: 0.0 for qid in golds}
    unknown = [qid for qid in golds if qid not in na_probs]
    if unknown:
        raise ValueError(f"na_probs lacks {len(unknown)} question id(s), e.g. {unknown[:3]}")
    exact = _apply_threshold(raw.exact, na_probs, raw.has_answer, na_prob_threshold)
    f1 = _apply_threshold(raw.f1, na_probs, raw.has_answer, na_prob_threshold)

    def block(ids: list[str], prefix: str) -> dict[str, float]:
        n = len(ids)
        return {
            f"{prefix}exact": 100.0 * sum(exact[q] for q in ids) / n,
            f"{prefix}f1": 100.0 * sum(f1[q] for q in ids) / n,
            f"{prefix}total": n,
        }

    out = block(list(golds), "")
    has = [q for q in golds if raw.has_answer[q]]
    no = [q for q in golds if not raw.has_answer[q]]
    if has:
        out.update(block(has, "HasAns_"))
    if no:
        out.update(block(no, "NoAns_"))
    if given_probs:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(
            raw.exact, na_probs, raw.has_answer, predictions
        )
        out["best_f1"], out["best_f1_thresh"] = best_threshold(raw.f1, na_probs, raw.has_answer, predictions)
    out["missing"] = sum(1 for q in golds if q not in predictions)
    return out
