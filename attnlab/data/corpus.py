"""Corpus ingestion: turn files in the usual pre-training formats into a stream of documents.

A *document* is a list of sentences (strings). Formats (``fmt``):

``"sentences"``  BERT's format: one sentence per line, a blank line between documents.
``"lines"``      one document per line; the line is split into sentences with :func:`split_sentences`.
``"jsonl"``      one JSON object per line; its ``text_field`` holds a document (split into paragraphs on
                 blank lines, then into sentences).
``"text"``       unsplit running text, one document per file (e.g. a Gutenberg book): wrapped lines are
                 joined into paragraphs (blank line = paragraph break) and paragraphs split into sentences.

Paths may be files or directories (walked recursively, in sorted order, hidden files skipped, so the
document order is deterministic). Files ending in ``.gz`` are decompressed on the fly. Lines are read
as bytes and decoded as UTF-8: bytes that are not UTF-8 are an error naming the file, line and byte offset
(``errors="strict"``), or, with ``errors="replace"``, replaced by U+FFFD and counted per file in
:class:`IngestStats`. CRLF and CR line ends and a leading byte-order mark are handled.

Everything streams: at most one document is held in memory at a time.

With ``split=False`` the formats that need sentence splitting yield :class:`Paragraphs` instead (a
document whose paragraphs are not split yet); :func:`~attnlab.data.shards.prepare_shards` then splits
them inside its worker processes, so that the reading process does little more than read.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.data.sentences import split_paragraphs, split_sentences

Document = list[str]


class Paragraphs(list):
    """A document given as paragraphs whose sentences are not split yet (see :func:`as_sentences`)."""


def as_sentences(doc: Document) -> Document:
    """The sentences of ``doc``: splits :class:`Paragraphs`, returns any other document unchanged."""
    if isinstance(doc, Paragraphs):
        return [s for para in doc for s in split_sentences(para)]
    return doc


FORMATS = ("sentences", "lines", "jsonl", "text")
ERRORS = ("strict", "replace")  # what bytes that are not UTF-8 do: stop the reading, or become U+FFFD

_REPLACEMENT_BYTES = "\ufffd".encode()


@dataclass
class IngestStats:
    """Counts gathered while reading; ``undecodable`` maps a file to its number of replaced byte runs (read
    with ``errors="replace"``)."""

    files: int = 0
    documents: int = 0
    sentences: int = 0
    empty_documents: int = 0
    undecodable: dict[str, int] = field(default_factory=dict)

    @property
    def undecodable_total(self) -> int:
        return sum(self.undecodable.values())

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "documents": self.documents,
            "sentences": self.sentences,
            "empty_documents": self.empty_documents,
            "undecodable": dict(self.undecodable),
        }


def list_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and directories (recursively, sorted, hidden entries skipped) into a file list; a
    missing path, or a directory with no files to read, is an error naming it."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(Path(root) / f for f in sorted(files) if not f.startswith("."))
            if not found:
                raise FileNotFoundError(
                    f"corpus folder {p}: holds no files to read (hidden files and folders are skipped)"
                )
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"corpus path {str(p)!r} does not exist")
    return out


def describe_empty(paths: str | os.PathLike | Iterable[str | os.PathLike], files: list[Path]) -> str:
    """The error for a corpus in which no text was found: the paths given and what their files hold."""
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    where = ", ".join(str(p) for p in given) or "(no corpus paths given)"
    sizes = [f.stat().st_size for f in files]
    if len(files) == 1:
        found = "the file is empty" if sizes[0] == 0 else f"the file's {sizes[0]} bytes are blank lines only"
    else:
        empty = sum(size == 0 for size in sizes)
        blank = len(files) - empty
        found = f"{len(files)} files: {empty} empty, {blank} with blank lines or empty documents only"
    return f"{where}: no text to read ({found})"


def _read_lines(path: Path, stats: IngestStats, errors: str = "strict") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` with line ends stripped. Bytes that are not UTF-8: a ValueError naming
    the file, line and byte offset (``errors="strict"``; of the decompressed bytes for ``.gz``), or U+FFFD,
    counted in ``stats`` (``"replace"``)."""
    opener = gzip.open if path.suffix == ".gz" else open
    bad = 0
    offset = 0  # bytes before this line
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                start, offset = offset, offset + len(raw)
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw, start = raw[3:], start + 3
                raw = raw.rstrip(b"\n").rstrip(b"\r")
                try:
                    text = raw.decode("utf-8", errors=errors)
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"{path}:{lineno}: not valid UTF-8 (byte {start + e.start}: {e.reason}); "
                        "convert the file to UTF-8"
                    ) from None
                if "\ufffd" in text:
                    bad += text.count("\ufffd") - raw.count(_REPLACEMENT_BYTES)
                # Lone CRs (old Mac line ends) separate lines too (a CR is never part of a UTF-8 sequence).
                for piece in text.split("\r") if "\r" in text else (text,):
                    yield lineno, piece
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"{path}: cannot read: {e}") from e
    finally:
        if bad:
            stats.undecodable[str(path)] = stats.undecodable.get(str(path), 0) + bad


