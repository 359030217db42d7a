"""K-BERT's dataset files (the tasks ``kbert_ner`` and ``kbert_cls``, `attnlab.knowledge`): tab-separated
with a header naming the columns (``text_a``, ``label``).

- NER (``medical_ner``, ``msra_ner``): ``text_a`` holds the characters separated by spaces, ``label`` the
  same number of BIO tags separated by spaces.
- classification (``chnsenticorp``, ``book_review``, ...): ``label`` and ``text_a`` in either order.

Errors name the file and the line (`attnlab.tasks.examples.DataFormatError`); blank lines are counted.
"""

from __future__ import annotations

import os

from attnlab.tasks.examples import DataFormatError, LoadedExamples, LoadReport, SentenceExample, TokenExample
from attnlab.tasks.loaders._lines import check_not_empty, empty_fields, empty_message, read_lines


def _columns(path: str, header: str, needed: tuple[str, ...]) -> dict[str, int]:
    names = header.split("\t")
    missing = [n for n in needed if n not in names]
    if missing:
        raise DataFormatError(path, 1, f"header {names} lacks the column(s) {missing} (K-BERT's format)")
    return {n: names.index(n) for n in names}


def _rows(path: str | os.PathLike, needed: tuple[str, ...]):
    path = os.fspath(path)
    report = LoadReport(path)
    lines = read_lines(path)
    first = next(lines, None)
    if first is None:
        raise DataFormatError(path, None, "no examples: the file is empty")
    report.lines_read += 1
    report.structural["header"] += 1
    cols = _columns(path, first[1], needed)
    rows = []
    for number, text in lines:
        report.lines_read += 1
        if not text.strip():
            report.structural["blank"] += 1
            continue
        fields = text.split("\t")
        if len(fields) != len(cols):
            raise DataFormatError(
                path, number, f"expected {len(cols)} tab-separated fields, got {len(fields)}"
            )
        row = {n: fields[i] for n, i in cols.items()}
        empty = empty_fields(row, needed)
        if empty:
            raise DataFormatError(path, number, empty_message(empty))
        rows.append((number, row))
    return path, report, rows


def load_kbert_ner(path: str | os.PathLike) -> LoadedExamples[TokenExample]:
    """``text_a`` (space-separated characters) and ``label`` (as many BIO tags) per line."""
    path, report, rows = _rows(path, ("text_a", "label"))
    out = []
    for number, row in rows:
        words, tags = row["text_a"].split(" "), row["label"].split(" ")
        if len(words) != len(tags):
            raise DataFormatError(path, number, f"{len(words)} characters but {len(tags)} tags")
        bad = [t for t in tags if t != "O" and t[:2] not in ("B-", "I-")]
        if bad:
            raise DataFormatError(path, number, f"tags must be O, B-X or I-X, got {bad[0]!r}")
        out.append(TokenExample(tuple(words), tuple(tags), guid=f"{os.path.basename(path)}:{number}"))
    report.examples = len(out)
    check_not_empty(path, out, report)
    return LoadedExamples(out, report)


def load_kbert_classification(path: str | os.PathLike) -> LoadedExamples[SentenceExample]:
    """``label`` and ``text_a`` per line (``text_b`` too when the header has it)."""
    path, report, rows = _rows(path, ("label", "text_a"))
    out = [
        SentenceExample(
            row["text_a"], row.get("text_b") or None, row["label"], f"{os.path.basename(path)}:{n}"
        )
        for n, row in rows
    ]
    report.examples = len(out)
    check_not_empty(path, out, report)
    return LoadedExamples(out, report)


__all__ = ["load_kbert_classification", "load_kbert_ner"]
