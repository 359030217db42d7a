"""The small records every task loader returns, the load report, and the loaders' error type.

Loaders never drop input silently: a malformed row either raises :class:`DataFormatError` (naming the
file, the 1-based line and what was expected) or, with ``errors="skip"``, is counted in the
:class:`LoadReport` under its reason. Lines a format defines as structure rather than data (a header,
a CoNLL ``-DOCSTART-`` line, blank separators) are counted too, so ``report.lines_read`` always
equals the examples' lines plus everything counted in ``report.skipped`` and ``report.structural``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

logger = logging.getLogger(__name__)

ErrorPolicy = Literal["raise", "skip"]
ERROR_POLICIES = ("raise", "skip")


class DataFormatError(ValueError):
    """A row of a data file does not match its format. The message names file, line and expectation."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class SentenceExample:
    """One single-sentence or sentence-pair classification / regression example (GLUE style).

    ``label`` is the label *name* as written in the file (``"entailment"``, ``"1"``) for classification,
    a float for regression (STS-B), and ``None`` for unlabelled test data. Map names to ids with the
    task's label list (:func:`attnlab.tasks.loaders.glue.glue_task`).
    """

    text_a: str
    text_b: str | None
    label: str | float | None
    guid: str


@dataclass(frozen=True)
class QAExample:
    """One extractive question (SQuAD v1.1 / v2.0).

    ``answers`` holds ``(text, char_start)`` pairs with ``context[char_start:char_start + len(text)]``
    the answer (checked at load time, see :func:`attnlab.tasks.loaders.squad.load_squad`). For a v2.0
    unanswerable question ``answers`` is empty, ``is_impossible`` is True and ``plausible_answers``
    holds the annotators' plausible-but-wrong spans (never to be used as gold).
    """

    id: str
    title: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]
    is_impossible: bool = False
    plausible_answers: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class TokenExample:
    """One sentence for token classification (CoNLL style), tags in IOB2.

    ``document`` is the 0-based index of the document the sentence belongs to (documents are separated
    by ``-DOCSTART-`` lines; a file without them is one document), ``pos`` / ``chunk`` are the extra
    CoNLL-2003 columns when the file has them.
    """

    words: tuple[str, ...]
    tags: tuple[str, ...]
    guid: str = ""
    document: int = 0
    pos: tuple[str, ...] | None = None
    chunk: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.words) != len(self.tags):
            raise ValueError(f"TokenExample {self.guid!r}: {len(self.words)} words but {len(self.tags)} tags")


@dataclass(frozen=True)
class MultipleChoiceExample:
    """One multiple-choice question (SWAG style): a context and candidate continuations.

    ``endings`` are the full second segments as the model sees them (for SWAG, ``sent2 + " " +
    ending_i``, following BERT §4.4: "the given sentence (sentence A) and a possible continuation
    (sentence B)"); ``label`` is the index of the right ending, ``None`` for unlabelled data.
    """

    context: str
    endings: tuple[str, ...]
    label: int | None
    guid: str = ""


@dataclass
class LoadReport:
    """What a loader read, kept and skipped, and why.

    ``skipped`` counts rows of data that were not turned into examples, by reason (only with
    ``errors="skip"``; the default raises instead). ``structural`` counts lines that are format
    structure (``header``, ``blank``, ``docstart``). ``notes`` counts changes made to kept examples
    (for example ``iob1_to_iob2`` tag rewrites), each reason with up to ``max_samples`` sample locations
    in ``samples``.
    """

    path: str
    lines_read: int = 0
    examples: int = 0
    skipped: Counter = field(default_factory=Counter)
    structural: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    samples: dict[str, list[str]] = field(default_factory=dict)
    max_samples: int = 5

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        self._sample(reason, where)

    def note(self, reason: str, where: str, count: int = 1) -> None:
        self.notes[reason] += count
        self._sample(reason, where)

    def _sample(self, reason: str, where: str) -> None:
        bucket = self.samples.setdefault(reason, [])
        if len(bucket) < self.max_samples:
            bucket.append(where)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """One line for logs: ``path: 872 examples from 873 lines; skipped {...}; structure {...}``."""
        parts = [f"{self.path}: {self.examples} examples from {self.lines_read} lines"]
        if self.skipped:
            parts.append(f"skipped {dict(self.skipped)} (e.g. {self._first_samples(self.skipped)})")
        if self.structural:
            parts.append(f"structure {dict(self.structural)}")
        if self.notes:
            parts.append(f"notes {dict(self.notes)}")
        return "; ".join(parts)

    def _first_samples(self, counter: Counter) -> dict[str, list[str]]:
        return {k: self.samples.get(k, [])[:2] for k in counter}


