"""Command line: prepare a corpus into shards and print what it cost.

    python -m attnlab.data.prepare CORPUS... --tokenizer tokenizer.json --out DIR [--format text]

The tokenizer is an HF-layout ``tokenizer.json`` (or a checkpoint directory) loaded by ``attnlab.tokenizers``.
Prints the :class:`~attnlab.data.shards.PrepareReport` (tokens/s, peak RSS of this process and its workers)
and writes it as JSON next to the index (``prepare_report.json``).

Bytes that are not UTF-8 stop the run with an error naming the file, line and byte, as everywhere else in
attnlab (a tokenizer fed U+FFFD learns it as a symbol); ``--errors replace`` replaces them by U+FFFD
instead, for a web-scraped corpus where a few bad bytes are expected, and counts them per file in the index
and the report.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.data.corpus import ERRORS, FORMATS, IngestStats, read_documents
from attnlab.data.shards import PrepareReport, prepare_shards
from attnlab.errors import input_error_message
from attnlab.tokenizers import Tokenizer
from attnlab.tokenizers import load_tokenizer as load_tokenizer_dir


def load_tokenizer(path: str) -> Any:
    """A ``tokenizer.json`` file or a directory holding the field's vocabulary files."""
    p = Path(path)
    return load_tokenizer_dir(p) if p.is_dir() else Tokenizer.from_file(p)


def main(argv: list[str] | None = None) -> PrepareReport:
    ap = argparse.ArgumentParser(prog="python -m attnlab.data.prepare", description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="+", help="files or directories (recursive, sorted; .gz read on the fly)")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json or a checkpoint directory")
    ap.add_argument("--out", required=True, help="output directory (resumed if a run was cut short)")
    ap.add_argument(
        "--format", default="sentences", choices=FORMATS, help="corpus format (default: %(default)s)"
    )
    ap.add_argument("--text-field", default="text", help="JSON lines: the field holding the text")
    ap.add_argument("--workers", type=int, default=None, help="tokenising processes (default: all cores)")
    ap.add_argument("--chunk-chars", type=int, default=1 << 18)
    ap.add_argument("--shard-tokens", type=int, default=1 << 26)
    ap.add_argument("--max-sentence-tokens", type=int, default=510)
    ap.add_argument("--overwrite", action="store_true", help="start again instead of resuming")
    ap.add_argument(
        "--errors", default="strict", choices=ERRORS,
        help="bytes that are not UTF-8: stop with an error naming file, line and byte (strict, the default), "
        "or replace them by U+FFFD and count them (replace)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer)
    stats = IngestStats()
    # sentences are split in the worker processes (split=False), not in the reading process; with
    # --errors replace, bytes that are not UTF-8 are replaced, counted in the shards' index and reported below
    docs = read_documents(
        args.corpus, args.format, text_field=args.text_field, stats=stats, split=False, errors=args.errors
    )
    report = prepare_shards(
        docs,
        tokenizer,
        args.out,
        workers=args.workers,
        chunk_chars=args.chunk_chars,
        shard_tokens=args.shard_tokens,
        max_sentence_tokens=args.max_sentence_tokens,
        ingest_stats=stats,
        overwrite=args.overwrite,
    )
    write_json_atomic(asdict(report), Path(args.out) / "prepare_report.json", indent=1)
    print(report.summary())
    if stats.undecodable:
        n_files = len(stats.undecodable)
        print(f"undecodable byte sequences replaced: {stats.undecodable_total} in {n_files} files")
    return report


def run(argv: list[str] | None = None) -> int:
    """`main` as a command: a user error (a missing file, bytes that are not UTF-8, a bad tokenizer) is one
    line on standard error and exit code 2, as in `attnlab.cli.main` (`attnlab.errors`); a bug keeps its
    traceback."""
    try:
        main(argv)
    except Exception as error:
        message = input_error_message(error)
        if message is None:
            raise
        print(f"python -m attnlab.data.prepare: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
