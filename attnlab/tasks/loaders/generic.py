"""Any sentence(-pair) classification data with named columns: CSV, TSV, JSON lines, or a HF dataset.

For a user's own data set: name the columns that hold the first text, the optional second text, the
label and the optional id, and get the same :class:`SentenceExample` records the GLUE loader returns.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Literal

from attnlab.tasks.examples import (
    DataFormatError,
    ErrorPolicy,
    LoadedExamples,
    LoadReport,
    SentenceExample,
    check_error_policy,
    fail_or_skip,
)
from attnlab.tasks.loaders._lines import (
    check_not_empty,
    empty_fields,
    empty_message,
    read_csv_rows,
    read_lines,
)

TableFormat = Literal["csv", "tsv", "jsonl"]
_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}
LabelType = Literal["str", "int", "float"]
_LABEL_TYPES = {"str": str, "int": int, "float": float}
_LABEL_NAMES = {"str": "string", "int": "integer", "float": "finite number"}  # named in errors


def _records(path: str, fmt: str, report: LoadReport) -> Iterator[tuple[int, Mapping | None, str]]:
    """Yield ``(line, record or None if malformed, problem)`` for each data row."""
    if fmt == "jsonl":
        for lineno, text in read_lines(path):
            report.lines_read += 1
            if not text.strip():
                report.structural["blank"] += 1
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                yield lineno, None, f"not a JSON object: {e.msg} at column {e.colno}"
                continue
            if not isinstance(record, dict):
                yield lineno, None, f"expected a JSON object per line, got {type(record).__name__}"
                continue
            yield lineno, record, ""
        return
    if fmt == "tsv":
        # GLUE-style TSV: no quoting, fields split on tabs only.
        header: list[str] | None = None
        for lineno, text in read_lines(path):
            report.lines_read += 1
            if not text.strip():
                report.structural["blank"] += 1
                continue
            fields = text.split("\t")
            if header is None:
                header = [h.strip() for h in fields]
                report.structural["header"] += 1
                continue
            if len(fields) != len(header):
                yield lineno, None, f"expected {len(header)} columns ({', '.join(header)}), got {len(fields)}"
                continue
            yield lineno, dict(zip(header, fields)), ""
        return
    header = None
    for lineno, n_lines, row in read_csv_rows(path):
        report.lines_read += n_lines
        if not row or not any(cell.strip() for cell in row):
            report.structural["blank"] += 1
            continue
        if header is None:
            header = [h.strip() for h in row]
            report.structural["header"] += 1
            continue
        if len(row) != len(header):
            yield lineno, None, f"expected {len(header)} columns ({', '.join(header)}), got {len(row)}"
            continue
        yield lineno, dict(zip(header, row)), ""


def _label_value(raw: object, column: str, convert: type, allowed: set | None, label_type: str) -> tuple:
    """(the label of ``raw`` as ``label_type``, "") or (None, what is wrong with it)."""
    try:
        value = convert(raw.strip() if isinstance(raw, str) else raw)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("a NaN or Inf target makes the first loss NaN")
    except (TypeError, ValueError):
        return None, f"label {raw!r} in column {column!r} is not a {_LABEL_NAMES[label_type]}"
    if allowed is not None and value not in allowed:
        return None, f"unknown label {raw!r} in column {column!r}; expected one of {sorted(allowed)}"
    return value, ""


def load_table(
    path: str | os.PathLike,
    text_a: str,
    text_b: str | None = None,
    label: str | None = "label",
    guid: str | None = None,
    format: TableFormat | None = None,
    labels: Iterable | None = None,
    label_type: LabelType = "str",
    errors: ErrorPolicy = "raise",
) -> LoadedExamples[SentenceExample]:
    """Load a CSV (quoted), TSV (unquoted, GLUE style) or JSON-lines file with named columns.

    Args:
        path: the file; the format comes from its extension unless ``format`` is given.
        text_a, text_b: the text column(s).
        label: the label column, or ``None`` for unlabelled data.
        guid: an id column; default ``{file}:{line}``.
        labels: the allowed labels (after ``label_type`` conversion); others raise ``unknown_label``.
        label_type: ``"str"`` (class names), ``"int"`` (class ids) or ``"float"`` (regression).
        errors: ``"raise"`` (default; the error names file, 1-based line, the expected columns or labels)
            or ``"skip"`` (counted in ``.report.skipped`` by reason).

    CSV/TSV files need a header line naming the columns. A JSON-lines value that is a number is
    converted with ``label_type``; text values must be strings.
    """
    check_error_policy(errors)
    path = os.fspath(path)
    fmt = format or _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("csv", "tsv", "jsonl"):
        raise ValueError(
            f"{path}: cannot tell the format from the extension; pass format= one of 'csv', 'tsv', 'jsonl'"
        )
    if label_type not in _LABEL_TYPES:
        raise ValueError(f"label_type must be one of {sorted(_LABEL_TYPES)}, got {label_type!r}")
    convert = _LABEL_TYPES[label_type]
    allowed = None if labels is None else {convert(x) for x in labels}
    needed = [c for c in (text_a, text_b, label, guid) if c is not None]
    report = LoadReport(path)
    examples: list[SentenceExample] = []
    for lineno, record, problem in _records(path, fmt, report):
        if record is None:
            fail_or_skip(report, errors, lineno, "missing_columns", problem)
            continue
        missing = [c for c in needed if c not in record or record[c] is None]
        if missing:
            fail_or_skip(
                report,
                errors,
                lineno,
                "missing_columns",
                f"missing column(s) {missing}; expected {needed}, found {sorted(record)}",
            )
            continue
        texts = [record[c] for c in (text_a, text_b) if c is not None]
        if not all(isinstance(t, str) for t in texts):
            fail_or_skip(
                report, errors, lineno, "bad_text", f"text columns {[text_a, text_b]} must be strings"
            )
            continue
        empty = empty_fields(record, (text_a, text_b, label))
        if empty:
            fail_or_skip(report, errors, lineno, "empty_field", empty_message(empty))
            continue
        value = None
        if label is not None:
            value, problem = _label_value(record[label], label, convert, allowed, label_type)
            if problem:
                fail_or_skip(report, errors, lineno, "unknown_label", problem)
                continue
        examples.append(
            SentenceExample(
                text_a=record[text_a],
                text_b=record[text_b] if text_b is not None else None,
                label=value,
                guid=str(record[guid]) if guid is not None else f"{os.path.basename(path)}:{lineno}",
            )
        )
    report.examples = len(examples)
    check_not_empty(path, examples, report)
    return LoadedExamples(examples, report)


def load_hf_dataset(
    name: str,
    config: str | None = None,
    split: str = "train",
    text_a: str = "sentence",
    text_b: str | None = None,
    label: str | None = "label",
    guid: str | None = "idx",
    **load_kwargs,
) -> LoadedExamples[SentenceExample]:
    """Load a split from the HF ``datasets`` hub or cache (e.g. ``("glue", "sst2", "validation")``).

    ``datasets`` is an optional dependency, imported only here. Class-label ids are mapped back to their
    names (so examples match what :func:`load_glue` returns); the ``-1`` HF uses for unlabelled test
    rows becomes ``None``. ``guid`` falls back to the row number when the column does not exist.
    """
    try:
        import datasets
    except ImportError as e:
        raise ImportError(
            "load_hf_dataset needs the optional 'datasets' package (pip install datasets); "
            "the file loaders (load_glue, load_squad, load_conll, load_swag, load_table) do not"
        ) from e
    dataset = datasets.load_dataset(name, config, split=split, **load_kwargs)
    where = f"hf:{name}" + (f"/{config}" if config else "") + f"[{split}]"
    columns = set(dataset.column_names)
    missing = [c for c in (text_a, text_b, label) if c is not None and c not in columns]
    if missing:
        raise DataFormatError(where, None, f"missing column(s) {missing}; the split has {sorted(columns)}")
    names = getattr(dataset.features.get(label), "names", None) if label is not None else None
    report = LoadReport(where)
    examples = []
    for i, row in enumerate(dataset):
        report.lines_read += 1
        empty = empty_fields(row, (text_a, text_b, label))
        if empty:
            raise DataFormatError(where, None, f"row {i}: {empty_message(empty)}")
        value = row[label] if label is not None else None
        if isinstance(value, int) and value < 0:
            value = None
        elif names is not None and value is not None:
            value = names[value]
        examples.append(
            SentenceExample(
                text_a=row[text_a],
                text_b=row[text_b] if text_b is not None else None,
                label=value,
                guid=str(row[guid]) if guid is not None and guid in columns else str(i),
            )
        )
    report.examples = len(examples)
    return LoadedExamples(examples, report)
