"""SWAG (Zellers et al., 2018) CSV files: grounded commonsense inference, four candidate endings.

Columns (``train.csv``, ``val.csv``; ``test.csv`` lacks ``label``): ``video-id, fold-ind, startphrase,
sent1, sent2, gold-source, ending0 .. ending3, label`` (the released files also have an unnamed first
index column). The context is ``sent1``; each ending is completed with the start of the second
sentence, ``sent2 + " " + ending_i``, the pair BERT (§4.4) scores with one shared vector.
Real CSV quoting applies (fields contain commas and quotes), so :mod:`csv` parses the file.
"""

from __future__ import annotations

import os

from attnlab.tasks.examples import (
    DataFormatError,
    ErrorPolicy,
    LoadedExamples,
    LoadReport,
    MultipleChoiceExample,
    check_error_policy,
    fail_or_skip,
)
from attnlab.tasks.loaders._lines import check_not_empty, empty_fields, empty_message, read_csv_rows

SWAG_COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")
NUM_ENDINGS = 4


def load_swag(
    path: str | os.PathLike, labelled: bool | None = None, errors: ErrorPolicy = "raise"
) -> LoadedExamples[MultipleChoiceExample]:
    """Load a SWAG CSV file into :class:`MultipleChoiceExample` records.

    ``labelled``: ``True`` requires the ``label`` column, ``None`` follows the header. Labels must be
    integers in 0..3; a bad one raises ``DataFormatError`` naming file and line (or is counted as
    ``unknown_label`` with ``errors="skip"``). ``guid`` is the ``fold-ind`` column when present.
    """
    check_error_policy(errors)
    path = os.fspath(path)
    report = LoadReport(path)
    examples: list[MultipleChoiceExample] = []
    rows = read_csv_rows(path)
    try:
        _, n_lines, header = next(rows)
    except StopIteration:
        raise DataFormatError(path, 1, f"empty file; expected a header with {list(SWAG_COLUMNS)}") from None
    report.lines_read += n_lines
    report.structural["header"] += 1
    columns = {name: i for i, name in enumerate(header)}
    missing = [c for c in SWAG_COLUMNS if c not in columns]
    if missing:
        raise DataFormatError(path, 1, f"header lacks {missing}; expected columns {list(SWAG_COLUMNS)}")
    has_label = "label" in columns and labelled is not False
    if labelled and "label" not in columns:
        raise DataFormatError(path, 1, f"expected a 'label' column; header is {header}")
    for lineno, n_lines, row in rows:  # lineno: where the record starts (a quoted field may span lines)
        report.lines_read += n_lines
        if not row:
            report.structural["blank"] += 1
            continue
        if len(row) != len(header):
            fail_or_skip(
                report,
                errors,
                lineno,
                "missing_columns",
                f"expected {len(header)} columns ({', '.join(header)}), got {len(row)}",
            )
            continue
        fields = {name: row[i] for name, i in columns.items()}
        # the start of the ending (sent2) may be empty; the context, each ending and the label may not
        needed = ("sent1", *(f"ending{i}" for i in range(NUM_ENDINGS)), "label" if has_label else None)
        empty = empty_fields(fields, needed)
        if empty:
            fail_or_skip(report, errors, lineno, "empty_field", empty_message(empty))
            continue
        label = None
        if has_label:
            raw = row[columns["label"]].strip()
            if raw not in {str(i) for i in range(NUM_ENDINGS)}:
                fail_or_skip(
                    report,
                    errors,
                    lineno,
                    "unknown_label",
                    f"label {raw!r} must be one of 0..{NUM_ENDINGS - 1}",
                )
                continue
            label = int(raw)
        start = row[columns["sent2"]]
        endings = tuple(f"{start} {row[columns[f'ending{i}']]}".strip() for i in range(NUM_ENDINGS))
        guid = row[columns["fold-ind"]] if "fold-ind" in columns else f"{os.path.basename(path)}:{lineno}"
        examples.append(MultipleChoiceExample(row[columns["sent1"]], endings, label, guid))
    report.examples = len(examples)
    check_not_empty(path, examples, report)
    return LoadedExamples(examples, report)
