"""BERT's fine-tuning recipe over the shared `attnlab.train.Trainer`.

The recipe (Devlin et al. 2019, section 4 and appendix A.3; the lecture's "dropout 0.1, 2-4 epochs,
lr one of 5e-5, 3e-5, 2e-5"): AdamW (weight decay 0.01, never on biases and LayerNorm), 10% linear
warm-up then linear decay, batch 32, dropout 0.1 on the classifier, 2 to 4 epochs. Evaluation on dev after
every epoch; the best epoch's model is kept (``<run>/best``: config.json, model.safetensors,
tokenizer.json). An optional sweep over learning rates (and seeds) keeps the learning rate with the best
median dev score (BERT: "we selected the best fine-tuning learning rate on the Dev set"), and reports
every run with its seed.

A task is a `TaskSpec`: how to read its splits from a directory, which head it needs, how examples become
features (`attnlab.tasks.features`), and how predictions are scored (`attnlab.metrics`). `TASKS` holds the
GLUE tasks, CoNLL-2003, SQuAD v1.1 / v2.0, SWAG and ``generic`` (CSV / TSV / JSON-lines tables).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab.atomic import write_json_atomic
from attnlab.limits import check_max_length
from attnlab.tasks.examples import TokenExample
from attnlab.tasks.features import (
    Feature,
    FeatureDataset,
    FeatureReport,
    batches,
    classification_features,
    collate,
    multiple_choice_features,
    pad_id_of,
    qa_features,
    token_classification_features,
)
from attnlab.train.checkpoint import atomic_directory
from attnlab.train.distributed import current_context
from attnlab.train.run_dir import prepare_run_directory

logger = logging.getLogger(__name__)

LEARNING_RATES = (5e-5, 3e-5, 2e-5)  # BERT appendix A.3 (Adam lr for fine-tuning)
# Narrower than BERT-base: the grid google-research/bert used for its 24 smaller BERTs (Turc et al. 2019,
# "Well-Read Students Learn Better"; 4 epochs). BERT-base's 3e-5 barely moves a 4-layer, 256-wide model in a
# CPU budget (issue 11: SST-2 72.6 from books pre-training against 73.7 from random initialisation at 3e-5).
SMALL_MODEL_LEARNING_RATES = (3e-4, 1e-4, 5e-5, 3e-5)
SMALL_MODEL_WIDTH = 768  # hidden sizes below BERT-base's take the small grid and its default


def default_learning_rates(config: Any, sweep: bool = False) -> tuple[float, ...]:
    """The learning rate(s) for a model of ``config`` (an encoder config with ``hidden_size``): BERT's 3e-5
    (sweep: 5e-5, 3e-5, 2e-5) from BERT-base's width up; below it 1e-4 (sweep: the small BERTs' grid)."""
    small = getattr(config, "hidden_size", SMALL_MODEL_WIDTH) < SMALL_MODEL_WIDTH
    if sweep:
        return SMALL_MODEL_LEARNING_RATES if small else LEARNING_RATES
    return (1e-4,) if small else (3e-5,)


ENCODER_DROPOUT = 0.1  # BERT: "a dropout probability of 0.1 on all layers", kept for fine-tuning

KINDS = ("classification", "regression", "token", "qa", "multiple_choice")
ARCHITECTURE_OF_KIND = {
    "classification": "EncoderForSequenceClassification",
    "regression": "EncoderForSequenceClassification",
    "token": "EncoderForTokenClassification",
    "qa": "EncoderForQuestionAnswering",
    "multiple_choice": "EncoderForMultipleChoice",
}


# ---------------------------------------------------------------------------------------------------------
# tasks


@dataclass(frozen=True)
class TaskSpec:
    """One fine-tuning task.

    ``kind`` picks the head and the features; ``labels`` are the class names (None: read from the training
    data, e.g. CoNLL tags, or regression); ``metric`` is the dev score the sweep and the best-epoch
    selection maximise; ``files`` maps split names to file-name candidates inside the task directory.
    """

    name: str
    kind: str
    labels: tuple[str, ...] | None = None
    metric: str = "accuracy"
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()
    version_2: bool = False  # SQuAD 2.0: unanswerable questions, null odds
    label_names: tuple[str, ...] | None = None  # what the model stores for ``labels`` when they are codes

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"TaskSpec.kind: expected one of {KINDS}, got {self.kind!r}")

    @property
    def architecture(self) -> str:
        return ARCHITECTURE_OF_KIND[self.kind]


def _glue_spec(name: str, metric: str) -> TaskSpec:
    from attnlab.tasks.loaders.glue import glue_task

    g = glue_task(name)
    dev = ("dev_matched.tsv",) if name == "mnli" else ("dev.tsv",)
    return TaskSpec(
        name,
        "regression" if g.is_regression else "classification",
        g.labels,
        metric,
        (("train", ("train.tsv", "train.reconstructed.tsv")), ("dev", dev), ("test", ("test.tsv",))),
        label_names=g.label_names,
    )


# Dev metric each task's best epoch and learning rate are chosen by (BERT Table 1 reports F1 for MRPC
# and QQP, Spearman for STS-B, Matthews correlation for CoLA, accuracy elsewhere).
TASKS: dict[str, TaskSpec] = {
    **{
        name: _glue_spec(name, metric)
        for name, metric in (
            ("sst2", "accuracy"),
            ("cola", "mcc"),
            ("mrpc", "f1"),
            ("stsb", "spearman"),
            ("rte", "accuracy"),
            ("wnli", "accuracy"),
            ("qnli", "accuracy"),
            ("qqp", "f1"),
            ("mnli", "accuracy"),
        )
    },
    "conll2003": TaskSpec(
        "conll2003", "token", None, "f1",
        (("train", ("train.txt", "eng.train")), ("dev", ("valid.txt", "dev.txt", "eng.testa")),
         ("test", ("test.txt", "eng.testb"))),
    ),
    "squad": TaskSpec(
        "squad", "qa", None, "f1",
        (("train", ("train-v1.1.json", "train.json")), ("dev", ("dev-v1.1.json", "dev.json"))),
    ),
    "squad2": TaskSpec(
        "squad2", "qa", None, "f1",
        (("train", ("train-v2.0.json", "train.json")), ("dev", ("dev-v2.0.json", "dev.json"))),
        version_2=True,
    ),
    "swag": TaskSpec(
        "swag", "multiple_choice", None, "accuracy",
        (("train", ("train.csv",)), ("dev", ("val.csv", "dev.csv")), ("test", ("test.csv",))),
    ),
    # K-BERT's data sets (attnlab.knowledge.datasets): text_a/label TSV with a header; --kg injects a graph
    "kbert_ner": TaskSpec(
        "kbert_ner", "token", None, "f1",
        (("train", ("train.tsv",)), ("dev", ("dev.tsv",)), ("test", ("test.tsv",))),
    ),
    "kbert_cls": TaskSpec(
        "kbert_cls", "classification", None, "accuracy",
        (("train", ("train.tsv",)), ("dev", ("dev.tsv",)), ("test", ("test.tsv",))),
    ),
    "generic": TaskSpec(
        "generic", "classification", None, "accuracy",
        (("train", ("train.csv", "train.tsv", "train.jsonl")), ("dev", ("dev.csv", "dev.tsv", "dev.jsonl"))),
    ),
}  # fmt: skip


def get_task(name: str) -> TaskSpec:
    key = name.lower().replace("-", "")
    aliases = {"sst": "sst2", "stsb": "stsb", "sts": "stsb", "conll": "conll2003", "squadv2": "squad2"}
    key = aliases.get(key, key)
    if key not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(TASKS)}")
    return TASKS[key]


def split_path(spec: TaskSpec, data_dir: str | os.PathLike, split: str) -> Path:
    """The file of ``split`` in ``data_dir`` (the first candidate name that exists)."""
    names = dict(spec.files).get(split)
    if names is None:
        raise ValueError(f"{spec.name} has no split {split!r}; it has {[s for s, _ in spec.files]}")
    for name in names:
        path = Path(data_dir) / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{data_dir}: no {split} file for {spec.name} (looked for {', '.join(names)})")


@dataclass(frozen=True)
class GenericColumns:
    """Columns of a ``generic`` table task (`attnlab.tasks.loaders.load_table`)."""

    text_a: str = "sentence"
    text_b: str | None = None
    label: str = "label"
    regression: bool = False


def load_split(
    spec: TaskSpec, data_dir: str | os.PathLike, split: str, columns: GenericColumns | None = None
) -> list:
    """Examples of one split through the task's loader; the loader's report is logged."""
    from attnlab.tasks import loaders

    path = split_path(spec, data_dir, split)
    if spec.name in ("kbert_ner", "kbert_cls"):
        from attnlab.knowledge import datasets

        load = datasets.load_kbert_ner if spec.kind == "token" else datasets.load_kbert_classification
        examples = load(path)
    elif spec.kind in ("classification", "regression") and spec.name != "generic":
        examples = loaders.load_glue(spec.name, path, labelled=None if split == "test" else True)
    elif spec.name == "generic":
        c = columns or GenericColumns()
        examples = loaders.load_table(
            path, c.text_a, c.text_b, c.label, label_type="float" if c.regression else "str"
        )
    elif spec.kind == "token":
        examples = loaders.load_conll(path)
    elif spec.kind == "qa":
        examples = loaders.load_squad(path, require_answers=split == "train")
    else:
        examples = loaders.load_swag(path)
    logger.info("%s", examples.report.summary())
    return examples


def model_labels(spec: TaskSpec, labels: Sequence[str]) -> list[str]:
    """The class names a model stores (its ``id2label``): the data set's names where its files hold codes
    (SST-2's 0/1 -> negative/positive), else ``labels`` themselves (MNLI's classes, CoNLL's tags)."""
    if spec.label_names is not None and list(labels) == list(spec.labels or ()):
        return list(spec.label_names)
    return list(labels)


def data_labels(spec: TaskSpec, names: Sequence[str] | None) -> list[str] | None:
    """Inverse of `model_labels`: a model's class names as the data files write them (case aside: HF
    checkpoints often say NEGATIVE/POSITIVE)."""
    if names is None:
        return None
    if spec.label_names is not None and [n.lower() for n in names] == list(spec.label_names):
        return list(spec.labels or ())
    return list(names)


def task_labels(spec: TaskSpec, train_examples: Sequence[Any], regression: bool = False) -> list[str] | None:
    """Class names: the spec's, else those of the training data (CoNLL tags with "O" first, then sorted)."""
    if spec.labels is not None:
        return list(spec.labels)
    if spec.kind in ("qa", "multiple_choice") or regression or spec.kind == "regression":
        return None
    seen: set[str] = set()
    for ex in train_examples:
        if isinstance(ex, TokenExample):
            seen.update(ex.tags)
        elif ex.label is not None:
            seen.add(str(ex.label))
    if not seen:
        raise ValueError(f"{spec.name}: the training data has no labels")
    return sorted(seen, key=lambda t: (t != "O", t[2:] if t[:2] in ("B-", "I-") else t, t))


# ---------------------------------------------------------------------------------------------------------
# features and scoring per kind


def build_features(
    spec: TaskSpec,
    tokenizer: Any,
    examples: Sequence[Any],
    labels: Sequence[str] | None,
    *,
    training: bool,
    max_length: int,
    with_token_types: bool,
    stride: int = 128,
    max_query_length: int = 64,
    regression: bool = False,
) -> tuple[list[Feature], FeatureReport]:
    report = FeatureReport(spec.name)
    label_to_id = {name: i for i, name in enumerate(labels)} if labels else None
    kind = "regression" if regression else spec.kind
    if kind in ("classification", "regression"):
        feats = classification_features(
            tokenizer, examples, max_length, label_to_id, kind == "regression", with_token_types, report
        )
    elif kind == "token":
        feats = token_classification_features(
            tokenizer, examples, label_to_id, max_length, min(stride, max_length // 4), False,
            with_token_types, report,
        )  # fmt: skip
    elif kind == "qa":
        feats = qa_features(
            tokenizer, examples, max_length, stride, max_query_length, training, with_token_types, report
        )
    else:
        feats = multiple_choice_features(tokenizer, examples, max_length, with_token_types, report)
    report.log()
    return feats, report


class TaskEvaluator:
    """Turns model outputs on the dev features (in order) into the task's metrics.

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
        from attnlab.atomic import write_json_atomic
        from attnlab.tasks.qa_postprocess import null_odds_dict, predictions_dict

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
    """(metrics, predictions) from an evaluator's collected outputs."""
    from attnlab import metrics as M
    from attnlab.tasks.ner_alignment import merge_window_predictions
    from attnlab.tasks.qa_postprocess import QAWindow, postprocess_predictions, predictions_dict

    spec = ev.spec
    if spec.kind == "qa":
        starts, ends = ev._stack("start_logits"), ev._stack("end_logits")
        windows = []
        for f, s, e in zip(ev.features, starts, ends):
            n = len(f.inputs["input_ids"])  # drop the padding columns
            windows.append(QAWindow(f.example_id, s[:n], e[:n], f.offsets, f.cls_index))
        # A question skipped in feature building (counted there) has no window: it scores 0 as unanswered.
        seen = {w.example_id for w in windows}
        contexts = {ex.id: ex.context for ex in ev.examples if ex.id in seen}
        preds = postprocess_predictions(
            contexts, windows, version_2=spec.version_2, null_threshold=ev.null_threshold
        )
        texts = predictions_dict(preds)
        if spec.version_2:
            from attnlab.tasks.qa_postprocess import null_odds_dict

            na_probs = {ex.id: 0.0 for ex in ev.examples} | null_odds_dict(preds)
            out = M.squad_v2_scores(texts, ev.examples, na_probs)
            result = {"exact": out["exact"], "f1": out["f1"]}
            result.update({k: out[k] for k in ("best_exact", "best_f1", "best_f1_thresh") if k in out})
        else:
            out = M.squad_v1_scores(texts, ev.examples)
            result = {"exact_match": out["exact_match"], "f1": out["f1"]}
        return result, preds
    logits = ev._stack("logits")
    if spec.kind == "token":
        assert ev.labels is not None
        grouped: dict[int, list[tuple[list, list]]] = {}
        for f, lg in zip(ev.features, logits):
            n = len(f.inputs["input_ids"])
            grouped.setdefault(f.example_index, []).append((f.word_ids, lg[:n].argmax(-1).tolist()))
        y_true, y_pred = [], []
        for i, ex in enumerate(ev.examples):
            ids = merge_window_predictions(grouped.get(i, []), len(ex.words), default=0)
            y_true.append(list(ex.tags))
            y_pred.append(_repair_iob2([ev.labels[k] for k in ids]))
        out = M.ner_metrics(y_true, y_pred)
        return {k: out[k] for k in ("precision", "recall", "f1", "accuracy")}, y_pred
    if ev.regression:
        preds = [float(lg.reshape(-1)[0]) for lg in logits]
        gold = [float(ex.label) for ex in ev.examples]
    else:
        preds = [int(np.argmax(lg)) for lg in logits]
        if spec.kind == "multiple_choice":
            gold = [int(ex.label) for ex in ev.examples]
        else:
            assert ev.labels is not None
            index = {name: i for i, name in enumerate(ev.labels)}
            gold = [index[str(ex.label)] for ex in ev.examples]
    if spec.name in TASKS and spec.name not in ("generic", "swag", "kbert_ner", "kbert_cls"):
        try:
            return M.glue_metrics(spec.name, preds, gold), preds
        except ValueError as e:  # a constant prediction makes correlations undefined (an untrained model)
            if not ev.regression:
                raise
            logger.warning("%s: %s; reporting 0 correlation", spec.name, e)
            return {"pearson": 0.0, "spearman": 0.0, "score": 0.0}, preds
    if ev.regression:
        try:
            return {"pearson": M.pearson(preds, gold), "spearman": M.spearman(preds, gold)}, preds
        except ValueError:
            return {"pearson": 0.0, "spearman": 0.0}, preds
    return {"accuracy": M.accuracy(preds, gold)}, preds


def _repair_iob2(tags: list[str]) -> list[str]:
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
    model: nn.Module, evaluator: TaskEvaluator, batch_size: int = 32, pad_id: int = 0, device: str = "cpu"
) -> dict[str, float]:
    """Run ``model`` over the evaluator's features (in order) and score them."""
    was_training = model.training
    model.eval().to(device)
    evaluator.reset()
    try:
        for batch in batches(evaluator.features, batch_size, pad_id):
            batch = {
                k: v.to(device) for k, v in batch.items() if k not in ("start_positions", "end_positions")
            }
            batch.pop("labels", None)
            evaluator.update(model(**batch), batch)
    finally:
        model.train(was_training)
    return evaluator.compute()


# ---------------------------------------------------------------------------------------------------------
# the recipe


@dataclass
class FinetuneConfig:
    """BERT's fine-tuning hyper-parameters, plus limits for small machines."""

    learning_rates: tuple[float, ...] = (3e-5,)  # several = a sweep; BERT's set is LEARNING_RATES
    seeds: tuple[int, ...] = (0,)  # several = the median over seeds is reported (and decides the sweep)
    epochs: float = 3.0  # BERT: 2 to 4
    batch_size: int = 32
    warmup: float = 0.1  # fraction of the steps
    weight_decay: float = 0.01
    dropout: float = 0.1  # on the classifier
    # Dropout of the encoder's layers (hidden and attention) while fine-tuning; None keeps the checkpoint's.
    # BERT fine-tunes with 0.1 on all layers; a model pre-trained without dropout (the budget recipes, as in
    # Geiping & Goldstein 2023's cramming) gets it back here.
    encoder_dropout: float | None = ENCODER_DROPOUT
    # Sentence vector of classification and regression tasks: "cls", BERT's pooled [CLS]; "mean", the mean of
    # the tokens' final states (no pooler; EncoderForSequenceClassification's pooling option).
    pooling: str = "cls"
    max_length: int | None = None  # tokens per sequence; None: 384 for QA (BERT's SQuAD setting), else 128
    # Batches of similar lengths (HF's group_by_length; attnlab.train.data): the same examples each epoch in
    # an order still drawn from the seed, with less padding, so fewer seconds a step. Off: BERT's order.
    group_by_length: bool = False
    stride: int = 128  # QA: overlap of consecutive passage windows, in tokens
    max_query_length: int = 64  # QA: longer questions are cut (and counted)
    max_train_examples: int | None = None  # the first N training examples only
    max_eval_examples: int | None = None  # the first N dev examples only
    # Hold out this many training examples (a fixed random draw, SELECTION_SEED) to choose the learning rate
    # and each run's best evaluation on; dev then scores the chosen models once, so the reported figure was
    # never used to choose anything. 0: dev chooses, as BERT did ("we selected the best fine-tuning
    # learning rate on the Dev set").
    selection_examples: int = 0
    minutes: float | None = None  # wall-clock budget per run; training stops (and is evaluated) after it
    precision: str = "fp32"
    device: str = "auto"
    eval_batch_size: int = 64
    output_dir: str | os.PathLike = "runs/finetune"
    keep_best: bool = True  # write the best epoch's model to <run>/best
    progress_bar: bool = False
    tensorboard: bool = False
    resume: bool = False  # continue the run in output_dir: each (lr, seed) from its newest good checkpoint
    overwrite: bool = False  # remove an earlier run's outputs in output_dir first (else they are an error)
    # Optimizer steps between evaluations (each keeps the best so far); 0: at each epoch's end, BERT's. The
    # last step is always evaluated, so a value above the run's steps evaluates once, at the end.
    eval_every: int = 0
    save_every: int = 0  # optimizer steps between checkpoints; 0: at every evaluation (each epoch's end)
    keep_last: int = 2  # checkpoints kept per (lr, seed) run: one to fall back to if the newest is damaged
    knowledge: Any = None  # an attnlab.knowledge.features.KnowledgeInjector: K-BERT features (--kg)
    # Task-specific distillation (attnlab.tasks.distillation): a teacher fine-tuned on the same task adds its
    # soft targets at ``distill_temperature``, weighted ``distill_alpha`` against the task loss's 1 - alpha.
    teacher: str | os.PathLike | None = None
    distill_temperature: float = 2.0
    distill_alpha: float = 0.5

    def __post_init__(self) -> None:
        if not (self.distill_temperature > 0 and 0.0 <= self.distill_alpha <= 1.0):
            raise ValueError(
                "FinetuneConfig: distill_temperature > 0 and distill_alpha in [0, 1] expected, got "
                f"{self.distill_temperature!r} and {self.distill_alpha!r}"
            )
        if self.resume and self.overwrite:
            raise ValueError("FinetuneConfig: resume and overwrite exclude each other")
        for name in ("save_every", "eval_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"FinetuneConfig.{name}: an int >= 0, got {getattr(self, name)!r}")
        if not isinstance(self.keep_last, int) or self.keep_last < 1:
            raise ValueError(f"FinetuneConfig.keep_last: an int >= 1, got {self.keep_last!r}")
        if not self.learning_rates or any(not (lr > 0) for lr in self.learning_rates):
            raise ValueError(f"FinetuneConfig.learning_rates: positive numbers, got {self.learning_rates!r}")
        if not self.seeds:
            raise ValueError("FinetuneConfig.seeds: at least one seed")
        if not (self.epochs > 0):
            raise ValueError(f"FinetuneConfig.epochs: a positive number, got {self.epochs!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"FinetuneConfig.batch_size: a positive int, got {self.batch_size!r}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"FinetuneConfig.warmup: a fraction in [0, 1), got {self.warmup!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"FinetuneConfig.dropout: a probability in [0, 1), got {self.dropout!r}")
        if self.encoder_dropout is not None and not 0.0 <= self.encoder_dropout < 1.0:
            raise ValueError(
                "FinetuneConfig.encoder_dropout: a probability in [0, 1) or None, got "
                f"{self.encoder_dropout!r}"
            )
        from attnlab.nn.pooling import POOLINGS

        if self.pooling not in POOLINGS:
            raise ValueError(f"FinetuneConfig.pooling: one of {POOLINGS}, got {self.pooling!r}")
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"FinetuneConfig.{name}: a positive int or None, got {value!r}")
        if self.minutes is not None and not (self.minutes > 0):
            raise ValueError(f"FinetuneConfig.minutes: a positive number or None, got {self.minutes!r}")


@dataclass
class ModelSource:
    """Where a run's model starts: a checkpoint directory (attnlab or HF), or a preset's config (random
    initialisation). The tokenizer comes from the directory unless given."""

    directory: str | os.PathLike | None = None
    config: Any = None  # an EncoderConfig for random initialisation
    tokenizer: Any = None
    name: str = ""

    def __post_init__(self) -> None:
        if (self.directory is None) == (self.config is None):
            raise ValueError("ModelSource: give exactly one of directory and config")
        if self.tokenizer is None:
            if self.directory is None:
                raise ValueError("ModelSource: random initialisation needs a tokenizer")
            from attnlab.tokenizers import load_tokenizer

            self.tokenizer = load_tokenizer(self.directory)
        if not self.name:
            self.name = str(self.directory) if self.directory is not None else "random init"

    def build(
        self,
        spec: TaskSpec,
        labels: Sequence[str] | None,
        dropout: float,
        regression: bool,
        encoder_dropout: float | None = None,
        pooling: str = "cls",
    ) -> nn.Module:
        """The task model, in train mode; ``encoder_dropout`` (None: the config's) on the encoder's layers;
        ``pooling`` the sentence vector of a classification or regression head (`FinetuneConfig.pooling`)."""
        import dataclasses

        from attnlab.models import ARCHITECTURES

        changes = {} if encoder_dropout is None else {
            "hidden_dropout": encoder_dropout, "attention_dropout": encoder_dropout
        }  # fmt: skip

        options: dict[str, Any] = {}
        if spec.kind in ("classification", "regression", "token"):
            n = 1 if regression or spec.kind == "regression" else len(labels or ())
            options = {"num_labels": n, "labels": None if n == 1 else model_labels(spec, labels or ())}
        if spec.kind != "qa":
            options["classifier_dropout"] = dropout
        if pooling != "cls":
            if spec.architecture != "EncoderForSequenceClassification":
                raise ValueError(
                    f"pooling {pooling!r}: only sequence classification and regression choose their sentence "
                    f"vector; task {spec.name} ({spec.kind}) has no such head"
                )
            options["pooling"] = pooling
        if self.directory is not None:
            import warnings

            from attnlab.tasks.transfer import load_task_model

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = load_task_model(self.directory, spec.architecture, config_changes=changes, **options)
            for w in caught:
                logger.warning("%s", w.message)
            return model
        config = dataclasses.replace(self.config, **changes)
        return ARCHITECTURES[spec.architecture].from_config(config, **options).train()

    @property
    def model_config(self) -> Any:
        if self.config is not None:
            return self.config
        from attnlab.io.checkpoint import read_checkpoint_config
        from attnlab.io.hf import describe_hf, is_hf_directory

        if is_hf_directory(self.directory):
            return describe_hf(self.directory)[2]
        return read_checkpoint_config(self.directory)[2]


@dataclass
class RunResult:
    """One fine-tuning run (one learning rate, one seed)."""

    learning_rate: float
    seed: int
    epochs: list[dict[str, float]] = field(default_factory=list)  # dev metrics after each evaluation
    best: dict[str, float] = field(default_factory=dict)
    best_step: int = 0
    steps: int = 0
    minutes: float = 0.0
    stopped_by_time: bool = False
    best_dir: str | None = None
    dev: dict[str, float] = field(default_factory=dict)  # with a selection split: dev metrics of best_dir

    def score(self, metric: str) -> float:
        return metric_value(self.best, metric)


@dataclass
class FinetuneResult:
    """A sweep: every run, the chosen learning rate, the median over seeds of its best dev scores.

    With a selection split (``FinetuneConfig.selection_examples``) the runs' ``epochs``/``best`` are scores on
    the held-out training examples, which chose the learning rate and each run's model (``selection_median``);
    ``median`` is then the dev score of the chosen models, each run's in its ``dev``."""

    task: str
    metric: str
    runs: list[RunResult]
    learning_rate: float
    median: float
    train_examples: int
    eval_examples: int
    best_dir: str | None
    feature_reports: dict[str, str] = field(default_factory=dict)
    selection_examples: int = 0
    selection_median: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _BestKeeper:
    """Saves the model (and tokenizer) whenever the dev metric improves. With ``history_file`` the
    evaluations are also kept on disk (atomically), so that a resumed run knows its best epoch."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        metric: str,
        directory: Path | None,
        history_file: Path | None = None,
        run_id: str | None = None,
    ) -> None:
        self.model, self.tokenizer, self.metric, self.directory = model, tokenizer, metric, directory
        self.history_file, self.run_id = history_file, run_id
        self.best: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.best_step = 0
        self.trainer: Any = None

    def _improves(self, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.metric, float("nan"))
        return not self.best or (not math.isnan(value) and value > self.best.get(self.metric, -math.inf))

    def __call__(self, metrics: dict[str, float]) -> None:
        step = self.trainer.step if self.trainer is not None else len(self.history)
        record = {"step": step, **metrics}
        self.history.append(record)
        if self._improves(metrics):
            self.best, self.best_step = dict(metrics), step
            if self.directory is not None:
                save_model_dir(self.model, self.tokenizer, self.directory, run_id=self.run_id)
        if self.history_file is not None:
            write_json_atomic({"history": self.history}, self.history_file)

    def restore(self, step: int) -> None:
        """The evaluations up to ``step`` (a resumed checkpoint's), read back from ``history_file``; later
        ones were made after that checkpoint and will be made again."""
        if self.history_file is None or not self.history_file.is_file():
            return
        try:
            history = json.loads(self.history_file.read_text(encoding="utf-8"))["history"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{self.history_file}: unreadable evaluation history ({e})") from e
        self.history, self.best, self.best_step = [], {}, 0
        for record in history:
            if record["step"] <= step:
                metrics = {k: v for k, v in record.items() if k != "step"}
                self.history.append(record)
                if self._improves(metrics):
                    self.best, self.best_step = metrics, record["step"]


def save_model_dir(
    model: nn.Module, tokenizer: Any, directory: str | os.PathLike, run_id: str | None = None
) -> Path:
    """``save_pretrained`` plus the tokenizer's ``tokenizer.json`` (and vocab.txt / vocab.json when it has
    them) and the ``tokenizer_config.json`` HF rebuilds it from, so the directory serves `load_model`,
    `attnlab.tokenizers.load_tokenizer` and, for a model with an exact HF form (`attnlab.io.hf_layout`),
    ``transformers.pipeline(...)`` alike. The tokenizer files join the manifest (`attnlab.manifest`) once
    written; ``run_id`` names the run."""
    from attnlab.io import save_pretrained
    from attnlab.io.checkpoint import read_json
    from attnlab.io.hf_tokenizer import save_hf_tokenizer
    from attnlab.manifest import add_to_manifest

    directory = Path(directory)
    save_pretrained(model, directory, run_id=run_id)
    if tokenizer is not None:
        config = model.config
        family = read_json(directory / "config.json").get("hf_family")
        written = save_hf_tokenizer(
            tokenizer, directory, family, config.max_sequence_length, config.type_vocab_size > 1
        )
        add_to_manifest(directory, [Path(p).name for p in written])
    return directory


def run_once(
    spec: TaskSpec,
    source: ModelSource,
    train_features: Sequence[Feature],
    evaluator: TaskEvaluator,
    labels: Sequence[str] | None,
    cfg: FinetuneConfig,
    learning_rate: float,
    seed: int,
    output_dir: Path,
    regression: bool = False,
    run_id: str | None = None,
    teacher: nn.Module | None = None,
) -> RunResult:
    """One run of the recipe: build the model (seeded), train ``cfg.epochs`` with evaluation after every
    epoch, keep the best epoch. Returns its metrics; the best model is in ``output_dir/best``.

    Checkpoints go to ``output_dir/checkpoints`` (``cfg.save_every``, the last ``cfg.keep_last`` kept) with
    ``run_id`` in their manifests; with ``cfg.resume`` the run continues from the newest one that verifies
    and ends with the weights and optimizer state of an uninterrupted run, bit for bit on CPU. With
    ``teacher`` (a fine-tuned task model) the student is trained with its soft targets too
    (`attnlab.tasks.distillation.TaskDistiller`); the student alone is saved."""
    from attnlab.train import Trainer, TrainerConfig, set_seed
    from attnlab.train.checkpoint import latest_checkpoint

    set_seed(seed)
    model = source.build(spec, labels, cfg.dropout, regression, cfg.encoder_dropout, cfg.pooling)
    pad = pad_id_of(source.tokenizer, model.config.pad_token_id)
    dataset = FeatureDataset(train_features)
    steps_per_epoch = math.ceil(len(dataset) / cfg.batch_size)
    tcfg = TrainerConfig(
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        optimizer="adamw",
        lr=learning_rate,
        weight_decay=cfg.weight_decay,
        eps=1e-6,
        schedule="linear",
        warmup=cfg.warmup,
        clip_norm=1.0,
        precision=cfg.precision,
        device=cfg.device,
        log_every=max(1, steps_per_epoch // 4),
        eval_every=cfg.eval_every or steps_per_epoch,
        save_every=cfg.save_every or cfg.eval_every or steps_per_epoch,  # default: with each evaluation
        keep_last=cfg.keep_last,
        output_dir=output_dir,
        seed=seed,
        tensorboard=cfg.tensorboard,
        progress_bar=cfg.progress_bar,
        plot=False,
        drop_last=False,
        group_by_length=cfg.group_by_length,
        max_minutes=cfg.minutes,
        extra={"task": spec.name, "model": source.name, "seed": seed, "lr": learning_rate},
    )
    best_dir = output_dir / "best" if cfg.keep_best else None
    keeper = _BestKeeper(model, source.tokenizer, spec.metric, best_dir, output_dir / "history.json", run_id)
    evaluator.on_result = keeper
    eval_batches = list(batches(evaluator.features, cfg.eval_batch_size, pad))
    for b in eval_batches:  # labels stay (eval loss); QA dev features carry no positions
        b.pop("start_positions", None)
        b.pop("end_positions", None)
    trained = model
    if teacher is not None:
        from attnlab.tasks.distillation import TaskDistiller

        trained = TaskDistiller(model, teacher, cfg.distill_temperature, cfg.distill_alpha)
    trainer = Trainer(
        trained,
        tcfg,
        dataset,
        eval_data=eval_batches,
        metric_fn=evaluator,
        collate_fn=lambda items: collate(items, pad),
        run_id=run_id,
    )
    keeper.trainer = trainer
    start = time.monotonic()
    if cfg.resume and latest_checkpoint(trainer.checkpoint_root) is not None:
        path = trainer.resume("latest", log=logger.warning)
        keeper.restore(trainer.step)
        logger.info("%s: resumed from %s (step %d of %d)", spec.name, path, trainer.step, trainer.total_steps)
    if trainer.step < trainer.total_steps:
        result = trainer.train()  # ends at cfg.epochs or after cfg.minutes (TrainerConfig.max_minutes)
        if result.interrupted:  # SIGINT/SIGTERM: the checkpoint is saved; the command stops (no next run)
            raise KeyboardInterrupt(
                f"{spec.name} lr {learning_rate:g} seed {seed} stopped at step {trainer.step}; "
                f"{result.last_checkpoint} saved: --resume continues"
            )
    stopped_by_time = trainer.step < trainer.total_steps
    if stopped_by_time:
        logger.info("%s: time budget of %s min spent after step %d", spec.name, cfg.minutes, trainer.step)
    if not keeper.history or keeper.history[-1]["step"] != trainer.step:
        trainer.evaluate()  # stopped by the time budget before an epoch's end: score what was reached
    minutes = (time.monotonic() - start) / 60.0
    best = {k.removeprefix("eval_"): v for k, v in keeper.best.items()}
    epochs = [{k.removeprefix("eval_"): v for k, v in h.items()} for h in keeper.history]
    return RunResult(
        learning_rate=learning_rate,
        seed=seed,
        epochs=epochs,
        best=best,
        best_step=keeper.best_step,
        steps=trainer.step,
        minutes=minutes,
        stopped_by_time=stopped_by_time,
        best_dir=str(output_dir / "best") if cfg.keep_best else None,
    )


def run_settings(spec: TaskSpec, source: ModelSource, cfg: FinetuneConfig, max_length: int) -> dict[str, Any]:
    """What a fine-tuning's checkpoints were made under, written to run.json: ``--resume`` with other values
    is refused and each difference named (`attnlab.train.run_dir`). Learning rates and seeds are not among
    them (each pair has its own run directory), nor the time budget (a resumed run may be given more)."""
    model = str(Path(source.directory).resolve()) if source.directory is not None else source.name
    teacher = str(Path(cfg.teacher).resolve()) if cfg.teacher is not None else None
    fields = (
        "pooling", "epochs", "batch_size", "warmup", "weight_decay", "dropout", "encoder_dropout",
        "max_train_examples", "selection_examples", "precision", "distill_temperature", "distill_alpha",
        "group_by_length",
    )  # fmt: skip
    return {
        "task": spec.name, "model": model, "max_length": max_length, "teacher": teacher,
        "knowledge": cfg.knowledge is not None, **{name: getattr(cfg, name) for name in fields},
    }  # fmt: skip


def finetune_examples(
    spec: TaskSpec,
    source: ModelSource,
    train_examples: Sequence[Any],
    dev_examples: Sequence[Any],
    cfg: FinetuneConfig,
    regression: bool = False,
    labels: Sequence[str] | None = None,
) -> FinetuneResult:
    """The recipe on given examples: one run per (learning rate, seed); the learning rate with the best
    median dev score wins; its best run's model is copied to ``cfg.output_dir/best``."""
    train_examples = list(train_examples)[: cfg.max_train_examples]
    dev_examples = list(dev_examples)[: cfg.max_eval_examples]
    if not train_examples or not dev_examples:
        raise ValueError(f"{spec.name}: {len(train_examples)} training and {len(dev_examples)} dev examples")
    train_examples, selection = split_selection(train_examples, cfg.selection_examples, spec.name)
    if selection and not cfg.keep_best:
        raise ValueError("selection_examples: dev scores the chosen runs' saved models: keep_best must be on")
    chooser = selection or dev_examples  # what picks the learning rate and each run's best evaluation
    # class names from every training example: a label only the held-out draw has is still one
    everything = [*train_examples, *selection]
    labels = list(labels) if labels is not None else task_labels(spec, everything, regression)
    config = source.model_config
    check_max_length(cfg.max_length, config.max_sequence_length, "--max-length", "the model")
    max_length = min(cfg.max_length or (384 if spec.kind == "qa" else 128), config.max_sequence_length)
    with_types = config.type_vocab_size > 0
    teacher = None
    if cfg.teacher is not None:
        from attnlab.tasks.distillation import load_task_teacher

        n = 1 if regression or spec.kind == "regression" else len(labels or ())
        named = None if n == 1 or spec.kind not in ("classification", "token") else model_labels(spec, labels)
        counted = spec.kind in ("classification", "regression", "token")
        teacher = load_task_teacher(
            cfg.teacher, spec.architecture, named, n if counted else None, source.tokenizer
        )
        with_types = with_types or teacher.config.type_vocab_size > 0  # the student drops them
        max_length = min(max_length, teacher.config.max_sequence_length)
    common = dict(
        max_length=max_length, with_token_types=with_types, stride=cfg.stride,
        max_query_length=cfg.max_query_length, regression=regression,
    )  # fmt: skip
    if cfg.knowledge is not None:  # K-BERT: every example a sentence tree (attnlab.knowledge.features)
        tok = source.tokenizer
        inj = cfg.knowledge
        train_features, train_report = knowledge_features(spec, tok, train_examples, labels, inj, common)
        dev_features, dev_report = knowledge_features(spec, tok, chooser, labels, inj, common)
    else:
        train_features, train_report = build_features(
            spec, source.tokenizer, train_examples, labels, training=True, **common
        )
        dev_features, dev_report = build_features(
            spec, source.tokenizer, chooser, labels, training=False, **common
        )
    out = Path(cfg.output_dir)
    claim = prepare_run_directory(
        out, "finetune", finetune_outputs(out), resume=cfg.resume, overwrite=cfg.overwrite, log=logger.info,
        settings=run_settings(spec, source, cfg, max_length),
    )  # fmt: skip
    runs: list[RunResult] = []
    for lr in cfg.learning_rates:
        for seed in cfg.seeds:
            run_dir = out / f"lr{lr:g}-seed{seed}"
            evaluator = TaskEvaluator(spec, dev_features, chooser, labels, regression)
            run = run_once(
                spec, source, train_features, evaluator, labels, cfg, lr, seed, run_dir, regression,
                run_id=claim.run_id, teacher=teacher,
            )  # fmt: skip
            logger.info(
                "%s lr=%g seed=%d: best %s = %.4f", spec.name, lr, seed, spec.metric, run.score(spec.metric)
            )
            runs.append(run)
    by_lr = {lr: [r.score(spec.metric) for r in runs if r.learning_rate == lr] for lr in cfg.learning_rates}
    medians = {lr: statistics.median(v) for lr, v in by_lr.items()}
    chosen = max(medians, key=lambda lr: -math.inf if math.isnan(medians[lr]) else medians[lr])
    best_run = max(
        (r for r in runs if r.learning_rate == chosen),
        key=lambda r: -math.inf if math.isnan(r.score(spec.metric)) else r.score(spec.metric),
    )
    reported = medians[chosen]
    if selection:  # dev scores the chosen learning rate's models, once each
        # "auto" is the trainer's choice for this process (cuda:LOCAL_RANK where there is a GPU, else cpu)
        device = str(current_context().default_device()) if cfg.device == "auto" else cfg.device
        for r in runs:
            if r.learning_rate == chosen and r.best_dir:
                r.dev = evaluate_directory(
                    spec, r.best_dir, dev_examples, max_length=max_length, stride=cfg.stride,
                    max_query_length=cfg.max_query_length, batch_size=cfg.eval_batch_size, device=device,
                    knowledge=cfg.knowledge,
                )  # fmt: skip
        scored = [metric_value(r.dev, spec.metric) for r in runs if r.dev]
        reported = statistics.median(scored) if scored else math.nan
        logger.info(
            "%s: lr %g chosen on %d held-out training examples (median %s %.4f); dev %s %s",
            spec.name, chosen, len(selection), spec.metric, medians[chosen], spec.metric,
            " ".join(f"{x:.4f}" for x in scored),
        )  # fmt: skip
    best_dir = None
    if cfg.keep_best and best_run.best_dir and Path(best_run.best_dir).is_dir():
        source_dir = best_run.best_dir
        best_dir = str(atomic_directory(out / "best", lambda tmp: _copy_files(source_dir, tmp)))
    result = FinetuneResult(
        task=spec.name,
        metric=spec.metric,
        runs=runs,
        learning_rate=chosen,
        median=reported,
        train_examples=len(train_examples),
        eval_examples=len(dev_examples),
        best_dir=best_dir,
        feature_reports={
            "train": train_report.summary(), "selection" if selection else "dev": dev_report.summary()
        },
        selection_examples=len(selection),
        selection_median=medians[chosen] if selection else None,
    )
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(result.to_dict(), out / "results.json")
    if best_dir is not None:  # what the model card of a HF export says (attnlab.io.model_card)
        from attnlab.io.model_card import finetune_record, write_training_record

        base = None if source.directory is None else str(source.directory)
        record = finetune_record(
            spec.name, base, best_run.dev or best_run.best, initialisation=None if base else source.name,
            learning_rate=chosen, train_examples=len(train_examples), eval_examples=len(dev_examples),
        )  # fmt: skip
        write_training_record(best_dir, record)
    return result


SELECTION_SEED = 1234  # the draw of held-out training examples: fixed, every model chosen on the same ones


def metric_value(metrics: dict[str, float], name: str) -> float:
    """``metrics[eval_NAME]`` or ``metrics[NAME]`` (NaN when neither is there)."""
    return float(metrics.get(f"eval_{name}", metrics.get(name, math.nan)))


def split_selection(examples: list[Any], n: int, task: str) -> tuple[list[Any], list[Any]]:
    """(training examples, ``n`` held out for selection): a fixed random draw, order kept in both."""
    if n <= 0:
        return examples, []
    if n >= len(examples):
        raise ValueError(
            f"{task}: selection_examples {n} leaves nothing to train on ({len(examples)} training examples)"
        )
    held = set(random.Random(SELECTION_SEED).sample(range(len(examples)), n))
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in sorted(held)]


def knowledge_features(
    spec: TaskSpec, tokenizer: Any, examples: Sequence[Any], labels: Sequence[str] | None,
    inj: Any, common: dict[str, Any],
) -> tuple[list[Feature], FeatureReport]:
    """K-BERT features through ``inj``, a `KnowledgeInjector` (single-sentence classification and NER)."""
    report = FeatureReport(spec.name)
    label_to_id = {name: i for i, name in enumerate(labels)} if labels else None
    if spec.kind == "classification" and not common["regression"]:
        feats = inj.classification_features(
            tokenizer, examples, common["max_length"], label_to_id, common["with_token_types"], report
        )
    elif spec.kind == "token":
        feats = inj.token_features(
            tokenizer, examples, label_to_id, common["max_length"], common["with_token_types"], report
        )
    else:
        raise ValueError(f"{spec.name}: knowledge injection (--kg) supports classification and NER tasks")
    report.log()
    return feats, report


def finetune_outputs(out: Path) -> list[str]:
    """What a finetune run writes in its output directory: ``best``, ``results.json`` and one ``lr*-seed*``
    directory per run (an earlier sweep's too); `prepare_run_directory` guards them."""
    runs = sorted(p.name for p in out.glob("lr*-seed*")) if out.is_dir() else []
    return ["best", "results.json", *runs]


def _copy_files(source: str | os.PathLike, target: Path) -> None:
    for path in Path(source).iterdir():
        if path.is_file():
            shutil.copy2(path, target / path.name)


def finetune(
    task: str | TaskSpec,
    data_dir: str | os.PathLike,
    source: ModelSource,
    cfg: FinetuneConfig,
    columns: GenericColumns | None = None,
) -> FinetuneResult:
    """Load the task's train and dev splits from ``data_dir`` and run `finetune_examples`."""
    spec = get_task(task) if isinstance(task, str) else task
    train = load_split(spec, data_dir, "train", columns)
    dev = load_split(spec, data_dir, "dev", columns)
    regression = bool(columns and columns.regression)
    if regression and spec.kind == "classification":  # a generic table with float labels
        spec = dataclasses.replace(spec, kind="regression", metric="spearman")
    return finetune_examples(spec, source, train, dev, cfg, regression=regression)


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
    knowledge: Any = None,
) -> dict[str, float]:
    """Score a fine-tuned model directory (attnlab or HF task checkpoint) on labelled examples.

    ``knowledge``: a `KnowledgeInjector` for a model fine-tuned with a knowledge graph (K-BERT, ``--kg``).

    With ``output_dir``: ``eval_results.json`` (the metrics) and, for QA, the official ``predictions.json``
    (+ ``null_odds.json`` for SQuAD 2.0, whose metrics include the dev-tuned ``best_f1_thresh``)."""
    from attnlab.tasks.transfer import load_model
    from attnlab.tokenizers import load_tokenizer

    spec = get_task(task) if isinstance(task, str) else task
    model = load_model(model_dir, device=device)
    tokenizer = load_tokenizer(model_dir)
    labels = data_labels(spec, getattr(model, "options", {}).get("labels"))
    regression = getattr(model, "options", {}).get("num_labels") == 1
    if spec.kind in ("classification", "token") and not labels and not regression:
        labels = task_labels(spec, examples)
    config = model.config
    check_max_length(max_length, config.max_sequence_length, "--max-length", "the model")
    common = dict(
        max_length=min(max_length or (384 if spec.kind == "qa" else 128), config.max_sequence_length),
        with_token_types=config.type_vocab_size > 0, regression=regression,
    )  # fmt: skip
    if knowledge is not None:
        feats, report = knowledge_features(spec, tokenizer, examples, labels, knowledge, common)
    else:
        feats, report = build_features(
            spec, tokenizer, examples, labels, training=False, stride=stride,
            max_query_length=max_query_length, **common,
        )  # fmt: skip
    evaluator = TaskEvaluator(spec, feats, examples, labels, regression)
    pad = pad_id_of(tokenizer, config.pad_token_id)
    metrics = evaluate_features(model, evaluator, batch_size, pad, device)
    if output_dir is not None:
        from attnlab.atomic import write_json_atomic

        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        results = {"task": spec.name, "examples": len(examples), **metrics}
        write_json_atomic(results, out / "eval_results.json")
        if spec.kind == "qa":
            evaluator.write_predictions(output_dir)
    return metrics


__all__ = [
    "LEARNING_RATES",
    "SMALL_MODEL_LEARNING_RATES",
    "default_learning_rates",
    "TASKS",
    "FinetuneConfig",
    "FinetuneResult",
    "GenericColumns",
    "ModelSource",
    "RunResult",
    "TaskEvaluator",
    "TaskSpec",
    "data_labels",
    "evaluate_directory",
    "evaluate_features",
    "finetune",
    "finetune_examples",
    "get_task",
    "load_split",
    "model_labels",
    "run_once",
    "save_model_dir",
    "task_labels",
]
