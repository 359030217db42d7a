"""Encode a corpus to token-id arrays on all cores.

Each file is cut into line-aligned byte blocks (``block_bytes``); a process pool encodes the blocks (every
worker holds one copy of the tokenizer, sent once at start-up) and the results come back in order, so memory
stays bounded by the blocks in flight plus one file's ids. Lines are encoded independently (no special tokens
by default); empty lines are skipped.

Workers take attnlab's ids-only path (``Tokenizer.encode_ids_flat``: the ids of ``encode_batch`` without
offsets, several times faster) and send the ids back as compact arrays (uint16 when the vocabulary fits);
any other tokenizer with an ``encode_batch`` is encoded through that.

``encode_files`` yields an :class:`EncodedFile` per file (ids as one flat numpy array plus each line's token
count), or writes ``<name>.ids.npy`` / ``<name>.lengths.npy`` into ``out_dir``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlab.tokenizers.ids_only import split_flat
from attnlab.tokenizers.tokenizer import Tokenizer

__all__ = ["EncodedFile", "encode_files", "encode_texts", "encode_texts_flat", "line_blocks"]

DEFAULT_BLOCK_BYTES = 1 << 20
Block = tuple[int, int]  # a byte range [start, end)


@dataclass
class EncodedFile:
    """The ids of one file: ``ids`` (N,) token ids of all its non-empty lines in order, ``lengths`` (L,) the
    number of tokens of each line (so ``np.split(ids, np.cumsum(lengths)[:-1])`` gives the lines)."""

    path: str
    ids: np.ndarray
    lengths: np.ndarray


def line_blocks(path: str | os.PathLike, block_bytes: int = DEFAULT_BLOCK_BYTES) -> list[Block]:
    """Byte ranges ``[start, end)`` of about ``block_bytes``, each ending at a newline or the file end."""
    size = os.path.getsize(path)
    blocks: list[tuple[int, int]] = []
    start = 0
    with open(path, "rb") as f:
        while start < size:
            end = min(start + block_bytes, size)
            if end < size:
                f.seek(end)
                rest = f.readline()
                end += len(rest)
            blocks.append((start, end))
            start = end
    return blocks


_WORKER_TOKENIZER: Tokenizer | None = None
_WORKER_SPECIALS = False
_WORKER_DTYPE = np.dtype(np.int64)


def _init_worker(tokenizer: Tokenizer, add_special_tokens: bool) -> None:
    global _WORKER_TOKENIZER, _WORKER_SPECIALS, _WORKER_DTYPE
    _WORKER_TOKENIZER = tokenizer
    _WORKER_SPECIALS = add_special_tokens
    _WORKER_DTYPE = _dtype(tokenizer)


def _encode_lines(
    lines: Sequence[str], tokenizer: Tokenizer, add_special_tokens: bool, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, lengths)`` of ``lines``: ids as ``dtype``, lengths as int64."""
    if isinstance(tokenizer, Tokenizer):
        ids, lengths = tokenizer.encode_ids_flat(lines, add_special_tokens)
    else:
        encs = tokenizer.encode_batch(lines, add_special_tokens=add_special_tokens, return_overflowing=False)
        ids = np.asarray([i for e in encs for i in e.ids], dtype=np.int64)
        lengths = np.asarray([len(e.ids) for e in encs], dtype=np.int64)
    return ids.astype(dtype), lengths


def _encode_block(task: tuple[str, int, int]) -> tuple[np.ndarray, np.ndarray]:
    path, start, end = task
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    lines = [ln for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    assert _WORKER_TOKENIZER is not None
    return _encode_lines(lines, _WORKER_TOKENIZER, _WORKER_SPECIALS, _WORKER_DTYPE)


def _dtype(tokenizer: Tokenizer) -> np.dtype:
    return np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.int32)


