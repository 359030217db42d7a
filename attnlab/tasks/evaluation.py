"""Scoring a task model on labelled examples: model outputs -> the task's metrics, in percent.

`TaskEvaluator` collects the model's outputs on the dev features (in order) and scores them by kind:
extractive QA through `attnlab.tasks.qa_postprocess` and the SQuAD scripts' EM/F1, token classification
by merging each sentence's windows (`attnlab.tasks.ner_alignment`) and seqeval's entity F1, GLUE tasks by
their metric table, other classification by accuracy, regression by correlations. Every score is put on
one scale, percent (`attnlab.metrics.scale`), before anything prints, logs or compares it.
`evaluate_directory` does the same for a saved model directory.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab import metrics as M
from attnlab.accel import optimize
from attnlab.atomic import write_json_atomic
from attnlab.io import load
from attnlab.limits import check_max_length
from attnlab.tasks.feature_builder import FeatureBuilder, TaskFeatures, batches_of
from attnlab.tasks.features import Feature, pad_id_of
from attnlab.tasks.ner_alignment import merge_window_predictions
from attnlab.tasks.qa_postprocess import QAWindow, null_odds_dict, postprocess_predictions, predictions_dict
from attnlab.tasks.registry import GLUE_SCORED, TaskSpec, data_labels, get_task, task_labels
from attnlab.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)


def metric_value(metrics: dict[str, float], name: str) -> float:
    """``metrics[eval_NAME]`` or ``metrics[NAME]`` (NaN when neither is there)."""
    return float(metrics.get(f"eval_{name}", metrics.get(name, math.nan)))


class TaskEvaluator:
    """Turns model outputs on the dev features (in order) into the task's metrics (percent).

    Use as the Trainer's streaming ``metric_fn`` (``update(output, batch)`` / ``compute()`` / ``reset()``)
    or on its own (`evaluate_features`). ``on_result(metrics)`` is called after each ``compute`` (the
    best-epoch keeper hooks in there).
    """

    def __init__(
        self,
        spec: TaskSpec,
        features: Sequence[Feature],
        examples: Sequence[Any],
        labels: Sequence[str] | None,
        regression: bool = False,
        on_result: Callable[[dict[str, float]], None] | None = None,
        null_threshold: float = 0.0,
    ) -> None:
        self.spec = spec
        self.features = list(features)
        self.examples = list(examples)
        self.labels = list(labels) if labels else None
        self.regression = regression or spec.kind == "regression"
        self.on_result = on_result
        self.null_threshold = null_threshold
        self.last_predictions: Any = None
        self.reset()

    def reset(self) -> None:
        self._outputs: list[dict[str, np.ndarray]] = []

    def update(self, output: Any, batch: Any) -> None:
        keys = ("start_logits", "end_logits") if self.spec.kind == "qa" else ("logits",)
        self._outputs.append({k: getattr(output, k).detach().float().cpu().numpy() for k in keys})

    def _stack(self, key: str) -> list[np.ndarray]:
        rows: list[np.ndarray] = []
        for out in self._outputs:
            rows.extend(out[key])
        if len(rows) != len(self.features):
            raise RuntimeError(
                f"TaskEvaluator: {len(rows)} outputs for {len(self.features)} features; the evaluation data "
                "must be the evaluator's features, in order"
            )
        return rows

    def compute(self) -> dict[str, float]:
        metrics, self.last_predictions = score(self)
        if self.on_result is not None:
            self.on_result(metrics)
        return metrics

    def write_predictions(self, directory: str | os.PathLike) -> list[Path]:
        """Extractive QA: write the last `compute`'s answers as the official scripts read them,
        ``predictions.json`` ({id: text}) and, for SQuAD 2.0, ``null_odds.json`` ({id: null score minus the
        best non-null score}). A question that got no window (counted in feature building) is unanswered."""
        if self.spec.kind != "qa" or self.last_predictions is None:
            raise ValueError(f"write_predictions: needs a computed QA evaluation, task is {self.spec.name!r}")
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        texts = predictions_dict(self.last_predictions)
        write_json_atomic({ex.id: texts.get(ex.id, "") for ex in self.examples}, out / "predictions.json")
        written = [out / "predictions.json"]
        if self.spec.version_2:
            odds = null_odds_dict(self.last_predictions)
            write_json_atomic({ex.id: odds.get(ex.id, 0.0) for ex in self.examples}, out / "null_odds.json")
            written.append(out / "null_odds.json")
        return written


def score(ev: TaskEvaluator) -> tuple[dict[str, float], Any]:
    """(metrics in percent, predictions) from an evaluator's collected outputs."""
    if ev.spec.kind == "qa":
        return _score_qa(ev)
    if ev.spec.kind == "token":
        return _score_tokens(ev)
    return _score_sequences(ev)


