"""Prepare a corpus once into sharded, memory-mapped token arrays, and read them back.

Layout of an output directory::

    index.json                     written last: settings, tokenizer fingerprint, per-shard counts
    shard_00000.ids.bin            (n_tokens,)      uint16 (vocab <= 65536) or uint32 token ids
    shard_00000.word_starts.bin    (n_tokens,)      uint8, 1 where a token starts a word
    shard_00000.sent_offsets.bin   (n_sent + 1,)    int64 token offset of each sentence, then n_tokens
    shard_00000.doc_offsets.bin    (n_docs + 1,)    int64 sentence offset of each document, then n_sent
    ...
    progress.json                  while running: finished shards (removed when index.json is written)

How it scales (the anti-pattern avoided is building every instance in memory,
google-research/bert's GitHub issues #117 and #612):

* **Streaming, bounded memory.** Documents are read lazily and grouped into chunks of about
  ``chunk_chars`` characters (whole documents); at most ``2 * workers`` chunks are in flight and a
  shard is appended to its files chunk by chunk, so memory does not grow with the corpus.
* **Parallel.** Chunks are tokenised by a ``multiprocessing`` pool (one ``encode_batch`` per chunk, or for
  an attnlab ``Tokenizer`` its ids-only path, ``encode_ids_and_word_starts``, ~3x faster, same arrays);
  turning encodings into arrays is vectorised with numpy.
* **Deterministic.** Chunk boundaries depend only on the text and ``chunk_chars``; results are
  consumed in input order and a shard closes after the first chunk that brings it to
  ``shard_tokens`` tokens. The output is byte-identical for any number of workers.
* **Resumable.** Shards are written under ``*.tmp`` names and renamed when complete, then recorded in
  ``progress.json`` (atomically replaced). A re-run with the same settings re-reads the input, checks
  the finished shards' input digests, skips tokenising them and continues with the next shard.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import resource
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.atomic import write_json_atomic
from attnlab.data.corpus import Document, IngestStats, as_sentences
from attnlab.data.protocol import tokenizer_fingerprint, vocab_size_of
from attnlab.data.sharded_corpus import (  # noqa: F401  (the format, and the reader re-exported)
    ARRAY_KINDS,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE,
    PROGRESS_FILE,
    CorruptShardError,
    Shard,
    ShardedCorpus,
    shard_name,
    token_dtype,
)
from attnlab.tokenizers import Tokenizer, ids_only

# --------------------------------------------------------------------------------------------- tokenising


@dataclass
class ChunkArrays:
    """One chunk of documents, tokenised. Sentences and documents that came out empty are dropped."""

    ids: np.ndarray  # (n_tokens,) int64
    word_starts: np.ndarray  # (n_tokens,) uint8
    sent_lens: np.ndarray  # (n_sent,) int64 tokens per kept sentence
    doc_sents: np.ndarray  # (n_docs,) int64 kept sentences per kept document
    truncated_sentences: int = 0
    empty_sentences: int = 0
    empty_documents: int = 0


def _encode(tokenizer: Any, texts: list[str]) -> list:
    try:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    except TypeError:  # a tokenizer whose encode_batch takes only the texts
        return tokenizer.encode_batch(texts)


def tokenize_chunk(
    tokenizer: Any, chunk: list[Document], *, max_sentence_tokens: int | None, vocab_size: int
) -> ChunkArrays:
    """Tokenise a list of documents into flat arrays (one ``encode_batch`` call, numpy afterwards).

    Tokens whose word id is ``None`` (special tokens a post-processor added) are dropped; sentences
    longer than ``max_sentence_tokens`` are truncated and counted. :class:`~attnlab.data.corpus.Paragraphs`
    are split into sentences first. An attnlab :class:`~attnlab.tokenizers.Tokenizer` whose pipeline the
    ids-only path covers gives the same arrays without building encodings.
    """
    chunk = [as_sentences(doc) for doc in chunk]
    texts = [s for doc in chunk for s in doc]
    if isinstance(tokenizer, Tokenizer) and ids_only.supports_ids_only(tokenizer, add_special_tokens=False):
        # No special tokens without add_special_tokens, so no word id is None: nothing to drop.
        ids, lens, starts = ids_only.encode_ids_and_word_starts(tokenizer, texts, add_special_tokens=False)
    else:
        ids, lens, starts = _encoded_arrays(tokenizer, texts)
    truncated = 0
    if max_sentence_tokens is not None and (lens > max_sentence_tokens).any():
        truncated = int((lens > max_sentence_tokens).sum())
        pos = np.arange(ids.size) - np.repeat(np.cumsum(lens) - lens, lens)  # position inside its sentence
        keep = pos < max_sentence_tokens
        ids, starts = ids[keep], starts[keep]
        lens = np.minimum(lens, max_sentence_tokens)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids.max() if ids.max() >= vocab_size else ids.min())
        raise ValueError(f"tokenizer produced id {bad}, outside its vocabulary of size {vocab_size}")
    nonempty = lens > 0
    doc_of = np.repeat(np.arange(len(chunk)), [len(d) for d in chunk])  # (n,) document of each sentence
    doc_sents = np.bincount(doc_of[nonempty], minlength=len(chunk)).astype(np.int64)
    return ChunkArrays(
        ids=ids,
        word_starts=starts.astype(np.uint8),
        sent_lens=lens[nonempty],
        doc_sents=doc_sents[doc_sents > 0],
        truncated_sentences=truncated,
        empty_sentences=int((~nonempty).sum()),
        empty_documents=int((doc_sents == 0).sum()),
    )


def _encoded_arrays(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, lens, starts)`` of ``texts`` from ``encode_batch``'s encodings: (N,) int64 ids without the
    tokens whose word id is ``None``, (L,) int64 ids per text, (N,) bool word starts."""
    n = len(texts)
    encs = _encode(tokenizer, texts)
    if len(encs) != n:
        raise ValueError(f"encode_batch returned {len(encs)} encodings for {n} texts")
    id_lists = [e.ids for e in encs]
    wid_lists = [e.word_ids for e in encs]
    lens = np.fromiter((len(x) for x in id_lists), np.int64, count=n)
    for i in np.flatnonzero(lens != np.fromiter((len(x) for x in wid_lists), np.int64, count=n))[:1]:
        raise ValueError(
            f"encoding of {texts[i][:60]!r} has {lens[i]} ids but a different number of word_ids"
        )
    total = int(lens.sum())
    ids = np.fromiter(chain.from_iterable(id_lists), np.int64, count=total)
    wids = np.fromiter(chain.from_iterable(wid_lists), np.float64, count=total)  # None -> nan
    sent_of = np.repeat(np.arange(n), lens)  # (total,) sentence of each token
    keep = ~np.isnan(wids)
    # A token starts a word when its word id differs from the previous token's in the same sentence.
    starts = np.ones(total, dtype=bool)
    starts[1:] = (wids[1:] != wids[:-1]) | (sent_of[1:] != sent_of[:-1])
    if not keep.all():
        ids, wids, sent_of, starts = ids[keep], wids[keep], sent_of[keep], starts[keep]
        lens = np.bincount(sent_of, minlength=n).astype(np.int64)
        # the first kept token of each sentence starts a word even if a dropped token preceded it
        starts[np.r_[True, sent_of[1:] != sent_of[:-1]]] = True
    return ids, lens, starts


