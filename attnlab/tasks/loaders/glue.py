"""GLUE (Wang et al., 2018) TSV files: one spec per task, one loader for all of them.

The files are the ones GLUE's download script writes (``{task_dir}/{split}.tsv``): tab-separated,
no quoting (MRPC, MNLI and QQP strings contain unbalanced ``"`` that a CSV reader would swallow),
a header line everywhere except CoLA's train/dev files, which have four positional columns
``source, label, original_label (empty), sentence``. Test files have no label column (and CoLA's test
file has a header ``index, sentence``); they load as unlabelled examples (``label=None``).

Columns are found by name in the header, so MNLI's train file (``label1, gold_label``) and dev files
(``label1 .. label5, gold_label``) load with the same spec.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from attnlab.metrics.classification import canonical_glue_task
from attnlab.tasks.examples import (
    DataFormatError,
    ErrorPolicy,
    LoadedExamples,
    LoadReport,
    SentenceExample,
    check_error_policy,
    fail_or_skip,
)
from attnlab.tasks.loaders._lines import check_not_empty, empty_fields, empty_message, read_lines


@dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task keeps its text, label and id, and which labels it has.

    ``labels`` is ``None`` for the regression task (STS-B). ``guid`` names the id column(s); several
    are joined with ``-`` (MRPC's pair of sentence ids); ``None`` uses ``{file}:{line}``.
    ``positional`` gives the column names of header-less files (CoLA). ``splits`` maps split names to
    file names inside ``directory``. ``label_names`` names the classes where the files hold codes
    (SST-2's ``0``/``1`` are negative/positive, as the GLUE paper and HF's ``nyu-mll/glue`` name them):
    what a fine-tuned model stores as its labels (``id2label``).
    """

    name: str
    directory: str
    text_a: str
    text_b: str | None
    label: str
    labels: tuple[str, ...] | None
    guid: tuple[str, ...] | None = None
    positional: tuple[str, ...] | None = None
    splits: tuple[tuple[str, str], ...] = (("train", "train.tsv"), ("dev", "dev.tsv"), ("test", "test.tsv"))
    label_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        names, labels = self.label_names, self.labels
        if names is not None and (labels is None or len(names) != len(labels)):
            raise ValueError(f"GlueTask {self.name}: label_names {names} do not match labels {labels}")

    @property
    def names(self) -> tuple[str, ...] | None:
        """The class names, in label-id order: ``label_names`` where the files hold codes, else ``labels``."""
        return self.label_names or self.labels

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """1 for regression, else the number of classes (the classifier head's output size)."""
        return 1 if self.labels is None else len(self.labels)

    def label_to_id(self, label: str) -> int:
        if self.labels is None:
            raise ValueError(f"{self.name} is a regression task; its labels are floats, not classes")
        try:
            return self.labels.index(label)
        except ValueError:
            raise ValueError(f"{self.name}: unknown label {label!r}; expected one of {self.labels}") from None

    def split_file(self, split: str) -> str:
        files = dict(self.splits)
        if split not in files:
            raise ValueError(f"{self.name} has no split {split!r}; expected one of {sorted(files)}")
        return files[split]


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")
_NLI3 = ("contradiction", "entailment", "neutral")  # the order GLUE's MNLI processors use
_MNLI_SPLITS = (
    ("train", "train.tsv"),
    ("dev_matched", "dev_matched.tsv"),
    ("dev_mismatched", "dev_mismatched.tsv"),
    ("test_matched", "test_matched.tsv"),
    ("test_mismatched", "test_mismatched.tsv"),
)

GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask(
            "cola", "CoLA", "sentence", None, "label", _BINARY,
            positional=("source", "label", "original_label", "sentence"),
            label_names=("unacceptable", "acceptable"),
        ),
        GlueTask("sst2", "SST-2", "sentence", None, "label", _BINARY, label_names=("negative", "positive")),
        GlueTask("mrpc", "MRPC", "#1 String", "#2 String", "Quality", _BINARY, guid=("#1 ID", "#2 ID"),
                 label_names=("not_equivalent", "equivalent")),
        GlueTask("stsb", "STS-B", "sentence1", "sentence2", "score", None, guid=("index",)),
        GlueTask("qqp", "QQP", "question1", "question2", "is_duplicate", _BINARY, guid=("id",),
                 label_names=("not_duplicate", "duplicate")),
        GlueTask("mnli", "MNLI", "sentence1", "sentence2", "gold_label", _NLI3, guid=("pairID",),
                 splits=_MNLI_SPLITS),
        # MNLI-mm is MNLI evaluated on the mismatched genres: same files, same labels.
        GlueTask("mnli-mm", "MNLI", "sentence1", "sentence2", "gold_label", _NLI3, guid=("pairID",),
                 splits=_MNLI_SPLITS),
        GlueTask("qnli", "QNLI", "question", "sentence", "label", _NLI2, guid=("index",)),
        GlueTask("rte", "RTE", "sentence1", "sentence2", "label", _NLI2, guid=("index",)),
        GlueTask("wnli", "WNLI", "sentence1", "sentence2", "label", _BINARY, guid=("index",),
                 label_names=("not_entailment", "entailment")),
        # The diagnostic set: MNLI labels, test only (GLUE ships it unlabelled as AX/diagnostic.tsv).
        GlueTask("ax", "diagnostic", "sentence1", "sentence2", "label", _NLI3, guid=("index",),
                 splits=(("test", "diagnostic.tsv"),)),
    )
}  # fmt: skip


def glue_task(name: str) -> GlueTask:
    """The spec of a GLUE task by any common spelling (``"SST-2"``, ``"sst2"``, ``"MNLI-mm"``)."""
    return GLUE_TASKS[canonical_glue_task(name)]


def glue_path(root: str | os.PathLike, task: str, split: str) -> str:
    """``{root}/{task directory}/{split file}``, e.g. ``glue_path(root, "mnli", "dev_mismatched")``."""
    spec = glue_task(task)
    return os.path.join(os.fspath(root), spec.directory, spec.split_file(split))


def load_glue(
    task: str,
    path: str | os.PathLike,
    labelled: bool | None = None,
    errors: ErrorPolicy = "raise",
) -> LoadedExamples[SentenceExample]:
    """Load one GLUE TSV file into :class:`SentenceExample` records.

    Args:
        task: the GLUE task (any spelling :func:`glue_task` accepts).
        path: the TSV file.
        labelled: ``True`` requires the label column, ``False`` ignores it, ``None`` (default) takes
            the file as labelled when its header has the label column (test files have none).
        errors: ``"raise"`` (default) stops at the first malformed row with a :class:`DataFormatError`
            naming file, 1-based line, expected columns or labels; ``"skip"`` counts such rows in the
            returned list's ``.report`` (reasons ``missing_columns``, ``unknown_label``, ``bad_score``).

    Returns:
        a list of examples with a ``.report`` (:class:`LoadReport`). Labels are the names as written in
        the file, checked against ``glue_task(task).labels``; STS-B scores are floats.
    """
    spec = glue_task(task)
    check_error_policy(errors)
    path = os.fspath(path)
    report = LoadReport(path)
    examples: list[SentenceExample] = []
    columns: dict[str, int] | None = None
    n_columns = 0
    has_label = False
    for lineno, text in read_lines(path):
        report.lines_read += 1
        if not text.strip():
            report.structural["blank"] += 1
            continue
        fields = text.split("\t")
        if columns is None:
            columns, n_columns, is_header = _columns(spec, path, lineno, fields)
            has_label = spec.label in columns
            if labelled and not has_label:
                raise DataFormatError(
                    path, lineno, f"{spec.name}: expected a {spec.label!r} column; header is {fields}"
                )
            has_label = has_label and labelled is not False
            if is_header:
                report.structural["header"] += 1
                continue
        if len(fields) != n_columns:
            fail_or_skip(
                report,
                errors,
                lineno,
                "missing_columns" if len(fields) < n_columns else "extra_columns",
                f"{spec.name}: expected {n_columns} tab-separated columns ({', '.join(columns)}), "
                f"got {len(fields)}",
            )
            continue
        row = {name: fields[i] for name, i in columns.items()}
        texts = (spec.text_a, spec.text_b, spec.label if has_label else None)
        empty = empty_fields(row, texts)
        if empty:
            fail_or_skip(report, errors, lineno, "empty_field", f"{spec.name}: {empty_message(empty)}")
            continue
        label, reason, problem = _label(spec, row[spec.label]) if has_label else (None, "", "")
        if problem:
            fail_or_skip(report, errors, lineno, reason, problem)
            continue
        examples.append(
            SentenceExample(
                text_a=row[spec.text_a],
                text_b=row[spec.text_b] if spec.text_b is not None else None,
                label=label,
                guid=_guid(spec, row, path, lineno),
            )
        )
    report.examples = len(examples)
    check_not_empty(path, examples, report)
    return LoadedExamples(examples, report)


