"""The fine-tuning tasks: what each one reads, which head it needs, and the class names it predicts.

A task is a `TaskSpec`: how to find its splits in a directory, which head it needs (``kind``), and which dev
metric chooses the best epoch and learning rate. `TASKS` holds the GLUE tasks, CoNLL-2003, SQuAD v1.1 /
v2.0, SWAG, K-BERT's data sets and ``generic`` (CSV / TSV / JSON-lines tables).

The class names of a task come from its definition (GLUE) or from its whole training file (CoNLL tags,
K-BERT, generic tables): never from a subsample, so that ``--max-train-examples`` cannot leave out a class
the dev set has.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.tasks import loaders
from attnlab.tasks.examples import TokenExample

logger = logging.getLogger(__name__)

KINDS = ("classification", "regression", "token", "qa", "multiple_choice")
ARCHITECTURE_OF_KIND = {
    "classification": "EncoderForSequenceClassification",
    "regression": "EncoderForSequenceClassification",
    "token": "EncoderForTokenClassification",
    "qa": "EncoderForQuestionAnswering",
    "multiple_choice": "EncoderForMultipleChoice",
}


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
    g = loaders.glue_task(name)
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
    # K-BERT's data sets (attnlab.tasks.loaders.kbert): text_a/label TSV with a header; --kg injects a graph
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
# Tasks scored by GLUE's metric table (attnlab.metrics.glue_metrics); the others by accuracy or correlation.
GLUE_SCORED = frozenset(name for name, spec in TASKS.items() if spec.kind in ("classification", "regression")
                        and name not in ("generic", "kbert_cls"))  # fmt: skip


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
    path = split_path(spec, data_dir, split)
    if spec.name == "kbert_ner":
        examples = loaders.load_kbert_ner(path)
    elif spec.name == "kbert_cls":
        examples = loaders.load_kbert_classification(path)
    elif spec.name == "generic":
        c = columns or GenericColumns()
        examples = loaders.load_table(
            path, c.text_a, c.text_b, c.label, label_type="float" if c.regression else "str"
        )
    elif spec.kind in ("classification", "regression"):
        examples = loaders.load_glue(spec.name, path, labelled=None if split == "test" else True)
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
    """Class names: the spec's, else those of the training data (CoNLL tags with "O" first, then sorted).

    Give every training example (before ``--max-train-examples`` takes its first N): a class only the
    rest of the file has is still one the dev set may hold."""
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


__all__ = [
    "ARCHITECTURE_OF_KIND",
    "GLUE_SCORED",
    "KINDS",
    "TASKS",
    "GenericColumns",
    "TaskSpec",
    "data_labels",
    "get_task",
    "load_split",
    "model_labels",
    "split_path",
    "task_labels",
]
