"""GLUE metrics against values computed by hand."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.metrics.classification import (
    accuracy,
    canonical_glue_task,
    f1,
    glue_metrics,
    matthews_corrcoef,
    pearson,
    spearman,
)


def test_mcc_by_hand():
    # TP=2 (0, 4), FP=1 (1), TN=2 (2, 3), FN=1 (5):
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (4 - 1) / sqrt(3*3*3*3) = 1/3
    assert matthews_corrcoef([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]) == pytest.approx(1 / 3)
    assert matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 0], [1, 0, 1]) == pytest.approx(-1.0)
    assert matthews_corrcoef([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0  # undefined → 0 (constant prediction)


def test_multiclass_mcc_by_hand():
    # Gorodkin's R_K: c=3 correct of s=4; gold counts t=(2,1,1), predicted counts p=(2,0,2)
    # (c*s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2)) = (12 - 6) / sqrt(8 * 10)
    assert matthews_corrcoef([0, 2, 2, 0], [0, 1, 2, 0]) == pytest.approx(6 / math.sqrt(80))


def test_f1_and_accuracy_by_hand():
    preds, labels = [1, 1, 1, 0, 0], [1, 0, 1, 1, 0]
    # TP=2, FP=1, FN=1: P = R = 2/3, F1 = 2/3
    assert f1(preds, labels) == pytest.approx(2 / 3)
    assert accuracy(preds, labels) == pytest.approx(3 / 5)
    assert f1([0, 0], [1, 0]) == 0.0


def test_pearson_spearman_by_hand():
    # x - mean = (-1, 0, 1), y - mean = (-1, 1, 0): cov 1, variances 2 and 2 → r = 1/2
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    # ties get average ranks: x ranks (1, 2.5, 2.5, 4), y ranks (1, 2, 3, 4);
    # centred (-1.5, 0, 0, 1.5) and (-1.5, -.5, .5, 1.5): 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))
    with pytest.raises(ValueError, match="constant"):
        pearson([1, 1, 1], [1, 2, 3])


def test_glue_dispatch():
    assert glue_metrics("CoLA", [1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]) == pytest.approx(
        {"mcc": 1 / 3, "score": 1 / 3}
    )
    mrpc = glue_metrics("MRPC", [1, 1, 1, 0, 0], [1, 0, 1, 1, 0])
    assert mrpc == pytest.approx({"f1": 2 / 3, "accuracy": 0.6, "score": (2 / 3 + 0.6) / 2})
    # label names work too: the positive class is "1"
    assert glue_metrics("qqp", ["1", "1", "1", "0", "0"], ["1", "0", "1", "1", "0"])["f1"] == pytest.approx(
        2 / 3
    )
    stsb = glue_metrics("STS-B", [1, 2, 3.5], [1, 3, 2])
    assert stsb["spearman"] == pytest.approx(0.5) and set(stsb) == {"pearson", "spearman", "score"}
    for task in ("sst2", "mnli", "mnli-mm", "qnli", "rte", "wnli"):
        assert glue_metrics(task, ["a", "b", "a"], ["a", "a", "a"]) == pytest.approx(
            {"accuracy": 2 / 3, "score": 2 / 3}
        )


def test_bad_input():
    with pytest.raises(ValueError, match="equally long"):
        accuracy([1, 0], [1])
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_metrics("squad", [1], [1])
    assert canonical_glue_task("MNLI-MM") == "mnli-mm" and canonical_glue_task("STS-B") == "stsb"
    with pytest.raises(ValueError, match="predictions are numbers but labels are label names"):
        glue_metrics("rte", [0, 1], ["entailment", "not_entailment"])


@settings(deadline=None)  # first example may pay a lazy import; shared CPUs
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=40))
def test_binary_metrics_match_confusion_matrix_formulas(pairs):
    preds, labels = [p for p, _ in pairs], [y for _, y in pairs]
    tp = sum(p == 1 and y == 1 for p, y in pairs)
    tn = sum(p == 0 and y == 0 for p, y in pairs)
    fp = sum(p == 1 and y == 0 for p, y in pairs)
    fn = sum(p == 0 and y == 1 for p, y in pairs)
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    expected_mcc = (tp * tn - fp * fn) / denominator if denominator else 0.0
    assert matthews_corrcoef(preds, labels) == pytest.approx(expected_mcc, abs=1e-12)
    expected_f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    assert f1(preds, labels) == pytest.approx(expected_f1)
    assert accuracy(preds, labels) == pytest.approx((tp + tn) / len(pairs))