def _label(spec: GlueTask, raw: str) -> tuple[str | float | None, str, str]:
    """(label, "", "") for a valid label of ``spec``, else (None, reason, message): STS-B's a finite float,
    the others' one of ``spec.labels`` as written."""
    if spec.labels is None:
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):  # a NaN or Inf target makes the first loss NaN
            message = f"{spec.name}: column {spec.label!r} must be a finite number, got {raw!r}"
            return None, "bad_score", message
        return score, "", ""
    if raw not in spec.labels:
        expected = list(spec.labels)
        message = f"{spec.name}: unknown label {raw!r} in column {spec.label!r}; expected one of {expected}"
        return None, "unknown_label", message
    return raw, "", ""


def _guid(spec: GlueTask, row: dict[str, str], path: str, lineno: int) -> str:
    """The example's id: the task's id column(s), a test file's ``index``, else ``{file}:{line}``."""
    if spec.guid and all(g in row for g in spec.guid):
        return "-".join(row[g] for g in spec.guid)
    if "index" in row:  # test files: GLUE's submission format is keyed by this index
        return row["index"]
    return f"{os.path.basename(path)}:{lineno}"


def load_glue_split(
    root: str | os.PathLike, task: str, split: str, errors: ErrorPolicy = "raise"
) -> LoadedExamples[SentenceExample]:
    """Load ``{root}/{task dir}/{split}.tsv``; train/dev splits must carry labels, test splits none."""
    labelled = None if split.startswith("test") else True
    return load_glue(task, glue_path(root, task, split), labelled=labelled, errors=errors)


def _columns(spec: GlueTask, path: str, lineno: int, fields: list[str]) -> tuple[dict[str, int], int, bool]:
    """Column name → index from the first line; whether that line is a header."""
    if spec.positional is not None and spec.text_a not in fields:
        if len(fields) != len(spec.positional):
            raise DataFormatError(
                path,
                lineno,
                f"{spec.name}: expected a header or {len(spec.positional)} columns "
                f"({', '.join(spec.positional)}), got {len(fields)}",
            )
        return {name: i for i, name in enumerate(spec.positional)}, len(spec.positional), False
    columns = {name.strip(): i for i, name in enumerate(fields)}
    needed = [c for c in (spec.text_a, spec.text_b) if c is not None and c not in columns]
    if needed:
        raise DataFormatError(
            path,
            lineno,
            f"{spec.name}: header lacks column(s) {needed}; expected {spec.text_a!r}"
            + (f", {spec.text_b!r}" if spec.text_b else "")
            + f" and (for labelled data) {spec.label!r}; got {fields}",
        )
    return columns, len(fields), True
