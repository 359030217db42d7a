"""One scale for every score a fine-tuning reports: percent (0-100), as the field reports GLUE (accuracy, F1,
Matthews and Spearman correlations x 100), SQuAD's EM/F1 and CoNLL-2003's F1.

The metric functions keep their sources' scales (`classification` and `ner` fractions as scikit-learn and
seqeval return them, `squad` percent as the official script does), so that each is checked against its
reference; task evaluation (`attnlab.tasks.evaluation`) puts every score on this one scale before it is
printed, logged, kept in ``results.json`` / ``eval_results.json`` or used to choose the best model.
"""

from __future__ import annotations

from collections.abc import Mapping

# Keys that are not scores: SQuAD 2.0's dev-tuned null threshold is a logit difference.
NOT_SCORES = frozenset({"best_f1_thresh"})


def fractions_to_percent(scores: Mapping[str, float]) -> dict[str, float]:
    """``scores`` given as fractions (0-1, correlations -1..1), as percent; non-score keys unchanged."""
    return {k: v if k in NOT_SCORES else 100.0 * float(v) for k, v in scores.items()}


def score_label(name: str) -> str:
    """How a score is named where it is printed: ``"f1 (%)"``; a key that is no score stays as it is."""
    name = name.removeprefix("eval_")
    return name if name in NOT_SCORES or name == "loss" else f"{name} (%)"


__all__ = ["NOT_SCORES", "fractions_to_percent", "score_label"]