_WORKER: dict[str, Any] = {}


def _init_worker(tokenizer: Any, kwargs: dict) -> None:
    # Each worker is one process on one core; a Rust tokenizer's own thread pool would oversubscribe.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER["tokenizer"] = tokenizer
    _WORKER["kwargs"] = kwargs


def _work(chunk: list[Document]) -> ChunkArrays:
    return tokenize_chunk(_WORKER["tokenizer"], chunk, **_WORKER["kwargs"])


def _chunks(documents: Iterable[Document], chunk_chars: int) -> Iterator[tuple[str, list[Document]]]:
    """Group whole documents into chunks of about ``chunk_chars`` characters; yield (digest, chunk)."""
    chunk: list[Document] = []
    chars = 0
    for doc in documents:
        chunk.append(doc)
        chars += sum(len(s) for s in doc)
        if chars >= chunk_chars:
            yield _digest(chunk), chunk
            chunk, chars = [], 0
    if chunk:
        yield _digest(chunk), chunk


def _digest(chunk: list[Document]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for doc in chunk:
        h.update("\n".join(doc).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------- writing


@dataclass
class ShardInfo:
    name: str
    n_tokens: int
    n_sentences: int
    n_documents: int
    chunks: int  # input chunks it holds (resume skips this many)
    digest: str  # hash of the chunks' input digests
    truncated_sentences: int = 0
    empty_sentences: int = 0
    empty_documents: int = 0


class _ShardWriter:
    def __init__(self, directory: Path, name: str, ids_dtype: np.dtype):
        self.directory, self.name, self.ids_dtype = directory, name, ids_dtype
        self.files = {k: open(self._path(k, tmp=True), "wb") for k in ARRAY_KINDS}  # noqa: SIM115
        zero = np.zeros(1, np.int64).tobytes()
        self.files["sent_offsets"].write(zero)
        self.files["doc_offsets"].write(zero)
        self.info = ShardInfo(name, 0, 0, 0, 0, "")
        self._hash = hashlib.blake2b(digest_size=16)

    def _path(self, kind: str, tmp: bool = False) -> Path:
        return self.directory / f"{self.name}.{kind}.bin{'.tmp' if tmp else ''}"

    def add(self, digest: str, arr: ChunkArrays) -> None:
        info = self.info
        self.files["ids"].write(arr.ids.astype(self.ids_dtype).tobytes())
        self.files["word_starts"].write(arr.word_starts.tobytes())
        self.files["sent_offsets"].write(
            (info.n_tokens + np.cumsum(arr.sent_lens)).astype(np.int64).tobytes()
        )
        self.files["doc_offsets"].write(
            (info.n_sentences + np.cumsum(arr.doc_sents)).astype(np.int64).tobytes()
        )
        info.n_tokens += int(arr.ids.size)
        info.n_sentences += int(arr.sent_lens.size)
        info.n_documents += int(arr.doc_sents.size)
        info.chunks += 1
        info.truncated_sentences += arr.truncated_sentences
        info.empty_sentences += arr.empty_sentences
        info.empty_documents += arr.empty_documents
        self._hash.update(digest.encode())

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def finish(self) -> ShardInfo:
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
        self.close()
        for k in ARRAY_KINDS:
            os.replace(self._path(k, tmp=True), self._path(k))
        self.info.digest = self._hash.hexdigest()
        return self.info


def _write_json_atomic(path: Path, obj: dict) -> None:
    write_json_atomic(obj, path, indent=1)


@dataclass
class PrepareReport:
    """What :func:`prepare_shards` did. ``tokens_per_second`` counts only tokens produced in this run."""

    directory: str
    tokens: int
    sentences: int
    documents: int
    shards: int
    shards_skipped: int
    tokens_this_run: int
    seconds: float
    tokens_per_second: float
    peak_rss_mb: float  # this process
    peak_rss_children_mb: float  # the largest worker
    truncated_sentences: int = 0
    empty_sentences: int = 0
    empty_documents: int = 0
    ingest: dict = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{self.tokens:,} tokens, {self.sentences:,} sentences, {self.documents:,} documents in "
            f"{self.shards} shards ({self.shards_skipped} resumed) | "
            f"{self.tokens_per_second:,.0f} tokens/s | "
            f"peak RSS {self.peak_rss_mb:.0f} MB (workers {self.peak_rss_children_mb:.0f} MB) | "
            f"truncated sentences {self.truncated_sentences}, empty sentences {self.empty_sentences}, "
            f"empty documents {self.empty_documents}"
        )


def _peak_rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def prepare_shards(
    documents: Iterable[Document],
    tokenizer: Any,
    out_dir: str | os.PathLike,
    *,
    workers: int | None = None,
    chunk_chars: int = 1 << 18,
    shard_tokens: int = 1 << 26,
    max_sentence_tokens: int | None = 510,
    ingest_stats: IngestStats | None = None,
    overwrite: bool = False,
    start_method: str | None = None,
) -> PrepareReport:
    """Tokenise ``documents`` into memory-mapped shards under ``out_dir``; resume if a run was cut short.

    Args:
        documents: an iterable of documents (lists of sentences), e.g. :func:`read_documents`.
        tokenizer: anything satisfying :class:`~attnlab.data.protocol.TokenizerLike`.
        workers: processes tokenising in parallel (default: all cores). Output does not depend on it.
        chunk_chars: characters per unit of parallel work (whole documents). A worker holds its chunk's
            encodings: ~100 MB per 1M characters with a pure-Python tokenizer, hence 256K by default.
        shard_tokens: a shard closes once it holds at least this many tokens (64M tokens = 128 MB uint16).
        max_sentence_tokens: longer sentences are truncated and counted (510 fits ``[CLS] s [SEP]`` in 512).
        ingest_stats: the :class:`IngestStats` the reader fills; copied into the index.
        overwrite: delete a previous preparation in ``out_dir`` instead of resuming it.
        start_method: ``multiprocessing`` start method of the workers (default: the platform's). With
            "spawn"/"forkserver" the tokenizer is pickled to each worker once.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = workers or os.cpu_count() or 1
    if chunk_chars < 1 or shard_tokens < 1 or workers < 1:
        raise ValueError(
            f"chunk_chars, shard_tokens and workers must be >= 1, "
            f"got {chunk_chars}, {shard_tokens}, {workers}"
        )
    if max_sentence_tokens is not None and max_sentence_tokens < 1:
        raise ValueError(f"max_sentence_tokens must be >= 1 or None, got {max_sentence_tokens}")
    vocab_size = vocab_size_of(tokenizer)
    ids_dtype = token_dtype(vocab_size)
    settings = {
        "vocab_size": vocab_size,
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
        "dtype": ids_dtype.name,
        "chunk_chars": chunk_chars,
        "shard_tokens": shard_tokens,
        "max_sentence_tokens": max_sentence_tokens,
    }
    finished = _finished_shards(out, settings, overwrite)
    n_skipped = len(finished)
    chunk_iter = _chunks(documents, chunk_chars)
    _skip_finished(chunk_iter, finished, out)
    kwargs = {"max_sentence_tokens": max_sentence_tokens, "vocab_size": vocab_size}
    results = _tokenized(chunk_iter, tokenizer, kwargs, workers, start_method)
    tokens_this_run = _write_shards(results, out, finished, settings, ids_dtype, shard_tokens)
    ingest = ingest_stats.to_dict() if ingest_stats is not None else {}
    totals = _write_index(out, settings, finished, ingest)
    seconds = time.perf_counter() - t0
    return PrepareReport(
        directory=str(out),
        tokens=totals["n_tokens"],
        sentences=totals["n_sentences"],
        documents=totals["n_documents"],
        shards=len(finished),
        shards_skipped=n_skipped,
        tokens_this_run=tokens_this_run,
        seconds=seconds,
        tokens_per_second=tokens_this_run / seconds if seconds > 0 else 0.0,
        peak_rss_mb=_peak_rss_mb(resource.RUSAGE_SELF),
        peak_rss_children_mb=_peak_rss_mb(resource.RUSAGE_CHILDREN),
        truncated_sentences=totals["truncated_sentences"],
        empty_sentences=totals["empty_sentences"],
        empty_documents=totals["empty_documents"],
        ingest=ingest,
    )


def _finished_shards(out: Path, settings: dict[str, Any], overwrite: bool) -> list[ShardInfo]:
    """The shards an earlier run finished with the same ``settings`` (its index or progress file); other
    settings are an error naming the differences. ``overwrite``: none (the earlier files are deleted).
    Half-written shards of a killed run are removed."""
    if overwrite:
        for p in out.iterdir():
            if p.name.startswith("shard_") or p.name in (INDEX_FILE, PROGRESS_FILE):
                p.unlink()
    finished: list[ShardInfo] = []
    for name in (INDEX_FILE, PROGRESS_FILE):
        path = out / name
        if path.exists():
            state = json.loads(path.read_text())
            if state.get("settings") != settings:
                diff = {
                    k: (state.get("settings", {}).get(k), v)
                    for k, v in settings.items()
                    if state.get("settings", {}).get(k) != v
                }
                raise ValueError(
                    f"{path} was written with other settings (recorded, requested): {diff}; "
                    "use another directory or overwrite=True"
                )
            finished = [ShardInfo(**s) for s in state["shards"]]
            break
    for p in out.glob("*.tmp"):  # half-written shards of a killed run
        p.unlink()
    return finished


def _skip_finished(
    chunk_iter: Iterator[tuple[str, list[Document]]], finished: list[ShardInfo], out: Path
) -> None:
    """Skip (without tokenising) the chunks of finished shards, checking the input is unchanged."""
    for info in finished:
        h = hashlib.blake2b(digest_size=16)
        for _ in range(info.chunks):
            item = next(chunk_iter, None)
            if item is None:
                raise ValueError(f"{out}: shard {info.name} was prepared from more input than is given now")
            h.update(item[0].encode())
        if h.hexdigest() != info.digest:
            raise ValueError(
                f"{out}: the input of shard {info.name} changed since it was prepared; use overwrite=True"
            )


def _tokenized(
    chunk_iter: Iterator[tuple[str, list[Document]]],
    tokenizer: Any,
    kwargs: dict[str, Any],
    workers: int,
    start_method: str | None,
) -> Iterator[tuple[str, ChunkArrays]]:
    """Each chunk's digest and arrays, in input order; with several workers at most ``2 * workers`` chunks
    in flight, so the reader never runs far ahead."""
    if workers == 1:
        for digest, chunk in chunk_iter:
            yield digest, tokenize_chunk(tokenizer, chunk, **kwargs)
        return
    context = mp.get_context(start_method)
    with context.Pool(workers, initializer=_init_worker, initargs=(tokenizer, kwargs)) as pool:
        pending: deque = deque()
        for digest, chunk in chunk_iter:
            pending.append((digest, pool.apply_async(_work, (chunk,))))
            if len(pending) >= 2 * workers:
                d, r = pending.popleft()
                yield d, r.get()
        while pending:
            d, r = pending.popleft()
            yield d, r.get()


def _write_shards(
    results: Iterator[tuple[str, ChunkArrays]],
    out: Path,
    finished: list[ShardInfo],
    settings: dict[str, Any],
    ids_dtype: np.dtype,
    shard_tokens: int,
) -> int:
    """Append the chunks to shards, closing one at ``shard_tokens`` and recording it in the progress file;
    ``finished`` grows by the shards written. Returns the tokens written."""

    def save_progress() -> None:
        progress = {"settings": settings, "shards": [asdict(s) for s in finished]}
        _write_json_atomic(out / PROGRESS_FILE, progress)

    tokens_this_run = 0
    writer: _ShardWriter | None = None
    try:
        for digest, arr in results:
            if writer is None:
                writer = _ShardWriter(out, shard_name(len(finished)), ids_dtype)
            writer.add(digest, arr)
            tokens_this_run += int(arr.ids.size)
            if writer.info.n_tokens >= shard_tokens:
                finished.append(writer.finish())
                writer = None
                save_progress()
        if writer is not None:
            finished.append(writer.finish())
            writer = None
    finally:
        if writer is not None:
            writer.close()  # left as *.tmp; the next run removes it
    return tokens_this_run


def _write_index(
    out: Path, settings: dict[str, Any], finished: list[ShardInfo], ingest: dict[str, Any]
) -> dict[str, int]:
    """index.json, written last (a directory without it is unfinished); the progress file goes. Returns the
    totals over the shards."""
    totals = {
        k: sum(getattr(s, k) for s in finished)
        for k in ("n_tokens", "n_sentences", "n_documents", "truncated_sentences", "empty_sentences",
                  "empty_documents")
    }  # fmt: skip
    index = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "settings": settings,
        "totals": totals,
        "shards": [asdict(s) for s in finished],
        "ingest": ingest,
    }
    _write_json_atomic(out / INDEX_FILE, index)
    (out / PROGRESS_FILE).unlink(missing_ok=True)
    return totals
