"""``attnlab tokenizer``: train a subword vocabulary, and encode text with a saved tokenizer.

    attnlab tokenizer train --kind wordpiece --vocab-size 30000 --files a.txt b.txt --output-dir tok/
    attnlab tokenizer encode tok/ --text "Hello world" --json

``train`` writes the field's files into ``--output-dir`` (or ``--out``): ``tokenizer.json`` always, plus
``vocab.txt`` (WordPiece) or ``vocab.json`` + ``merges.txt`` (BPE, byte-level BPE). ``encode`` loads any
directory that :func:`attnlab.tokenizers.load_tokenizer` understands (ours, or a BERT/RoBERTa/ALBERT
checkpoint's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .args import non_negative_int, positive_int

KINDS = ("wordpiece", "bpe", "byte_level_bpe", "unigram")


def register(subparsers: argparse._SubParsersAction) -> None:
    tok = subparsers.add_parser(
        "tokenizer",
        help="train a WordPiece / BPE / byte-level BPE / Unigram vocabulary, or encode text",
        description="Train subword vocabularies and encode text with a saved tokenizer.",
    )
    sub = tok.add_subparsers(dest="tokenizer_command", metavar="SUBCOMMAND")
    tok.set_defaults(func=lambda args: (tok.print_help(), 2)[1])

    train = sub.add_parser(
        "train",
        help="train a vocabulary on text files",
        description="Train a tokenizer on UTF-8 text files (one text per line) and save it to --output-dir.",
    )
    train.add_argument("--kind", required=True, choices=KINDS, help="the tokenizer family")
    train.add_argument(
        "--vocab-size", type=positive_int, required=True, help="vocabulary size, specials included"
    )
    train.add_argument("--files", nargs="+", required=True, metavar="FILE", help="training text files")
    train.add_argument(
        "--output-dir",
        "--out",
        dest="out",
        required=True,
        metavar="DIR",
        help="directory to write the files to",
    )
    train.add_argument(
        "--lowercase", action=argparse.BooleanOptionalAction, default=None,
        help="lowercase (and, for wordpiece, strip accents); default: yes for wordpiece and unigram, no for "
        "bpe and byte_level_bpe",
    )  # fmt: skip
    train.add_argument(
        "--min-frequency", type=non_negative_int, default=None,
        help="pairs (bpe, wordpiece) or words (unigram) seen fewer times are not used "
        "(default: 2 for wordpiece, 0 otherwise)",
    )  # fmt: skip
    train.add_argument(
        "--special-tokens", nargs="+", default=None, metavar="TOKEN",
        help="special tokens given the first ids, in order (the kind's template tokens are added if missing)",
    )  # fmt: skip
    train.add_argument(
        "--limit-alphabet", type=positive_int, default=None,
        help="keep at most this many characters (default: all)",
    )  # fmt: skip
    train.add_argument(
        "--processes", type=positive_int, default=None, help="counting processes (default: all cores)"
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.set_defaults(func=run_train)

    enc = sub.add_parser(
        "encode",
        help="encode text with a saved tokenizer",
        description="Encode --text or every line of --file; print tokens and ids, or JSON lines with --json.",
    )
    enc.add_argument("directory", metavar="DIR", help="a tokenizer directory (or a tokenizer.json file)")
    src = enc.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the text to encode")
    src.add_argument("--file", help="a UTF-8 file: every line is encoded ('-' reads standard input)")
    enc.add_argument(
        "--pair", action="store_true",
        help="each input is a sentence pair 'A<TAB>B' (split at the first tab)",
    )  # fmt: skip
    enc.add_argument(
        "--max-length",
        type=positive_int,
        default=None,
        help="truncate to this many tokens (default: no limit)",
    )
    enc.add_argument("--no-special-tokens", action="store_true", help="do not add the template's tokens")
    enc.add_argument("--json", action="store_true", help="one JSON object per input (JSON lines)")
    enc.add_argument(
        "--batch-size", type=positive_int, default=1000, help="lines encoded per batch (default: 1000)"
    )
    enc.add_argument("--no-progress", action="store_true", help="no progress bar for --file")
    enc.set_defaults(func=run_encode)


def run_train(args: argparse.Namespace) -> int:
    from attnlab.tokenizers.files import save_vocab_files
    from attnlab.tokenizers.models import BPE, WordPiece
    from attnlab.tokenizers.trainers import train_tokenizer

    from .inputs import check_text_file

    for path in args.files:
        check_text_file(path, "--files")
    # Checked before training, and nothing is written when it fails: a corpus given as --output-dir stays.
    out = Path(args.out)
    existing = next((p for p in (out, *out.parents) if p.exists()), out)
    if existing.exists() and not existing.is_dir():
        what = "" if existing == out else f" ({existing})"
        raise NotADirectoryError(f"--output-dir {out}{what}: exists and is not a directory; give a directory")
    start = time.perf_counter()
    tok = train_tokenizer(
        args.kind, list(args.files), args.vocab_size, lowercase=args.lowercase,
        min_frequency=args.min_frequency, special_tokens=args.special_tokens,
        limit_alphabet=args.limit_alphabet, show_progress=not args.no_progress, processes=args.processes,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)  # so that save() writes into it whatever its name (tok.json, v1.0)
    written = [tok.save(out)]
    if isinstance(tok.model, (WordPiece, BPE)):
        written += save_vocab_files(tok, out)
    size = tok.get_vocab_size()
    print(f"trained {args.kind} tokenizer: {size} tokens in {elapsed:.1f}s")
    if size < args.vocab_size:
        print(f"note: the corpus supports only {size} of the {args.vocab_size} tokens", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    return 0


def _inputs(args: argparse.Namespace) -> Iterator[str]:
    if args.text is not None:
        yield args.text
        return
    if args.file == "-":
        from .inputs import stdin_lines

        # bytes that are not UTF-8: an error naming the line and byte offset (never U+FFFD in the output)
        yield from (line.rstrip("\n") for line in stdin_lines())
        return
    with open(args.file, encoding="utf-8") as f:  # checked to be UTF-8 by check_text_file
        for line in f:
            yield line.rstrip("\r\n")


def _batches(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_encode(args: argparse.Namespace) -> int:
    import os

    from attnlab.tokenizers import Tokenizer, load_tokenizer

    path = args.directory
    try:
        if os.path.isfile(path):
            tok = Tokenizer.from_file(path)
        elif os.path.isdir(path):
            tok = load_tokenizer(path)
        else:
            raise FileNotFoundError(f"{path}: no such tokenizer directory or file")
    except (ValueError, OSError) as e:
        if isinstance(e, FileNotFoundError) and not os.path.exists(path):
            raise
        raise ValueError(f"cannot load a tokenizer from {path}: {e}") from e
    if args.file is not None and args.file != "-":
        from .inputs import check_text_file

        check_text_file(args.file, "--file")  # missing, a directory, or bytes that are not UTF-8
    if args.max_length is not None:
        if args.max_length < 1:
            raise ValueError(f"--max-length must be positive, got {args.max_length}")
        tok.enable_truncation(args.max_length)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be positive, got {args.batch_size}")
    progress = None
    if args.file is not None and args.file != "-" and not args.no_progress:
        from tqdm.auto import tqdm

        total = os.path.getsize(args.file)
        progress = tqdm(total=total, unit="B", unit_scale=True, desc="encode", leave=False)
    out = sys.stdout
    add_special = not args.no_special_tokens
    try:
        for batch in _batches(_inputs(args), args.batch_size):
            if args.pair:
                items: list = []
                for line in batch:
                    a, sep, b = line.partition("\t")
                    items.append((a, b) if sep else a)
            else:
                items = batch
            for enc in tok.encode_batch(items, add_special_tokens=add_special, return_overflowing=False):
                if args.json:
                    record = {
                        "tokens": enc.tokens, "ids": enc.ids, "type_ids": enc.type_ids,
                        "offsets": [list(o) for o in enc.offsets],
                        "special_tokens_mask": enc.special_tokens_mask,
                    }  # fmt: skip
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                else:
                    out.write(" ".join(enc.tokens) + "\t" + " ".join(map(str, enc.ids)) + "\n")
            if progress is not None:
                progress.update(sum(len(line.encode("utf-8")) + 1 for line in batch))
    finally:
        if progress is not None:
            progress.close()
    return 0