def encode_files(
    tokenizer: Tokenizer,
    files: Sequence[str | os.PathLike],
    num_workers: int | None = None,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    add_special_tokens: bool = False,
    out_dir: str | os.PathLike | None = None,
) -> Iterator[EncodedFile]:
    """Encode text files line by line on ``num_workers`` processes (default: all cores).

    Yields one :class:`EncodedFile` per input file, in order (ids as uint16 when the vocabulary fits, else
    int32). With ``out_dir`` each file's arrays are also written there as ``<name>.ids.npy`` and
    ``<name>.lengths.npy``.
    """
    paths = [str(p) for p in files]
    for p in paths:
        if not os.path.isfile(p):
            raise FileNotFoundError(f"encode_files: {p} is not a file")
    workers = num_workers or os.cpu_count() or 1
    dtype = _dtype(tokenizer)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    tasks = [(p, s, e) for p in paths for s, e in line_blocks(p, block_bytes)]
    owner = [p for p, _, _ in tasks]

    def results() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if workers <= 1:
            _init_worker(tokenizer, add_special_tokens)
            yield from map(_encode_block, tasks)
            return
        ctx = mp.get_context()
        with ctx.Pool(workers, initializer=_init_worker, initargs=(tokenizer, add_special_tokens)) as pool:
            yield from pool.imap(_encode_block, tasks, chunksize=1)

    pending_ids: list[np.ndarray] = []
    pending_lengths: list[np.ndarray] = []
    done = 0
    remaining = {p: owner.count(p) for p in paths}
    it = results()
    for p in paths:
        while remaining[p]:
            ids, lengths = next(it)
            remaining[p] -= 1
            done += 1
            pending_ids.append(ids)
            pending_lengths.append(lengths)
        ids = np.concatenate(pending_ids).astype(dtype, copy=False) if pending_ids else np.zeros(0, dtype)
        lengths = np.concatenate(pending_lengths) if pending_lengths else np.zeros(0, np.int64)
        pending_ids, pending_lengths = [], []
        if out is not None:
            stem = Path(p).name
            np.save(out / f"{stem}.ids.npy", ids)
            np.save(out / f"{stem}.lengths.npy", lengths)
        yield EncodedFile(p, ids, lengths)
    assert done == len(tasks)


def encode_texts_flat(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    num_workers: int | None = None,
    chunk_size: int = 2000,
    add_special_tokens: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Ids of many texts on ``num_workers`` processes (chunks of ``chunk_size`` texts per task), as
    ``(ids, lengths)``: ``ids`` (N,) every text's ids in order (uint16 when the vocabulary fits, else int32),
    ``lengths`` (L,) int64 each text's number of ids."""
    workers = num_workers or os.cpu_count() or 1
    chunks = [texts[i : i + chunk_size] for i in range(0, len(texts), chunk_size)]
    if workers <= 1 or len(chunks) <= 1:
        dtype = _dtype(tokenizer)
        parts = [_encode_lines(c, tokenizer, add_special_tokens, dtype) for c in chunks]
    else:
        ctx = mp.get_context()
        with ctx.Pool(workers, initializer=_init_worker, initargs=(tokenizer, add_special_tokens)) as pool:
            parts = pool.map(_encode_chunk, chunks, chunksize=1)
    if not parts:
        return np.zeros(0, _dtype(tokenizer)), np.zeros(0, np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def encode_texts(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    num_workers: int | None = None,
    chunk_size: int = 2000,
    add_special_tokens: bool = False,
) -> list[list[int]]:
    """Ids of many texts on ``num_workers`` processes, in order, as lists (see :func:`encode_texts_flat`)."""
    return split_flat(*encode_texts_flat(tokenizer, texts, num_workers, chunk_size, add_special_tokens))


def _encode_chunk(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    assert _WORKER_TOKENIZER is not None
    return _encode_lines(texts, _WORKER_TOKENIZER, _WORKER_SPECIALS, _WORKER_DTYPE)
