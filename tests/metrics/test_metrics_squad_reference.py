"""`attnlab.metrics.squad` against the official SQuAD evaluation logic on the real v1.1 dev file.

The reference below is written in this test from the published algorithm of the official scripts
(``evaluate-v1.1.py``, ``evaluate-v2.0.py``), independently of attnlab's module, and reads the raw JSON
(not attnlab's loader):

- normalise: lowercase, delete ``string.punctuation`` characters, replace the whole words a/an/the by a
  space, join the whitespace-split tokens with one space;
- EM: normalised strings equal; F1: multiset overlap of the normalised tokens, 0 when none overlap
  (v2.0: when either side has no tokens, 1 if both have none, else 0);
- each question takes the maximum over its gold answers; totals are 100 x the mean over all questions, a
  question without a prediction counting 0;
- v2.0: gold answers that normalise to "" are dropped and an empty list becomes [""]; HasAns/NoAns splits;
  with no-answer probabilities, a prediction above the threshold becomes "no answer"; the best-threshold
  sweep over questions sorted by probability.

Predictions are every kind of near miss, made deterministically from each question (the gold verbatim,
case/article/punctuation changes, truncations, extensions, random spans, empty, missing, non-ASCII
punctuation the scripts keep), so all 10,570 questions exercise the scoring.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from attnlab.metrics.squad import squad_v1_scores, squad_v2_scores

DATA = Path(os.environ.get("ATTNLAB_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
DEV = DATA / "squad" / "v1.1" / "dev-v1.1.json"

pytestmark = pytest.mark.data

# ------------------------------------------------------------------------------------- the reference

PUNCTUATION = set(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")


def ref_normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def ref_exact(prediction: str, gold: str) -> float:
    return float(ref_normalize(prediction) == ref_normalize(gold))


def _overlap_f1(pred: list[str], gold: list[str]) -> float:
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def ref_f1_v1(prediction: str, gold: str) -> float:
    return _overlap_f1(ref_normalize(prediction).split(), ref_normalize(gold).split())


def ref_f1_v2(prediction: str, gold: str) -> float:
    pred = ref_normalize(prediction).split() if prediction else []
    gold_tokens = ref_normalize(gold).split() if gold else []
    if not pred or not gold_tokens:
        return float(pred == gold_tokens)
    return _overlap_f1(pred, gold_tokens)


def ref_v1(golds: dict[str, list[str]], predictions: dict[str, str]) -> dict[str, float]:
    em = f1 = 0.0
    for qid, answers in golds.items():
        if qid in predictions:
            em += max(ref_exact(predictions[qid], a) for a in answers)
            f1 += max(ref_f1_v1(predictions[qid], a) for a in answers)
    return {"exact_match": 100 * em / len(golds), "f1": 100 * f1 / len(golds)}


def ref_v2(golds, predictions, na_probs, threshold=1.0) -> dict[str, float]:
    exact_raw, f1_raw, has_answer = {}, {}, {}
    for qid, answers in golds.items():
        has_answer[qid] = bool(answers)
        kept = [a for a in answers if ref_normalize(a)] or [""]
        if qid not in predictions:
            exact_raw[qid] = f1_raw[qid] = 0.0
            continue
        exact_raw[qid] = max(ref_exact(predictions[qid], a) for a in kept)
        f1_raw[qid] = max(ref_f1_v2(predictions[qid], a) for a in kept)

    def thresholded(raw):
        return {q: (float(not has_answer[q]) if na_probs[q] > threshold else s) for q, s in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = {}
    for prefix, ids in (("", list(golds)), ("HasAns_", [q for q in golds if has_answer[q]]),
                        ("NoAns_", [q for q in golds if not has_answer[q]])):  # fmt: skip
        out[f"{prefix}exact"] = 100 * sum(exact[q] for q in ids) / len(ids)
        out[f"{prefix}f1"] = 100 * sum(f1[q] for q in ids) / len(ids)
        out[f"{prefix}total"] = len(ids)

    def sweep(raw):
        score = best = sum(1 for q in raw if not has_answer[q])
        best_at = 0.0
        for qid in sorted(na_probs, key=lambda q: na_probs[q]):
            if qid not in raw:
                continue
            score += raw[qid] if has_answer[qid] else (-1 if predictions.get(qid) else 0)
            if score > best:
                best, best_at = score, na_probs[qid]
        return 100 * best / len(raw), best_at

    out["best_exact"], out["best_exact_thresh"] = sweep(exact_raw)
    out["best_f1"], out["best_f1_thresh"] = sweep(f1_raw)
    return out


# ------------------------------------------------------------------------------------- the data


def _dev():
    if not DEV.is_file():
        pytest.skip(f"{DEV} not present")
    raw = json.loads(DEV.read_text(encoding="utf-8"))
    questions = []  # (id, context, answers as (text, start))
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [(a["text"], a["answer_start"]) for a in qa["answers"]]
                questions.append((qa["id"], paragraph["context"], answers))
    return questions


def _near_misses(questions) -> dict[str, str]:
    rng = random.Random(12)
    predictions = {}
    for i, (qid, context, answers) in enumerate(questions):
        text, start = answers[i % len(answers)]
        words = text.split()
        after = context[start + len(text) :].split()
        spans = context.split()
        kind = i % 10
        if kind == 0:
            predictions[qid] = text
        elif kind == 1:
            predictions[qid] = "The " + text.upper() + "."
        elif kind == 2:
            predictions[qid] = " ".join(words[: max(1, len(words) // 2)])
        elif kind == 3:
            predictions[qid] = " ".join([text, *after[: rng.randint(1, 3)]])
        elif kind == 4:
            j = rng.randrange(len(spans))
            predictions[qid] = " ".join(spans[j : j + rng.randint(1, 6)])
        elif kind == 5:
            predictions[qid] = ""
        elif kind == 6:
            predictions[qid] = text.replace(" ", " \u2013 ", 1) + "\u2019"  # non-ASCII punctuation stays
        elif kind == 7:
            continue  # no prediction: scores 0
        elif kind == 8:
            predictions[qid] = f"a  {text} an theatre"  # articles as words, and inside a word
        else:
            predictions[qid] = f"  {text.lower()}\t!!"
    return predictions


def test_v1_matches_the_official_algorithm_on_the_dev_file() -> None:
    questions = _dev()
    assert len(questions) == 10_570
    golds = {qid: [t for t, _ in answers] for qid, _, answers in questions}
    predictions = _near_misses(questions)
    ours = squad_v1_scores(predictions, golds)
    ref = ref_v1(golds, predictions)
    assert 20 < ref["exact_match"] < 80 and ref["exact_match"] < ref["f1"]  # the near misses do differ
    assert ours["exact_match"] == pytest.approx(ref["exact_match"], abs=1e-9)
    assert ours["f1"] == pytest.approx(ref["f1"], abs=1e-9)
    assert ours["missing"] == sum(1 for q in golds if q not in predictions)
    # attnlab's SQuAD JSON path gives the same numbers
    from_json = squad_v1_scores(predictions, json.loads(DEV.read_text(encoding="utf-8")))
    assert from_json["f1"] == pytest.approx(ref["f1"], abs=1e-9)


def test_v2_matches_the_official_algorithm_on_the_dev_file_made_partly_unanswerable() -> None:
    questions = _dev()
    rng = random.Random(3)
    # every 7th question made unanswerable (SQuAD 2.0's [] gold), so both HasAns and NoAns are scored
    golds = {
        qid: ([] if i % 7 == 0 else [t for t, _ in answers]) for i, (qid, _, answers) in enumerate(questions)
    }
    predictions = _near_misses(questions)
    na_probs = {qid: round(rng.random(), 2) for qid in golds}  # two decimals: many ties, as real files have
    for threshold in (1.0, 0.5):
        ours = squad_v2_scores(predictions, golds, na_probs=na_probs, na_prob_threshold=threshold)
        ref = ref_v2(golds, predictions, na_probs, threshold)
        for key, value in ref.items():
            assert ours[key] == pytest.approx(value, abs=1e-9), key
