"""Read prepared shards back (`ShardedCorpus`): memory-mapped token arrays, checked against their index.

The on-disk format (`attnlab.data.shards` writes it; see its docstring for the layout) is named here, so
that a reader needs nothing of the writer.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.protocol import tokenizer_fingerprint, vocab_size_of

FORMAT_NAME = "attnlab-token-shards"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"
PROGRESS_FILE = "progress.json"
# Array files of one shard and their dtypes ("ids" depends on the vocabulary size).
ARRAY_KINDS = ("ids", "word_starts", "sent_offsets", "doc_offsets")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves disk and page-cache use for vocabularies up to 65,536 (BERT 30,522, RoBERTa 50,265)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def kind_dtype(kind: str, ids_dtype: np.dtype) -> np.dtype:
    return {"ids": ids_dtype, "word_starts": np.dtype(np.uint8)}.get(kind, np.dtype(np.int64))


def shard_name(i: int) -> str:
    return f"shard_{i:05d}"


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
                k: _open_array(self.directory / f"{name}.{k}.bin", kind_dtype(k, ids_dtype), counts[k])
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
