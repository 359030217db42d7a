"""SQuAD EM / F1 (v1.1 and v2.0) against hand-computed values and the real v1.1 dev file."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import DATA, require

from attnlab.metrics.squad import (
    exact_match,
    f1_score,
    normalize_answer,
    squad_v1_scores,
    squad_v2_scores,
)
from attnlab.tasks.loaders.squad import load_squad

SQUAD_DEV = DATA / "squad" / "v1.1" / "dev-v1.1.json"
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "squad"


@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The  Denver Broncos!", "denver broncos"),
        ("an apple a day", "apple day"),
        ("theory of the atheist", "theory of atheist"),  # only whole-word articles go
        ("A.B.C.", "abc"),  # punctuation goes before the article check: "a" glued to "bc" stays
        ("Levi's Stadium", "levis stadium"),
        ("24\u201310", "24\u201310"),  # the en dash is not ASCII punctuation: kept, as the official script
        ("  \tthe\n", ""),
    ],
)
def test_normalisation(text, normalised):
    assert normalize_answer(text) == normalised


def test_f1_by_hand():
    assert f1_score("Denver", "Denver Broncos") == pytest.approx(2 / 3)  # P = 1, R = 1/2
    # overlap 1: P = 1/3, R = 1/2 → 2 * (1/6) / (5/6) = 0.4
    assert f1_score("Broncos defeated Panthers", "Denver Broncos") == pytest.approx(0.4)
    assert f1_score("broncos broncos", "Broncos") == pytest.approx(2 / 3)  # multiset overlap is 1
    assert f1_score("the Denver Broncos.", "Denver Broncos") == 1.0
    assert exact_match("the Denver Broncos.", "Denver Broncos") == 1.0
    # empty sides: v2.0 gives 1 iff both are empty, v1.1 gives 0 without overlap
    assert f1_score("", "the") == 1.0 and f1_score("", "the", version="1.1") == 0.0
    assert f1_score("", "Paris") == 0.0


def test_v1_on_fixture_missing_predictions_count_zero():
    exs = load_squad(FIX / "v1.json")
    scores = squad_v1_scores({"q1": "Denver Broncos"}, exs)
    assert scores == {"exact_match": 50.0, "f1": 50.0, "total": 2, "missing": 1}


@pytest.mark.data
def test_gold_answers_as_predictions_score_100():
    require(SQUAD_DEV)
    dataset = json.loads(SQUAD_DEV.read_text(encoding="utf-8"))
    exs = load_squad(SQUAD_DEV)
    predictions = {e.id: e.answers[0][0] for e in exs}
    assert squad_v1_scores(predictions, dataset) == {
        "exact_match": 100.0, "f1": 100.0, "total": 10_570, "missing": 0
    }  # fmt: skip
    v2 = squad_v2_scores(predictions, exs)
    assert v2["exact"] == v2["f1"] == v2["HasAns_exact"] == 100.0 and v2["total"] == 10_570


@pytest.mark.data
def test_perturbed_predictions_score_as_the_official_algorithm():
    require(SQUAD_DEV)
    exs = load_squad(SQUAD_DEV)
    predictions = {e.id: e.answers[0][0] for e in exs}
    golds = {e.id: [a for a, _ in e.answers] for e in exs}
    assert golds["56be4db0acb8001400a502ee"] == [
        "Santa Clara, California",
        "Levi's Stadium",
        "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California.",
    ]
    perturbed = {
        # drop a word: gold "Denver Broncos" → P = 1, R = 1/2: EM 0, F1 2/3
        "56be4db0acb8001400a502ec": ("Denver", 0, 2 / 3),
        # add an article and punctuation: normalises to the gold
        "56be4db0acb8001400a502ed": ("the Carolina Panthers.", 1, 1),
        # "levis stadium in santa clara" (5 tokens) against the three golds:
        #   "santa clara california": overlap 2 → P 2/5, R 2/3 → F1 1/2
        #   "levis stadium": overlap 2 → P 2/5, R 1 → 4/7
        #   "levis stadium in san francisco bay area at santa clara california" (11 tokens, "the" dropped):
        #   overlap 5 → P 1, R 5/11 → F1 10/16 — the maximum
        "56be4db0acb8001400a502ee": ("Levi's Stadium in Santa Clara", 0, 10 / 16),
        # case only
        "56be4db0acb8001400a502f0": ("Gold", 1, 1),
        # golds '"golden anniversary"', 'gold-themed' ("goldthemed"), '"golden anniversary':
        # 2/3 from the first (P 1, R 1/2)
        "56be8e613aeaaa14008c90d1": ("golden", 0, 2 / 3),
        # wrong answer
        "56be8e613aeaaa14008c90d2": ("Carolina Panthers", 0, 0),
    }
    for qid, (text, _, _) in perturbed.items():
        predictions[qid] = text
    n = 10_570
    expected_em = 100 * (n - len(perturbed) + sum(em for _, em, _ in perturbed.values())) / n
    expected_f1 = 100 * (n - len(perturbed) + sum(f1 for _, _, f1 in perturbed.values())) / n
    scores = squad_v1_scores(predictions, exs)
    assert scores["exact_match"] == pytest.approx(expected_em, abs=1e-12)
    assert scores["f1"] == pytest.approx(expected_f1, abs=1e-12)


# ---- v2.0 ---------------------------------------------------------------------------------------------

GOLD_V2 = {
    "q1": ["Paris"],  # answerable
    "q2": ["blue whale"],  # answerable
    "q3": [],  # unanswerable
    "q4": [],  # unanswerable
    "q5": ["1990"],  # answerable
}
PRED_V2 = {"q1": "Paris", "q2": "whale", "q3": "the moon", "q4": "", "q5": "1989"}
NA_V2 = {"q1": 0.1, "q2": 0.4, "q3": 0.7, "q4": 0.2, "q5": 0.9}


def test_v2_hand_example_breakdown():
    s = squad_v2_scores(PRED_V2, GOLD_V2)
    # raw EM: 1, 0, 0, 1 (empty for unanswerable), 0; raw F1: 1, 2/3, 0, 1, 0
    assert s["exact"] == pytest.approx(40.0) and s["f1"] == pytest.approx(100 * (8 / 3) / 5)
    assert s["HasAns_exact"] == pytest.approx(100 / 3) and s["HasAns_f1"] == pytest.approx(100 * (5 / 3) / 3)
    assert s["NoAns_exact"] == s["NoAns_f1"] == 50.0
    assert s["HasAns_total"] == 3 and s["NoAns_total"] == 2 and s["total"] == 5
    assert "best_exact" not in s  # as the official script: only with an na_prob file


def test_v2_best_threshold_hand_example():
    s = squad_v2_scores(PRED_V2, GOLD_V2, na_probs=NA_V2)
    # sweep from "all null" (2 correct: q3, q4) in na_prob order q1 .1, q4 .2, q2 .4, q3 .7, q5 .9:
    # EM: +1 (q1) → 3 at .1; +0 (q4: empty prediction); +0 (q2); -1 (q3 answers "the moon"); +0 → best 3
    assert s["best_exact"] == pytest.approx(60.0) and s["best_exact_thresh"] == 0.1
    # F1: +1 → 3 at .1; +0; +2/3 → 11/3 at .4; -1; +0 → best 11/3
    assert s["best_f1"] == pytest.approx(100 * (11 / 3) / 5) and s["best_f1_thresh"] == 0.4
    # applying the found threshold reproduces the best F1 (q3, q5 predicted null)
    at = squad_v2_scores(PRED_V2, GOLD_V2, na_probs=NA_V2, na_prob_threshold=0.4)
    assert at["f1"] == pytest.approx(s["best_f1"]) and at["exact"] == pytest.approx(60.0)
    assert at["NoAns_exact"] == 100.0 and at["HasAns_f1"] == pytest.approx(100 * (5 / 3) / 3)


def test_v2_best_threshold_all_null_is_best():
    s = squad_v2_scores({"a": "x", "b": "y"}, {"a": [], "b": ["z"]}, na_probs={"a": 0.5, "b": 0.6})
    assert s["best_exact"] == 50.0 and s["best_exact_thresh"] == 0.0  # never improved on "all null"


@settings(deadline=None)  # first example may pay a lazy import; shared CPUs
@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from(["", "a b", "c"]), st.sampled_from(["a b", "c d", "b"])),
        min_size=1,
        max_size=8,
    ),
    st.randoms(use_true_random=False),
)
def test_best_threshold_is_the_best_reachable_threshold(rows, rnd):
    gold = {f"q{i}": ([g] if has else []) for i, (has, _, g) in enumerate(rows)}
    preds = {f"q{i}": p for i, (_, p, _) in enumerate(rows)}
    probs = rnd.sample(range(1000), len(rows))  # distinct na_probs: every prefix is a threshold
    na = {f"q{i}": probs[i] / 1000 for i in range(len(rows))}
    s = squad_v2_scores(preds, gold, na_probs=na)
    candidates = [-1.0] + sorted(na.values())
    for key in ("exact", "f1"):
        reachable = max(
            squad_v2_scores(preds, gold, na_probs=na, na_prob_threshold=t)[key] for t in candidates
        )
        assert s[f"best_{key}"] == pytest.approx(reachable)
