"""Line-level reading shared by the text-format loaders."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from attnlab.tasks.examples import DataFormatError, LoadReport

_BOM = "\ufeff"
# Python's csv module refuses a field over 128 KiB ("field larger than field limit"), yet a long passage is
# data, not an error. 2**31 - 1 is the largest limit every platform accepts (a C long on Windows).
_CSV_FIELD_LIMIT = 2**31 - 1


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` with 1-based line numbers, line ending removed.

    Lines are split on ``\\n`` only (a stray ``\\r`` inside a field stays in the field, a ``\\r\\n``
    ending is removed), which keeps line numbers equal to those an editor or ``sed -n Np`` shows.
    A UTF-8 byte-order mark at the start of the file is dropped: GLUE's own download script writes one
    before the MRPC header. Bytes that are not UTF-8 raise :class:`DataFormatError` naming the line.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(path, lineno, f"not valid UTF-8 ({e.reason} at byte {e.start})") from e
            if lineno == 1 and text.startswith(_BOM):
                text = text[1:]
            if text.endswith("\n"):
                text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
            yield lineno, text


def read_csv_rows(path: str | os.PathLike) -> Iterator[tuple[int, int, list[str]]]:
    """Yield ``(line, lines, row)`` for each record of a quoted CSV file: the 1-based line it starts on (a
    quoted field may span lines), how many lines it took, and its fields. A UTF-8 byte-order mark is dropped.

    A malformed record, or bytes that are not UTF-8, raise :class:`DataFormatError` naming the line.
    """
    path = os.fspath(path)
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    previous_end = 0
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise DataFormatError(path, previous_end + 1, f"not valid CSV ({e})") from None
            except UnicodeDecodeError:
                # the text layer decodes in blocks, so its error knows no line: find it byte by byte
                for _ in read_lines(path):
                    pass
                raise
            yield previous_end + 1, reader.line_num - previous_end, row
            previous_end = reader.line_num


def check_not_empty(path: str | os.PathLike, examples: list, report: LoadReport) -> None:
    """A data file with no record at all (empty, or only a header / blank lines) is an error naming it; a
    file whose records were all skipped (``errors="skip"``) is not: its report says why."""
    if examples or report.n_skipped:
        return
    what = "is empty" if report.lines_read == 0 else f"holds no data ({report.lines_read} structure line(s))"
    raise DataFormatError(os.fspath(path), None, f"no examples: the file {what}")


def empty_fields(values: Mapping[str, Any], names: Iterable[str | None]) -> list[str]:
    """The columns of ``names`` whose value is empty or only white space: a missing text or label, which a
    loader reports (naming the file and line) rather than reading as a text ``""`` or a class ``""``."""
    return [n for n in names if n is not None and isinstance(values.get(n), str) and not values[n].strip()]


def empty_message(columns: Sequence[str]) -> str:
    """The error of `empty_fields`' columns."""
    which = ", ".join(repr(c) for c in columns)
    return f"empty column(s) {which}: every text and label needs a value (a missing one is not a class '')"
