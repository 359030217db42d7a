"""Prepare a corpus once into sharded, memory-mapped token arrays, and read them back.

Layout of an output directory::

    index.json                     written last: settings, tokenizer fingerprint, per-shard counts
    shard_00000.ids.bin            (n_tokens,)      uint16 (vocab <= 65536) or uint32 token ids
    shard_00000.word_starts.bin    (n_tokens,)      uint8, 1 where a token starts a word
    shard_00000.sent_offsets.bin   (n_sent + 1,)    int64 token offset of each sentence, then n_tokens
    shard_00000.doc_offsets.bin    (n_docs + 1,)    int64 sentence offset of each document, then n_sent
    ...
    progress.json                  while running: finished shards (removed when index.json is written)

How it scales (the anti-pattern avoided is building every instance in memory, google-research/bert
issues #117 and #612):

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
from attnlab.tokenizers import Tokenizer, ids_only

FORMAT_NAME = "attnlab-token-shards"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
PROGRESS_FILE = "progress.json"
# Array files of one shard and their dtypes ("ids" depends on the vocabulary size).
ARRAY_KINDS = ("ids", "word_starts", "sent_offsets", "doc_offsets")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves disk and page-cache use for vocabularies up to 65,536 (BERT 30,522, RoBERTa 50,265)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _kind_dtype(kind: str, ids_dtype: np.dtype) -> np.dtype:
    return {"ids": ids_dtype, "word_starts": np.dtype(np.uint8)}.get(kind, np.dtype(np.int64))


def shard_name(i: int) -> str:
    return f"shard_{i:05d}"


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

    chunk_iter = _chunks(documents, chunk_chars)
    # Skip (without tokenising) the chunks of finished shards, checking the input is unchanged.
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

    kwargs = {"max_sentence_tokens": max_sentence_tokens, "vocab_size": vocab_size}

    def results() -> Iterator[tuple[str, ChunkArrays]]:
        if workers == 1:
            for digest, chunk in chunk_iter:
                yield digest, tokenize_chunk(tokenizer, chunk, **kwargs)
            return
        with mp.get_context(start_method).Pool(
            workers, initializer=_init_worker, initargs=(tokenizer, kwargs)
        ) as pool:
            pending: deque = deque()
            for digest, chunk in chunk_iter:
                pending.append((digest, pool.apply_async(_work, (chunk,))))
                if len(pending) >= 2 * workers:  # bounded: the reader never runs far ahead
                    d, r = pending.popleft()
                    yield d, r.get()
            while pending:
                d, r = pending.popleft()
                yield d, r.get()

    def save_progress() -> None:
        _write_json_atomic(
            out / PROGRESS_FILE, {"settings": settings, "shards": [asdict(s) for s in finished]}
        )

    n_skipped = len(finished)
    tokens_this_run = 0
    writer: _ShardWriter | None = None
    try:
        for digest, arr in results():
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
    ingest = ingest_stats.to_dict() if ingest_stats is not None else {}
    totals = {
        k: sum(getattr(s, k) for s in finished)
        for k in (
            "n_tokens",
            "n_sentences",
            "n_documents",
            "truncated_sentences",
            "empty_sentences",
            "empty_documents",
        )
    }
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


# --------------------------------------------------------------------------------------------- reading


@dataclass
class Shard:
    """One shard's arrays, memory-mapped read-only."""

    name: str
    ids: np.ndarray  # (n_tokens,) uint16/uint32
    word_starts: np.ndarray  # (n_tokens,) uint8
    sent_offsets: np.ndarray  # (n_sent + 1,) int64
    doc_offsets: np.ndarray  # (n_docs + 1,) int64, in sentences

    @property
    def n_sentences(self) -> int:
        return len(self.sent_offsets) - 1

    @property
    def n_documents(self) -> int:
        return len(self.doc_offsets) - 1


class CorruptShardError(ValueError):
    """A shard file is missing, truncated or inconsistent with the index."""


