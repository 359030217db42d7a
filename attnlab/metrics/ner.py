"""Entity-level NER precision / recall / F1 with seqeval, as CoNLL-2003 results are reported.

An entity is a maximal span ``B-X I-X ... I-X`` (IOB2). The default (``mode=None``) is seqeval's
conlleval-compatible lenient decoding, which also starts an entity at an ``I-X`` that follows ``O`` or a
different type; ``mode="strict"`` decodes with the IOB2 scheme only, so such ill-formed spans are not
entities (and a prediction needs the right ``B-`` to score). Scores are micro-averaged over entities,
per-type scores are in ``"per_type"``.
"""

from __future__ import annotations

from collections.abc import Sequence

_MODES = (None, "strict")


def _check(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]]) -> tuple[list, list]:
    y_true, y_pred = [list(s) for s in y_true], [list(s) for s in y_pred]
    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold sentences but {len(y_pred)} predicted ones")
    for i, (t, p) in enumerate(zip(y_true, y_pred)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted tags")
        for tag in (*t, *p):
            if not isinstance(tag, str) or not (tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)):
                raise ValueError(f"sentence {i}: tag {tag!r} is not 'O', 'B-TYPE' or 'I-TYPE' (IOB2)")
    return y_true, y_pred


def ner_metrics(
    y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], mode: str | None = None
) -> dict:
    """Entity-level micro ``precision``, ``recall``, ``f1``, token ``accuracy``, and ``per_type``.

    Args:
        y_true: gold IOB2 tags, one list per sentence.
        y_pred: predicted tags, the same shape.
        mode: ``None`` (conlleval-compatible, the default) or ``"strict"`` (IOB2 scheme).

    ``per_type`` maps each entity type to ``{"precision", "recall", "f1", "support"}``.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    y_true, y_pred = _check(y_true, y_pred)
    kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
    report = classification_report(y_true, y_pred, output_dict=True, zero_division=0, **kwargs)
    per_type = {
        name: {"precision": float(v["precision"]), "recall": float(v["recall"]), "f1": float(v["f1-score"]),
               "support": int(v["support"])}
        for name, v in report.items()
        if not name.endswith(" avg")
    }  # fmt: skip
    return {
        "precision": float(precision_score(y_true, y_pred, zero_division=0, **kwargs)),
        "recall": float(recall_score(y_true, y_pred, zero_division=0, **kwargs)),
        "f1": float(f1_score(y_true, y_pred, zero_division=0, **kwargs)),
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "per_type": per_type,
    }
