"""CoNLL-2003 style column files (Tjong Kim Sang and De Meulder, 2003): one token per line.

Each token line holds whitespace-separated columns, ``word POS chunk NER`` for CoNLL-2003; a blank
line ends a sentence; a line whose first column is ``-DOCSTART-`` starts a new document and is not a
sentence (dropped, counted as ``docstart``, and each sentence keeps the index of its document).

The original CoNLL-2003 files tag entities in **IOB1** (``I-X`` everywhere; ``B-X`` only where two
entities of the same type touch); most redistributed copies use **IOB2** (every entity starts with
``B-X``). ``scheme="iob1"`` or ``"auto"`` (default) rewrites to IOB2: an ``I-X`` that does not continue
an entity of type X (sentence start, after ``O``, after another type) becomes ``B-X``. On IOB2 input this
changes nothing, so ``"auto"`` is safe for either; the number of rewritten tags is counted in
``report.notes["iob1_to_iob2"]``. ``scheme="iob2"`` instead raises on such a tag: use it to validate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from attnlab.tasks.examples import (
    DataFormatError,
    ErrorPolicy,
    LoadedExamples,
    LoadReport,
    TokenExample,
    check_error_policy,
    fail_or_skip,
)
from attnlab.tasks.loaders._lines import check_not_empty, read_lines

Scheme = Literal["auto", "iob1", "iob2"]
_SCHEMES = ("auto", "iob1", "iob2")
_TAG = re.compile(r"^(O|[BI]-\S+)$")
DOCSTART = "-DOCSTART-"


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite IOB1 tags as IOB2: ``I-X`` not continuing an entity of type X becomes ``B-X``."""
    out: list[str] = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return out


def iob2_violations(tags: Sequence[str]) -> list[int]:
    """Positions of ``I-X`` tags that do not continue an entity of type X (invalid in IOB2)."""
    bad, previous = [], "O"
    for i, tag in enumerate(tags):
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            bad.append(i)
        previous = tag
    return bad


def load_conll(
    path: str | os.PathLike,
    tag_column: int = -1,
    scheme: Scheme = "auto",
    labels: Iterable[str] | None = None,
    errors: ErrorPolicy = "raise",
) -> LoadedExamples[TokenExample]:
    """Load a CoNLL column file into one :class:`TokenExample` per sentence.

    Args:
        path: the file.
        tag_column: which column holds the tags (default the last one: NER in CoNLL-2003).
        scheme: ``"auto"``/``"iob1"`` convert to IOB2, ``"iob2"`` validates (see the module docstring).
        labels: the allowed tags (after conversion); a tag outside raises (``unknown_label``). ``None``
            accepts any well-formed ``O`` / ``B-X`` / ``I-X`` tag.
        errors: ``"raise"`` or ``"skip"``; with ``"skip"`` a sentence with a bad line is dropped and
            counted (``missing_columns``, ``bad_tag``, ``unknown_label``, ``iob2_violation``).

    Every token line must have the same number of columns as the file's first token line. Four-column
    files also fill ``pos`` (column 1) and ``chunk`` (column 2).
    """
    check_error_policy(errors)
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    allowed = frozenset(labels) if labels is not None else None
    path = os.fspath(path)
    report = LoadReport(path)
    examples: list[TokenExample] = []
    n_columns: int | None = None
    document = 0
    seen_docstart = seen_tokens = False
    rows: list[tuple[int, list[str]]] = []
    bad_sentence = False

    def flush() -> None:
        nonlocal rows, bad_sentence
        if rows and not bad_sentence:
            sentence = _sentence(
                rows, path, tag_column, scheme, allowed, errors, report, document, len(examples)
            )
            if sentence is not None:
                examples.append(sentence)
        rows, bad_sentence = [], False

    for lineno, text in read_lines(path):
        report.lines_read += 1
        fields = text.split()
        if not fields:
            report.structural["blank"] += 1
            flush()
            continue
        if fields[0] == DOCSTART:
            report.structural["docstart"] += 1
            flush()
            if seen_docstart or seen_tokens:
                document += 1
            seen_docstart = True
            continue
        seen_tokens = True
        if n_columns is None:
            n_columns = len(fields)
            if n_columns < 2:
                raise DataFormatError(
                    path, lineno, f"expected at least 2 columns (word ... tag), got {fields}"
                )
        if len(fields) != n_columns:
            fail_or_skip(report, errors, lineno, "missing_columns",
                         f"expected {n_columns} whitespace-separated columns like the first token line, "
                         f"got {len(fields)}: {text!r}")  # fmt: skip
            bad_sentence = True
        rows.append((lineno, fields))
    flush()
    report.examples = len(examples)
    check_not_empty(path, examples, report)
    return LoadedExamples(examples, report)


def _sentence(
    rows: list[tuple[int, list[str]]],
    path: str,
    tag_column: int,
    scheme: str,
    allowed: frozenset | None,
    errors: str,
    report: LoadReport,
    document: int,
    index: int,
) -> TokenExample | None:
    words = [f[0] for _, f in rows]
    tags = [f[tag_column] for _, f in rows]
    for (lineno, _), tag in zip(rows, tags):
        if not _TAG.match(tag):
            fail_or_skip(report, errors, lineno, "bad_tag", f"tag {tag!r} is not 'O', 'B-TYPE' or 'I-TYPE'")
            return None
    bad = iob2_violations(tags)
    if bad and scheme == "iob2":
        lineno = rows[bad[0]][0]
        fail_or_skip(report, errors, lineno, "iob2_violation",
                     f"tag {tags[bad[0]]!r} does not continue an entity of its type (invalid IOB2; "
                     f"use scheme='iob1' or 'auto' to convert)")  # fmt: skip
        return None
    if bad:
        tags = iob1_to_iob2(tags)
        report.note("iob1_to_iob2", f"{path}:{rows[bad[0]][0]}", count=len(bad))
    if allowed is not None:
        for (lineno, _), tag in zip(rows, tags):
            if tag not in allowed:
                fail_or_skip(report, errors, lineno, "unknown_label",
                             f"unknown tag {tag!r}; expected one of {sorted(allowed)}")  # fmt: skip
                return None
    four = len(rows[0][1]) == 4
    return TokenExample(
        words=tuple(words),
        tags=tuple(tags),
        guid=f"{os.path.basename(path)}:{rows[0][0]}",
        document=document,
        pos=tuple(f[1] for _, f in rows) if four else None,
        chunk=tuple(f[2] for _, f in rows) if four else None,
    )


def documents(examples: Iterable[TokenExample]) -> list[list[TokenExample]]:
    """Group sentences by their ``document`` index, in order (for document-level context)."""
    out: list[list[TokenExample]] = []
    current = None
    for example in examples:
        if not out or example.document != current:
            out.append([])
            current = example.document
        out[-1].append(example)
    return out