def _open_array(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    if not path.exists():
        raise CorruptShardError(f"{path}: missing (listed in {INDEX_FILE})")
    size = path.stat().st_size
    if size != count * dtype.itemsize:
        raise CorruptShardError(
            f"{path}: {size} bytes, expected {count * dtype.itemsize} "
            f"({count} x {dtype.name}) per {INDEX_FILE}"
        )
    if count == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class ShardedCorpus:
    """A prepared corpus: its shards memory-mapped, and a table of documents across shards.

    Args:
        directory: the output directory of :func:`prepare_shards`.
        tokenizer: if given, its vocabulary size and fingerprint must match the index.
        check_ids: also scan every token id against the vocabulary size (reads all token files once).
    """

    def __init__(self, directory: str | os.PathLike, tokenizer: Any = None, *, check_ids: bool = True):
        self.directory = Path(directory)
        index_path = self.directory / INDEX_FILE
        if not index_path.exists():
            hint = (
                " (preparation did not finish: run prepare_shards again to resume)"
                if (self.directory / PROGRESS_FILE).exists()
                else ""
            )
            raise FileNotFoundError(f"{index_path}: no shard index{hint}")
        try:
            index = json.loads(index_path.read_text())
        except json.JSONDecodeError as e:
            raise CorruptShardError(f"{index_path}: invalid JSON ({e.msg} at line {e.lineno})") from e
        if index.get("format") != FORMAT_NAME or index.get("version") != FORMAT_VERSION:
            raise CorruptShardError(
                f"{index_path}: format {index.get('format')!r} v{index.get('version')}, "
                f"expected {FORMAT_NAME!r} v{FORMAT_VERSION}"
            )
        self.index = index
        settings = index["settings"]
        self.vocab_size: int = settings["vocab_size"]
        if tokenizer is not None:
            tok_vocab = vocab_size_of(tokenizer)
            if tok_vocab != self.vocab_size:
                raise ValueError(
                    f"{index_path}: shards were prepared with a vocabulary of {self.vocab_size} tokens, "
                    f"the tokenizer given has {tok_vocab}"
                )
            fp = tokenizer_fingerprint(tokenizer)
            if fp != settings["tokenizer_fingerprint"]:
                raise ValueError(
                    f"{index_path}: shards were prepared with tokenizer {settings['tokenizer_fingerprint']}, "
                    f"the tokenizer given has fingerprint {fp}"
                )
        ids_dtype = np.dtype(settings["dtype"])
        self.shards: list[Shard] = []
        for info in index["shards"]:
            name = info["name"]
            counts = {
                "ids": info["n_tokens"],
                "word_starts": info["n_tokens"],
                "sent_offsets": info["n_sentences"] + 1,
                "doc_offsets": info["n_documents"] + 1,
            }
            arrays = {
                k: _open_array(self.directory / f"{name}.{k}.bin", _kind_dtype(k, ids_dtype), counts[k])
                for k in ARRAY_KINDS
            }
            shard = Shard(name=name, **arrays)
            self._check(shard, info, check_ids)
            self.shards.append(shard)
        # Document table across shards: (shard, first sentence, end sentence) for each document.
        n_docs = [s.n_documents for s in self.shards]
        self.doc_shard = np.repeat(np.arange(len(self.shards), dtype=np.int32), n_docs)
        if self.shards:
            self.doc_start = np.concatenate([np.asarray(s.doc_offsets[:-1]) for s in self.shards])
            self.doc_end = np.concatenate([np.asarray(s.doc_offsets[1:]) for s in self.shards])
        else:
            self.doc_start = self.doc_end = np.zeros(0, np.int64)

    def __getstate__(self) -> dict:
        # Pickling a memmap would copy the whole shard (e.g. into every DataLoader worker under the
        # spawn/forkserver start methods); pickle the directory and map the files again instead.
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["directory"], check_ids=False)

    def _check(self, shard: Shard, info: dict, check_ids: bool) -> None:
        def fail(kind: str, what: str) -> None:
            raise CorruptShardError(f"{self.directory / f'{shard.name}.{kind}.bin'}: {what}")

        so, do = shard.sent_offsets, shard.doc_offsets
        if so[0] != 0 or so[-1] != info["n_tokens"]:
            fail(
                "sent_offsets",
                f"must run from 0 to n_tokens={info['n_tokens']}, runs from {so[0]} to {so[-1]}",
            )
        if (np.diff(so) <= 0).any():
            fail("sent_offsets", f"not strictly increasing at sentence {int(np.argmax(np.diff(so) <= 0))}")
        if do[0] != 0 or do[-1] != info["n_sentences"]:
            fail(
                "doc_offsets",
                f"must run from 0 to n_sentences={info['n_sentences']}, runs from {do[0]} to {do[-1]}",
            )
        if (np.diff(do) <= 0).any():
            fail("doc_offsets", f"not strictly increasing at document {int(np.argmax(np.diff(do) <= 0))}")
        if shard.word_starts.size and shard.word_starts.max() > 1:
            fail("word_starts", "holds values other than 0/1")
        if check_ids and shard.ids.size and shard.ids.max() >= self.vocab_size:
            i = int(np.argmax(shard.ids >= self.vocab_size))
            fail("ids", f"token {i} has id {int(shard.ids[i])}, outside the vocabulary of {self.vocab_size}")

    @property
    def n_tokens(self) -> int:
        return int(sum(s.ids.size for s in self.shards))

    @property
    def n_sentences(self) -> int:
        return int(sum(s.n_sentences for s in self.shards))

    @property
    def n_documents(self) -> int:
        return int(self.doc_shard.size)

    def sentence(self, shard: int, i: int) -> np.ndarray:
        """Token ids of sentence ``i`` of ``shard``."""
        s = self.shards[shard]
        return s.ids[s.sent_offsets[i] : s.sent_offsets[i + 1]]

    def document(self, d: int) -> list[np.ndarray]:
        """Token ids of document ``d`` (global index), one array per sentence."""
        sh = int(self.doc_shard[d])
        return [self.sentence(sh, i) for i in range(int(self.doc_start[d]), int(self.doc_end[d]))]
