"""GLUE metrics as the benchmark reports them (Wang et al., 2018, Table 1).

CoLA: Matthews correlation; MRPC and QQP: F1 of the positive class ("1") and accuracy; STS-B:
Pearson and Spearman correlation; every other task: accuracy. A task's GLUE score is the mean of its
metrics (the leaderboard's convention), returned as ``"score"``. Values are fractions in [0, 1]
(correlations in [-1, 1]); multiply by 100 for the leaderboard's numbers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

_ALIASES = {
    "cola": "cola",
    "sst2": "sst2",
    "mrpc": "mrpc",
    "stsb": "stsb",
    "sts": "stsb",
    "qqp": "qqp",
    "mnli": "mnli",
    "mnlim": "mnli",
    "mnlimatched": "mnli",
    "mnlimm": "mnli-mm",
    "mnlimismatched": "mnli-mm",
    "qnli": "qnli",
    "rte": "rte",
    "wnli": "wnli",
    "ax": "ax",
    "diagnostic": "ax",
}

GLUE_TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
    "qqp": ("f1", "accuracy"),
    "mnli": ("accuracy",),
    "mnli-mm": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
    # The diagnostic set is scored with R3, a 3-class Matthews correlation (GLUE paper, §4).
    "ax": ("mcc",),
}


def canonical_glue_task(name: str) -> str:
    """Canonical task name: ``"SST-2"`` → ``"sst2"``, ``"MNLI-mm"`` → ``"mnli-mm"``; unknown names raise."""
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    if key not in _ALIASES:
        raise ValueError(f"unknown GLUE task {name!r}; expected one of {sorted(GLUE_TASK_METRICS)}")
    return _ALIASES[key]


def _pair(predictions: Sequence, labels: Sequence) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(list(predictions)), np.asarray(list(labels))
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"predictions and labels must be 1-D and equally long, got {p.shape} and {y.shape}")
    if p.size == 0:
        raise ValueError("cannot score an empty set of predictions")
    p_names, y_names = p.dtype.kind in "US", y.dtype.kind in "US"
    if p_names != y_names:
        kinds = {True: "label names", False: "numbers"}
        raise ValueError(
            f"predictions are {kinds[p_names]} but labels are {kinds[y_names]}: "
            "map both to ids (GlueTask.label_to_id) first"
        )
    return p, y


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    """Fraction of predictions equal to their label."""
    p, y = _pair(predictions, labels)
    return float(np.mean(p == y))


def f1(predictions: Sequence, labels: Sequence, positive=1) -> float:
    """Binary F1 of the ``positive`` class, 2PR/(P+R); 0.0 when there are no true positives."""
    from sklearn.metrics import f1_score

    p, y = _pair(predictions, labels)
    return float(f1_score(y, p, pos_label=positive, average="binary", zero_division=0.0))


def matthews_corrcoef(predictions: Sequence, labels: Sequence) -> float:
    """Matthews correlation (multi-class form for more than two classes); 0.0 when undefined."""
    from sklearn.metrics import matthews_corrcoef as mcc

    p, y = _pair(predictions, labels)
    with warnings.catch_warnings():
        # one class only: sklearn warns about the confusion matrix shape and returns 0.0, which we keep
        warnings.simplefilter("ignore", UserWarning)
        return float(mcc(y, p))


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson correlation; raises when either side is constant (the correlation is undefined)."""
    from scipy.stats import pearsonr

    p, y = _pair(predictions, labels)
    _check_not_constant(p, y)
    return float(pearsonr(p.astype(float), y.astype(float))[0])


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman rank correlation (ties get their average rank)."""
    from scipy.stats import spearmanr

    p, y = _pair(predictions, labels)
    _check_not_constant(p, y)
    return float(spearmanr(p.astype(float), y.astype(float))[0])


def _check_not_constant(p: np.ndarray, y: np.ndarray) -> None:
    if p.size < 2 or np.all(p == p[0]) or np.all(y == y[0]):
        raise ValueError("correlation is undefined for fewer than two points or a constant input")


def glue_metrics(task: str, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """The metrics GLUE reports for ``task``, plus ``"score"``: their mean.

    Args:
        task: a GLUE task name (``"cola"``, ``"SST-2"``, ``"mnli-mm"``, ...).
        predictions: predicted class ids or label names (floats for STS-B), shape (number of examples,).
        labels: the gold labels, same kind and length.

    For MRPC and QQP the positive class for F1 is ``1`` (or the label name ``"1"`` when given names).
    """
    name = canonical_glue_task(task)
    p, y = _pair(predictions, labels)
    out: dict[str, float] = {}
    for metric in GLUE_TASK_METRICS[name]:
        if metric == "accuracy":
            out[metric] = accuracy(p, y)
        elif metric == "f1":
            positive = "1" if y.dtype.kind in "US" else 1
            out[metric] = f1(p, y, positive=positive)
        elif metric == "mcc":
            out[metric] = matthews_corrcoef(p, y)
        elif metric == "pearson":
            out[metric] = pearson(p, y)
        elif metric == "spearman":
            out[metric] = spearman(p, y)
    out["score"] = float(sum(out.values()) / len(out))
    assert not math.isnan(out["score"])
    return out
