"""The corpus of a pre-training run: documents from files, split into training and held-out documents,
prepared into shards once and reused while the corpus and the tokenizer stay the same."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.data import ShardedCorpus, list_files, prepare_shards, read_documents
from attnlab.data.protocol import tokenizer_fingerprint

DocumentSource = Callable[[], Iterable[list[str]]]  # a fresh stream of documents per call


def corpus_documents(paths: Sequence[str | os.PathLike], fmt: str = "sentences") -> DocumentSource:
    """A document source over files (see `attnlab.data.read_documents`; sentences are split by the
    preparation workers)."""
    paths = [str(p) for p in paths]
    return lambda: read_documents(paths, fmt, split=False)


def _every(source: DocumentSource, keep: Callable[[int], bool]) -> Iterator[list[str]]:
    for i, doc in enumerate(source()):
        if keep(i):
            yield doc


def split_rule(n_documents: int, heldout_every: int, min_heldout: int = 2) -> int:
    """The k such that documents i with i % k == k - 1 are held out: ``heldout_every``, lowered so that at
    least ``min_heldout`` documents are held out while as many stay for training."""
    if n_documents < 2 * min_heldout:
        raise ValueError(
            f"the corpus has {n_documents} documents; at least {2 * min_heldout} are needed to hold out "
            f"{min_heldout} for evaluation (NSP also needs 2 documents on each side)"
        )
    return max(2, min(heldout_every, n_documents // min_heldout))


def _fingerprint(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def prepare_corpus(
    source: DocumentSource,
    tokenizer: Any,
    out_dir: str | os.PathLike,
    *,
    source_key: Any,
    heldout_every: int = 20,
    workers: int | None = None,
    log: Callable[[str], None] = print,
) -> tuple[ShardedCorpus, ShardedCorpus]:
    """Prepare (or reuse) ``out_dir/train`` and ``out_dir/heldout``. ``source_key`` identifies the corpus
    (e.g. its files, sizes and modification times): shards are reused when it and the tokenizer match."""
    out = Path(out_dir)
    manifest_path = out / "manifest.json"
    key = {
        "source": source_key,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "heldout_every": heldout_every,
    }
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            manifest = {}  # a damaged cache record: prepare again (the shards are rewritten)
            log(f"{manifest_path}: not valid JSON; preparing the shards again")
        if manifest.get("key") == _fingerprint(key):
            log(f"reusing prepared shards in {out} ({manifest['train_tokens']:,} training tokens)")
            return ShardedCorpus(out / "train", tokenizer), ShardedCorpus(out / "heldout", tokenizer)
    n_docs = sum(1 for _ in source())
    k = split_rule(n_docs, heldout_every)
    t0 = time.perf_counter()
    reports = {}
    for name, keep in (("train", lambda i: i % k != k - 1), ("heldout", lambda i: i % k == k - 1)):
        reports[name] = prepare_shards(
            _every(source, keep), tokenizer, out / name, workers=workers, overwrite=True
        )
    train, heldout = reports["train"], reports["heldout"]
    log(
        f"prepared {train.tokens:,} training tokens ({train.documents} documents) and {heldout.tokens:,} "
        f"held-out tokens ({heldout.documents} documents) in {time.perf_counter() - t0:.1f}s "
        f"({train.tokens_per_second:,.0f} tokens/s)"
    )
    manifest = {
        "key": _fingerprint(key),
        "documents": n_docs,
        "heldout_every": k,
        "train_tokens": train.tokens,
        "heldout_tokens": heldout.tokens,
        "tokens_per_second": train.tokens_per_second,
    }
    write_json_atomic(manifest, manifest_path, indent=1)
    return ShardedCorpus(out / "train", tokenizer), ShardedCorpus(out / "heldout", tokenizer)


def files_key(paths: Sequence[str | os.PathLike], fmt: str) -> dict[str, Any]:
    """What identifies a file corpus for the shard cache: every file's path, size and modification time."""
    return {
        "format": fmt,
        "files": [
            (str(p), p.stat().st_size, int(p.stat().st_mtime)) for p in list_files([str(p) for p in paths])
        ],
    }


def document_texts(source: DocumentSource, max_chars: int | None = None) -> Iterator[str]:
    """The documents of ``source`` as texts (one line per sentence or paragraph), up to ``max_chars``."""
    total = 0
    for doc in source():
        text = "\n".join(doc)
        yield text
        total += len(text)
        if max_chars is not None and total >= max_chars:
            return