T = TypeVar("T")


class LoadedExamples(list, Generic[T]):
    """A list of examples that also carries the :class:`LoadReport` of the load that produced it."""

    def __init__(self, items: Iterable[T], report: LoadReport):
        super().__init__(items)
        self.report = report
        if report.skipped:  # counted in the report and said out loud: never dropped silently
            logger.warning("skipped rows: %s", report.summary())


def check_error_policy(errors: str) -> None:
    if errors not in ERROR_POLICIES:
        raise ValueError(f"errors must be one of {ERROR_POLICIES}, got {errors!r}")


def fail_or_skip(report: LoadReport, errors: str, line: int | None, reason: str, message: str) -> None:
    """Raise :class:`DataFormatError` (``errors="raise"``) or count the row under ``reason``."""
    if errors == "raise":
        raise DataFormatError(report.path, line, message)
    report.skip(reason, f"{report.path}:{line}" if line is not None else report.path)


@dataclass(frozen=True)
class LabelSetDiff:
    """How two splits' label sets differ (see :func:`compare_label_sets`)."""

    only_in_first: frozenset
    only_in_second: frozenset
    first_name: str = "train"
    second_name: str = "dev"

    @property
    def same(self) -> bool:
        return not self.only_in_first and not self.only_in_second

    def describe(self) -> str:
        if self.same:
            return f"{self.first_name} and {self.second_name} have the same labels"
        parts = []
        if self.only_in_second:
            parts.append(f"labels only in {self.second_name}: {sorted(map(str, self.only_in_second))}")
        if self.only_in_first:
            parts.append(f"labels only in {self.first_name}: {sorted(map(str, self.only_in_first))}")
        return "; ".join(parts)


def _labels_of(examples_or_labels: Iterable) -> set:
    out = set()
    for item in examples_or_labels:
        if isinstance(item, TokenExample):
            out.update(item.tags)
        elif hasattr(item, "label"):
            if item.label is not None:
                out.add(item.label)
        elif item is not None:
            out.add(item)
    return out


def compare_label_sets(
    first: Iterable, second: Iterable, first_name: str = "train", second_name: str = "dev"
) -> LabelSetDiff:
    """Compare the labels of two splits (examples, or plain labels; TokenExample counts its tags).

    Unlabelled examples (``label is None``) are ignored.
    """
    a, b = _labels_of(first), _labels_of(second)
    return LabelSetDiff(frozenset(a - b), frozenset(b - a), first_name, second_name)


def check_label_sets(
    first: Iterable,
    second: Iterable,
    first_name: str = "train",
    second_name: str = "dev",
    allow_missing: bool = True,
) -> LabelSetDiff:
    """Raise ``ValueError`` naming the labels when ``second`` has labels ``first`` never shows.

    Labels seen in ``first`` but absent from ``second`` (a small dev set missing a rare class) only
    raise with ``allow_missing=False``. Returns the diff either way.
    """
    diff = compare_label_sets(first, second, first_name, second_name)
    if diff.only_in_second or (not allow_missing and diff.only_in_first):
        raise ValueError(f"label sets differ: {diff.describe()}")
    return diff
