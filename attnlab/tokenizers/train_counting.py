"""Counting the words of a training corpus: streamed, in parallel, with memory bounded by the vocabulary.

Every trainer starts from the same thing, a ``{word: count}`` table of the pieces that the tokenizer's
normaliser and pre-tokeniser produce. This module builds it:

* files are read in blocks of ``block_bytes`` cut at line ends, so memory never depends on corpus size,
  only on the number of distinct words (one ``Counter`` per block in flight plus the running total);
* blocks are counted in worker processes (``multiprocessing``, all cores by default) and their counters
  merged in the parent;
* the expensive pipeline (normalise + pre-tokenise, pure Python) runs once per *distinct* chunk of
  text, not once per occurrence, with a per-worker cache across blocks. Chunks are cut at spaces and
  tabs only: ``"bare"`` chunks are the runs between them (right for BERT's pipeline, which drops
  whitespace); ``"spaced"`` chunks keep the spaces before each run, so that GPT-2's ``" ?\\p{L}+"`` and
  Metaspace's ``"▁"`` still see them. Either is exact when the pipeline is *compositional* (pre-tokenising
  a line gives the concatenation of pre-tokenising its chunks); :func:`choose_unit` checks that on a
  sample of the corpus, bare first, and the counters fall back to whole lines when both fail;
* undecodable bytes are replaced by U+FFFD, counted, and reported once per file in a warning that names
  the file and the byte offset of the first bad sequence.

Lines are taken without their terminator (``\\n``, ``\\r\\n`` or ``\\r``), as one text each.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import regex

__all__ = [
    "PreTokenize",
    "CorpusStats",
    "check_files",
    "count_words_in_files",
    "count_words_in_texts",
    "is_chunk_compositional",
    "choose_unit",
]

#: A pre-tokeniser as the counters see it: text -> pieces (``str``) or ``(piece, offsets)`` pairs.
PreTokenize = Callable[[str], Sequence[Any]]

# Units of counting. Chunks are cut at spaces and tabs only (every pipeline treats both as separators;
# rarer whitespace and controls stay inside a chunk, where the pipeline sees them); none crosses a line.
_UNIT_RES = {
    "bare": regex.compile(r"[^ \t\r\n]+"),  # the runs between spaces and tabs
    "spaced": regex.compile(r"[ \t]*[^ \t\r\n]+|[ \t]+"),  # each run with the spaces before it
    "line": regex.compile(r"[^\r\n]+"),
}
_CHUNK_RE = _UNIT_RES["spaced"]
_LINE_RE = _UNIT_RES["line"]
_CACHE_LIMIT = 500_000  # chunks whose pieces a worker remembers across blocks
_REPLACEMENT_BYTES = "\ufffd".encode()


@dataclass
class CorpusStats:
    """What the counters saw: bytes read, lines, undecodable sequences replaced per file."""

    bytes_read: int = 0
    lines: int = 0
    replaced: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.replaced is None:
            self.replaced = {}


def _pieces(pre_tokenize: PreTokenize | None, text: str) -> list[str]:
    """The word strings that ``pre_tokenize`` makes of ``text`` (offsets dropped)."""
    if pre_tokenize is None:
        return text.split()
    out = pre_tokenize(text)
    return [p if isinstance(p, str) else p[0] for p in out]


def is_chunk_compositional(
    pre_tokenize: PreTokenize | None, lines: Iterable[str], limit: int = 1000, unit: str = "spaced"
) -> bool:
    """Whether pre-tokenising each line equals pre-tokenising its chunks (``unit``) one by one.

    Checked on at most ``limit`` lines; ``True`` means counting chunks gives exactly the counts that per-line
    pre-tokenisation would.
    """
    if pre_tokenize is None:
        return True
    pattern = _UNIT_RES[unit]
    for k, line in enumerate(lines):
        if k >= limit:
            break
        whole = _pieces(pre_tokenize, line)
        parts = [p for chunk in pattern.findall(line) for p in _pieces(pre_tokenize, chunk)]
        if whole != parts:
            return False
    return True


def choose_unit(pre_tokenize: PreTokenize | None, lines: Sequence[str]) -> str:
    """The coarsest exact unit of counting for this pipeline on these sample lines: bare, spaced or line."""
    for unit in ("bare", "spaced"):
        if is_chunk_compositional(pre_tokenize, lines, unit=unit):
            return unit
    return "line"


def _count_text(text: str, pre_tokenize: PreTokenize | None, unit: str) -> Counter[str]:
    """Word counts of ``text`` (any number of lines), pre-tokenising each distinct unit once."""
    if pre_tokenize is None:
        return Counter(text.split())
    words: Counter[str] = Counter()
    units = Counter(_UNIT_RES[unit].findall(text))
    cache: dict[str, tuple[str, ...]] = _WORKER_STATE.setdefault("cache", {})
    use_cache = unit != "line"
    for chunk, n in units.items():
        pieces = cache.get(chunk) if use_cache else None
        if pieces is None:
            pieces = tuple(_pieces(pre_tokenize, chunk))
            if use_cache and len(cache) < _CACHE_LIMIT:
                cache[chunk] = pieces
        for piece in pieces:
            words[piece] += n
    return words


# ----------------------------------------------------------------------------------------------------------
# Files


def check_files(files: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Validate training files up front: each must exist and be a regular file. Returns them as ``str``."""
    paths = [os.fspath(f) for f in files]
    if not paths:
        raise ValueError("no training files given: expected at least one path")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        shown = ", ".join(repr(p) if len(p) <= 200 else repr(p[:200]) + "..." for p in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise FileNotFoundError(
            f"training file(s) not found: {shown}{more} (a list or tuple of strings is read as file names; "
            "pass texts as an iterator, e.g. iter(texts), or use train_from_iterator)"
        )
    not_files = [p for p in paths if not os.path.isfile(p)]
    if not_files:
        raise ValueError(f"training path(s) are not regular files: {', '.join(not_files)}")
    return paths


def _blocks(path: str, block_bytes: int) -> Iterator[tuple[str, int, int]]:
    """Cut ``path`` into ``(path, start, end)`` byte ranges of about ``block_bytes`` ending at line ends."""
    size = os.path.getsize(path)
    start = 0
    with open(path, "rb") as f:
        while start < size:
            end = start + block_bytes
            if end >= size:
                end = size
            else:
                f.seek(end)
                f.readline()  # move to the end of the current line
                end = min(f.tell(), size)
            yield path, start, end
            start = end


def _read_block(path: str, start: int, end: int) -> tuple[str, int, int]:
    """Decode bytes ``[start, end)`` of ``path``: (text, sequences replaced, offset of the first bad byte)."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    try:
        text = data.decode("utf-8")
        replaced, first_bad = 0, -1
    except UnicodeDecodeError as err:
        text = data.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - data.count(_REPLACEMENT_BYTES)
        first_bad = start + err.start
    if start == 0 and text.startswith("\ufeff"):  # a UTF-8 byte-order mark is not text
        text = text[1:]
    return text, replaced, first_bad


_WORKER_STATE: dict[str, Any] = {}


def _init_worker(pre_tokenize: PreTokenize | None, unit: str) -> None:
    _WORKER_STATE["pre_tokenize"] = pre_tokenize
    _WORKER_STATE["unit"] = unit
    _WORKER_STATE["cache"] = {}


def _count_block_task(task: tuple[str, int, int]) -> tuple[str, int, int, int, int, Counter[str]]:
    path, start, end = task
    text, replaced, first_bad = _read_block(path, start, end)
    words = _count_text(text, _WORKER_STATE["pre_tokenize"], _WORKER_STATE["unit"])
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return path, end - start, lines, replaced, first_bad, words


def _count_texts_task(texts: list[str]) -> tuple[str, int, int, int, int, Counter[str]]:
    words: Counter[str] = Counter()
    nbytes = 0
    for text in texts:
        nbytes += len(text)
        words.update(_count_text(text, _WORKER_STATE["pre_tokenize"], _WORKER_STATE["unit"]))
    return "", nbytes, len(texts), 0, -1, words


def _resolve_processes(processes: int | None) -> int:
    if processes is None or processes <= 0:
        return os.cpu_count() or 1
    return processes


def _pool(processes: int, pre_tokenize: PreTokenize | None, unit: str) -> Any:
    # fork shares the (possibly large) pipeline objects without pickling them; spawn elsewhere.
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    return mp.get_context(method).Pool(processes, initializer=_init_worker, initargs=(pre_tokenize, unit))


def _merge_results(
    results: Iterable[tuple[str, int, int, int, int, Counter[str]]],
    stats: CorpusStats,
    progress: Any,
    first_bad: dict[str, int],
) -> Counter[str]:
    total: Counter[str] = Counter()
    for path, nbytes, lines, replaced, bad_at, words in results:
        if total:
            total.update(words)
        else:
            total = words
        stats.bytes_read += nbytes
        stats.lines += lines
        if replaced:
            stats.replaced[path] = stats.replaced.get(path, 0) + replaced  # type: ignore[index]
            if bad_at >= 0 and (path not in first_bad or bad_at < first_bad[path]):
                first_bad[path] = bad_at
        if progress is not None:
            progress.update(nbytes)
    return total


def _sample_lines(paths: Sequence[str], limit: int = 1000, max_bytes: int = 1 << 20) -> list[str]:
    lines: list[str] = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read(max_bytes)
        lines.extend(_LINE_RE.findall(data.decode("utf-8", errors="replace")))
        if len(lines) >= limit:
            break
    return lines[:limit]


def count_words_in_files(
    files: Sequence[str | os.PathLike[str]],
    pre_tokenize: PreTokenize | None = None,
    processes: int | None = None,
    block_bytes: int = 4 << 20,
    show_progress: bool = True,
    stats: CorpusStats | None = None,
) -> Counter[str]:
    """Count the words of text files, streamed in blocks and in parallel.

    Args:
        files: UTF-8 text files; every line is one text.
        pre_tokenize: ``text -> pieces`` (a tokenizer's ``pre_tokenize_str``); ``None`` splits on whitespace.
        processes: worker processes (``None`` or ``<= 0``: all cores; 1: in this process).
        block_bytes: bytes per unit of work; bounds memory per worker.
        show_progress: a tqdm bar over bytes read.
        stats: filled with bytes, lines and replaced sequences when given.

    Raises:
        FileNotFoundError: a file does not exist (all missing files are named).
        ValueError: no files, or the files hold no words (the files are named).
    """
    paths = check_files(files)
    stats = stats if stats is not None else CorpusStats()
    unit = choose_unit(pre_tokenize, _sample_lines(paths))
    if unit == "line":
        warnings.warn(
            "the pre-tokeniser is not whitespace-compositional on this corpus; counting whole lines "
            "(exact, but slower)",
            stacklevel=2,
        )
    tasks = [b for p in paths for b in _blocks(p, block_bytes)]
    total_bytes = sum(os.path.getsize(p) for p in paths)
    progress = _progress(total_bytes, "count words", show_progress)
    first_bad: dict[str, int] = {}
    nproc = min(_resolve_processes(processes), max(1, len(tasks)))
    try:
        if nproc == 1:
            _init_worker(pre_tokenize, unit)
            words = _merge_results(map(_count_block_task, tasks), stats, progress, first_bad)
        else:
            with _pool(nproc, pre_tokenize, unit) as pool:
                results = pool.imap_unordered(_count_block_task, tasks)
                words = _merge_results(results, stats, progress, first_bad)
    finally:
        if progress is not None:
            progress.close()
    for path, n in sorted(stats.replaced.items()):  # type: ignore[union-attr]
        warnings.warn(
            f"{path}: {n} undecodable byte sequence(s) replaced by U+FFFD "
            f"(first at byte offset {first_bad.get(path, -1)}); expected UTF-8 text",
            UnicodeWarning,
            stacklevel=2,
        )
    if not words:
        raise ValueError(f"empty corpus: no words found in {', '.join(paths)}")
    return words


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"training texts must be str, got {type(t).__name__}")
        batch.append(t)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def count_words_in_texts(
    texts: Iterable[str],
    pre_tokenize: PreTokenize | None = None,
    processes: int | None = 1,
    batch_size: int = 10_000,
    show_progress: bool = True,
    stats: CorpusStats | None = None,
) -> Counter[str]:
    """Count the words of an iterable of texts (each text may hold several lines).

    The iterable is consumed once, in batches of ``batch_size`` texts, so it may be a generator over a corpus
    larger than memory. With ``processes != 1`` the batches are counted in worker processes.
    """
    stats = stats if stats is not None else CorpusStats()
    batches = _batches(texts, batch_size)
    first = next(batches, None)
    if first is None:
        raise ValueError("empty corpus: the text iterator yielded no texts")
    sample = [line for t in first[:2000] for line in _LINE_RE.findall(t)]
    unit = choose_unit(pre_tokenize, sample)

    def all_batches() -> Iterator[list[str]]:
        yield first
        yield from batches

    progress = _progress(None, "count words", show_progress, unit="texts")
    first_bad: dict[str, int] = {}
    nproc = _resolve_processes(processes)
    try:
        if nproc == 1:
            _init_worker(pre_tokenize, unit)
            results = map(_count_texts_task, all_batches())
            words = _merge_results(_count_progress(results, progress), stats, None, first_bad)
        else:
            with _pool(nproc, pre_tokenize, unit) as pool:
                results = pool.imap_unordered(_count_texts_task, all_batches())
                words = _merge_results(_count_progress(results, progress), stats, None, first_bad)
    finally:
        if progress is not None:
            progress.close()
    if not words:
        raise ValueError("empty corpus: the texts hold no words")
    return words


def _count_progress(results: Iterable[Any], progress: Any) -> Iterator[Any]:
    for r in results:
        if progress is not None:
            progress.update(r[2])
        yield r


def _progress(total: int | None, desc: str, show: bool, unit: str = "B") -> Any:
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)