def _docs_sentences(path: Path, stats: IngestStats, errors: str) -> Iterator[Document]:
    doc: Document = []
    for _, line in _read_lines(path, stats, errors):
        line = line.strip()
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _docs_lines(path: Path, stats: IngestStats, split: bool, errors: str) -> Iterator[Document]:
    for _, line in _read_lines(path, stats, errors):
        if line.strip():
            yield split_sentences(line) if split else Paragraphs([" ".join(line.split())])


def _split_text(text: str, split: bool = True) -> Document:
    paragraphs = Paragraphs(split_paragraphs(text.splitlines()))
    return as_sentences(paragraphs) if split else paragraphs


def _docs_jsonl(
    path: Path, stats: IngestStats, text_field: str, split: bool, errors: str
) -> Iterator[Document]:
    for lineno, line in _read_lines(path, stats, errors):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: invalid JSON: {e.msg}") from e
        if not isinstance(obj, dict) or text_field not in obj:
            keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise ValueError(f"{path}:{lineno}: expected an object with a {text_field!r} field, got {keys}")
        text = obj[text_field]
        if not isinstance(text, str):
            raise ValueError(
                f"{path}:{lineno}: field {text_field!r} must be a string, got {type(text).__name__}"
            )
        yield _split_text(text, split)


def _docs_text(path: Path, stats: IngestStats, split: bool, errors: str) -> Iterator[Document]:
    paragraphs = Paragraphs(split_paragraphs(line for _, line in _read_lines(path, stats, errors)))
    yield as_sentences(paragraphs) if split else paragraphs


def read_documents(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    fmt: str = "sentences",
    *,
    text_field: str = "text",
    stats: IngestStats | None = None,
    split: bool = True,
    errors: str = "strict",
    allow_empty: bool = False,
) -> Iterator[Document]:
    """Stream the documents of ``paths`` in a deterministic order; empty documents are counted and skipped.
    A corpus without a single document is an error naming the paths and what their files hold (a user gave
    the wrong file), unless ``allow_empty``.

    Pass an :class:`IngestStats` to collect counts (it is filled while iterating; ``sentences`` counts
    paragraphs for unsplit documents). ``split=False``: yield :class:`Paragraphs` for the formats that
    need sentence splitting, to be split later (in parallel) by :func:`as_sentences`. ``errors``: bytes that
    are not UTF-8 raise a ValueError naming the file, line and byte (``"strict"``), or are replaced by
    U+FFFD and counted in ``stats.undecodable`` (``"replace"``, for a caller that reports the count).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if errors not in ERRORS:
        raise ValueError(f"unknown errors={errors!r}; expected one of {', '.join(ERRORS)}")
    stats = stats if stats is not None else IngestStats()
    files = list_files(paths)
    yielded = 0
    for path in files:
        stats.files += 1
        if fmt == "sentences":
            docs = _docs_sentences(path, stats, errors)
        elif fmt == "lines":
            docs = _docs_lines(path, stats, split, errors)
        elif fmt == "jsonl":
            docs = _docs_jsonl(path, stats, text_field, split, errors)
        else:
            docs = _docs_text(path, stats, split, errors)
        for doc in docs:
            if not doc:
                stats.empty_documents += 1
                continue
            stats.documents += 1
            stats.sentences += len(doc)
            yielded += 1
            yield doc
    if not yielded and not allow_empty:
        raise ValueError(describe_empty(paths, files))


def read_hf_dataset(
    name: str,
    *,
    split: str = "train",
    text_field: str = "text",
    config: str | None = None,
    streaming: bool = True,
    stats: IngestStats | None = None,
    **load_kwargs,
) -> Iterator[Document]:
    """Stream documents from a Hugging Face ``datasets`` dataset (one record = one document).

    ``datasets`` is optional and imported only here. Records' ``text_field`` is split into paragraphs
    and sentences like the ``"jsonl"`` format.
    """
    try:
        import datasets  # noqa: PLC0415 (optional dependency)
    except ImportError as e:
        raise ImportError(
            "read_hf_dataset needs the optional 'datasets' package (pip install datasets); "
            "alternatively export the corpus to JSON lines and use fmt='jsonl'"
        ) from e
    stats = stats if stats is not None else IngestStats()
    ds = datasets.load_dataset(name, config, split=split, streaming=streaming, **load_kwargs)
    for i, record in enumerate(ds):
        if text_field not in record:
            raise ValueError(f"{name}[{split}] record {i}: no field {text_field!r}; fields: {sorted(record)}")
        doc = _split_text(record[text_field])
        if not doc:
            stats.empty_documents += 1
            continue
        stats.documents += 1
        stats.sentences += len(doc)
        yield doc
