"""SQuAD v1.1 and v2.0 JSON (Rajpurkar et al., 2016; 2018).

Layout: ``{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible" (v2.0), "plausible_answers" (v2.0)}]}]}]}``.

Every answer is checked against its context: its text must not be empty and
``context[answer_start:answer_start + len(text)]`` must equal ``text``. A bad answer raises
(``errors="raise"``) or, with ``errors="skip"``, is dropped (not the question) and counted as
``empty_answer`` or ``answer_offset_mismatch``; a question left without answers is then skipped and
counted as ``no_valid_answer``. Unlike the GLUE loaders there are no line numbers in
a JSON file, so errors name the file and the JSON path (``data[3].paragraphs[0].qas[5]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping

from attnlab.tasks.examples import (
    DataFormatError,
    ErrorPolicy,
    LoadedExamples,
    LoadReport,
    QAExample,
    check_error_policy,
)
from attnlab.tasks.loaders._lines import check_not_empty


def _need(obj: object, key: str, kind: type | tuple[type, ...], path: str, where: str):
    if not isinstance(obj, Mapping) or key not in obj:
        raise DataFormatError(path, None, f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise DataFormatError(path, None, f"{where}.{key}: expected {kind}, got {type(value).__name__}")
    return value


def _optional(obj: Mapping, key: str, kind: type, default, path: str, where: str):
    """``obj[key]`` when present (it must be a ``kind``), else ``default``."""
    if key not in obj:
        return default
    value = obj[key]
    if not isinstance(value, kind):
        what = {bool: "a boolean (true or false)", list: "a list"}.get(kind, kind.__name__)
        raise DataFormatError(path, None, f"{where}.{key} must be {what}, got {json.dumps(value)}")
    return value


def _answers(
    raw: list, context: str, path: str, where: str, errors: str, report: LoadReport
) -> tuple[tuple[str, int], ...]:
    out = []
    for k, answer in enumerate(raw):
        at = f"{where}[{k}]"
        text = _need(answer, "text", str, path, at)
        start = _need(answer, "answer_start", int, path, at)
        if not text.strip():
            # an empty answer would train the model to point at nothing and score every prediction 0
            message = f"{at}.text: empty answer text (an unanswerable question has is_impossible: true)"
            if errors == "raise":
                raise DataFormatError(path, None, message)
            report.skip("empty_answer", f"{path}:{at}")
            continue
        if start < 0 or context[start : start + len(text)] != text:
            message = (
                f"{at}: answer {text!r} is not at character {start} of the context "
                f"(found {context[start : start + len(text)]!r})"
            )
            if errors == "raise":
                raise DataFormatError(path, None, message)
            report.skip("answer_offset_mismatch", f"{path}:{at}")
            continue
        out.append((text, start))
    return tuple(out)


def _reject(errors: str, report: LoadReport, path: str, where: str, reason: str, message: str) -> None:
    """A question that cannot be used: a `DataFormatError` (``errors="raise"``) or a skip counted under
    ``reason`` in ``report``; the caller moves on to the next question."""
    if errors == "raise":
        raise DataFormatError(path, None, message)
    report.skip(reason, f"{path}:{where}")


def iter_squad(
    path: str | os.PathLike,
    errors: ErrorPolicy = "raise",
    report: LoadReport | None = None,
    require_answers: bool = False,
) -> Iterator[QAExample]:
    """Yield the questions of a SQuAD file in file order (see :func:`load_squad`)."""
    check_error_policy(errors)
    path = os.fspath(path)
    report = report if report is not None else LoadReport(path)
    first_with_id: dict[str, str] = {}  # id -> the JSON path of the question that has it
    with open(path, "rb") as f:
        data = f.read()
    try:
        dataset = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataFormatError(path, line, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataFormatError(path, e.lineno, f"not valid JSON: {e.msg} (column {e.colno})") from e
    articles = _need(dataset, "data", list, path, "top level")
    for i, article in enumerate(articles):
        title = article.get("title", "") if isinstance(article, Mapping) else ""
        for j, paragraph in enumerate(_need(article, "paragraphs", list, path, f"data[{i}]")):
            where_p = f"data[{i}].paragraphs[{j}]"
            context = _need(paragraph, "context", str, path, where_p)
            for k, qa in enumerate(_need(paragraph, "qas", list, path, where_p)):
                where = f"{where_p}.qas[{k}]"
                report.lines_read += 1  # one "record" per question: JSON has no meaningful lines
                qid = _need(qa, "id", str, path, where)
                question = _need(qa, "question", str, path, where)
                if not question.strip() or not context.strip():
                    field = "question" if not question.strip() else "context"
                    message = f"{where}: empty {field} (a question needs its text and its passage)"
                    _reject(errors, report, path, where, f"empty_{field}", message)
                    continue
                # predictions and scores are keyed by id: a repeated one silently replaces the first's
                if qid in first_with_id:
                    message = f"{where}.id {qid!r} repeats {first_with_id[qid]}.id; ids must be unique"
                    _reject(errors, report, path, where, "duplicate_id", message)
                    continue
                first_with_id[qid] = where
                # bool("false") is True: only a JSON boolean says whether a question is answerable
                impossible = _optional(qa, "is_impossible", bool, False, path, where)
                raw_answers = _optional(qa, "answers", list, [], path, where)
                answers = _answers(raw_answers, context, path, f"{where}.answers", errors, report)
                plausible = _answers(
                    _optional(qa, "plausible_answers", list, [], path, where),
                    context,
                    path,
                    f"{where}.plausible_answers",
                    errors,
                    report,
                )
                if require_answers and not impossible and not raw_answers:
                    # a training question needs its answer (or is_impossible: true, SQuAD 2.0) to be learned
                    message = (
                        f"{where}.answers: a training question needs at least one answer "
                        "(or is_impossible: true for an unanswerable one, SQuAD 2.0)"
                    )
                    _reject(errors, report, path, where, "no_answer", message)
                    continue
                if impossible and answers:
                    message = f"{where}: is_impossible is true but the question has {len(answers)} answer(s)"
                    _reject(errors, report, path, where, "impossible_with_answers", message)
                    continue
                if not impossible and not answers and qa.get("answers"):
                    # every gold answer was dropped for a bad offset: nothing left to train or score on
                    report.skip("no_valid_answer", f"{path}:{where}")
                    continue
                report.examples += 1
                yield QAExample(
                    id=qid,
                    title=title,
                    context=context,
                    question=question,
                    answers=answers,
                    is_impossible=impossible,
                    plausible_answers=plausible,
                )


def load_squad(
    path: str | os.PathLike, errors: ErrorPolicy = "raise", require_answers: bool = False
) -> LoadedExamples[QAExample]:
    """Load a SQuAD v1.1 or v2.0 JSON file into :class:`QAExample` records (one per question).

    ``report.lines_read`` counts questions read; ``report.skipped`` the answers and questions dropped
    with ``errors="skip"``. Test-style files whose questions carry no ``answers`` load with
    ``answers=()``, unless ``require_answers`` (training data): then a question without answers and
    without ``is_impossible: true`` is an error (counted as ``no_answer`` with ``errors="skip"``).
    Question ids must be unique in the file (``duplicate_id``).
    """
    report = LoadReport(os.fspath(path))
    examples = list(iter_squad(path, errors=errors, report=report, require_answers=require_answers))
    check_not_empty(path, examples, report)
    return LoadedExamples(examples, report)