def _score_qa(ev: TaskEvaluator) -> tuple[dict[str, float], Any]:
    """SQuAD's EM and F1 (already percent, as the official scripts give them)."""
    windows = []
    for f, s, e in zip(ev.features, ev._stack("start_logits"), ev._stack("end_logits")):
        n = len(f.inputs["input_ids"])  # drop the padding columns
        windows.append(QAWindow(f.example_id, s[:n], e[:n], f.offsets, f.cls_index))
    # A question skipped in feature building (counted there) has no window: it scores 0 as unanswered.
    seen = {w.example_id for w in windows}
    contexts = {ex.id: ex.context for ex in ev.examples if ex.id in seen}
    preds = postprocess_predictions(
        contexts, windows, version_2=ev.spec.version_2, null_threshold=ev.null_threshold
    )
    texts = predictions_dict(preds)
    if not ev.spec.version_2:
        out = M.squad_v1_scores(texts, ev.examples)
        return {"exact_match": out["exact_match"], "f1": out["f1"]}, preds
    na_probs = {ex.id: 0.0 for ex in ev.examples} | null_odds_dict(preds)
    out = M.squad_v2_scores(texts, ev.examples, na_probs)
    result = {"exact": out["exact"], "f1": out["f1"]}
    result.update({k: out[k] for k in ("best_exact", "best_f1", "best_f1_thresh") if k in out})
    return result, preds


def _score_tokens(ev: TaskEvaluator) -> tuple[dict[str, float], Any]:
    """seqeval's entity precision, recall and F1 over each sentence's merged windows."""
    assert ev.labels is not None
    grouped: dict[int, list[tuple[list, list]]] = {}
    for f, lg in zip(ev.features, ev._stack("logits")):
        n = len(f.inputs["input_ids"])
        grouped.setdefault(f.example_index, []).append((f.word_ids, lg[:n].argmax(-1).tolist()))
    y_true, y_pred = [], []
    for i, ex in enumerate(ev.examples):
        ids = merge_window_predictions(grouped.get(i, []), len(ex.words), default=0)
        y_true.append(list(ex.tags))
        y_pred.append(repair_iob2([ev.labels[k] for k in ids]))
    out = M.ner_metrics(y_true, y_pred)
    return M.fractions_to_percent({k: out[k] for k in ("precision", "recall", "f1", "accuracy")}), y_pred


def _score_sequences(ev: TaskEvaluator) -> tuple[dict[str, float], Any]:
    """Classification, regression and multiple choice: GLUE's table for GLUE tasks, else accuracy or the
    correlations (0 when a constant prediction leaves them undefined: an untrained model)."""
    logits = ev._stack("logits")
    if ev.regression:
        preds: list = [float(lg.reshape(-1)[0]) for lg in logits]
        gold: list = [float(ex.label) for ex in ev.examples]
    else:
        preds = [int(np.argmax(lg)) for lg in logits]
        if ev.spec.kind == "multiple_choice":
            gold = [int(ex.label) for ex in ev.examples]
        else:
            assert ev.labels is not None
            index = {name: i for i, name in enumerate(ev.labels)}
            gold = [index[str(ex.label)] for ex in ev.examples]
    if ev.spec.name in GLUE_SCORED:
        try:
            return M.fractions_to_percent(M.glue_metrics(ev.spec.name, preds, gold)), preds
        except ValueError as e:
            if not ev.regression:
                raise
            logger.warning("%s: %s; reporting 0 correlation", ev.spec.name, e)
            return {"pearson": 0.0, "spearman": 0.0, "score": 0.0}, preds
    if ev.regression:
        try:
            correlations = {"pearson": M.pearson(preds, gold), "spearman": M.spearman(preds, gold)}
        except ValueError:
            return {"pearson": 0.0, "spearman": 0.0}, preds
        return M.fractions_to_percent(correlations), preds
    return M.fractions_to_percent({"accuracy": M.accuracy(preds, gold)}), preds


def repair_iob2(tags: list[str]) -> list[str]:
    """An ``I-X`` that does not continue an ``X`` entity becomes ``B-X`` (predictions can be ill-formed)."""
    out, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


@torch.no_grad()
def evaluate_features(
    model: nn.Module,
    evaluator: TaskEvaluator,
    batch_size: int = 32,
    pad_id: int = 0,
    device: str = "cpu",
    features: FeatureBuilder | None = None,
) -> dict[str, float]:
    """Run ``model`` over the evaluator's features (in order, batched by ``features``) and score them."""
    was_training = model.training
    model.eval().to(device)
    evaluator.reset()
    try:
        for batch in batches_of(features or TaskFeatures(), evaluator.features, batch_size, pad_id):
            batch = {
                k: v.to(device) for k, v in batch.items() if k not in ("start_positions", "end_positions")
            }
            batch.pop("labels", None)
            evaluator.update(model(**batch), batch)
    finally:
        model.train(was_training)
    return evaluator.compute()


def evaluate_directory(
    task: str | TaskSpec,
    model_dir: str | os.PathLike,
    examples: Sequence[Any],
    max_length: int | None = None,
    stride: int = 128,
    max_query_length: int = 64,
    batch_size: int = 64,
    device: str = "cpu",
    output_dir: str | os.PathLike | None = None,
    knowledge: FeatureBuilder | None = None,
) -> dict[str, float]:
    """Score a fine-tuned model directory (attnlab or HF task checkpoint) on labelled examples.

    ``knowledge``: the feature builder of a model fine-tuned with one, e.g. a `KnowledgeInjector`
    (K-BERT, ``--kg``); None: BERT's features.

    With ``output_dir``: ``eval_results.json`` (the metrics) and, for QA, the official ``predictions.json``
    (+ ``null_odds.json`` for SQuAD 2.0, whose metrics include the dev-tuned ``best_f1_thresh``)."""
    spec = get_task(task) if isinstance(task, str) else task
    model = optimize(load(model_dir, device=device))  # the CPU inference paths, as predict's (accel)
    tokenizer = load_tokenizer(model_dir)
    labels = data_labels(spec, getattr(model, "options", {}).get("labels"))
    regression = getattr(model, "options", {}).get("num_labels") == 1
    if spec.kind in ("classification", "token") and not labels and not regression:
        labels = task_labels(spec, examples)
    config = model.config
    check_max_length(max_length, config.max_sequence_length, "--max-length", "the model")
    builder = knowledge or TaskFeatures()
    feats, _ = builder.build(
        spec, tokenizer, examples, labels, training=False, stride=stride, max_query_length=max_query_length,
        max_length=min(max_length or (384 if spec.kind == "qa" else 128), config.max_sequence_length),
        with_token_types=config.type_vocab_size > 0, regression=regression,
    )  # fmt: skip
    evaluator = TaskEvaluator(spec, feats, examples, labels, regression)
    metrics = evaluate_features(
        model, evaluator, batch_size, pad_id_of(tokenizer, config.pad_token_id), device, builder
    )
    if output_dir is not None:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        results = {"task": spec.name, "examples": len(examples), **metrics}
        write_json_atomic(results, out / "eval_results.json")
        if spec.kind == "qa":
            evaluator.write_predictions(output_dir)
    return metrics


__all__ = [
    "TaskEvaluator",
    "evaluate_directory",
    "evaluate_features",
    "metric_value",
    "repair_iob2",
    "score",
]
