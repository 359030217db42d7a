"""Tokenizer training and encoding: attnlab vs HF tokenizers (Rust) vs transformers' slow BERT tokenizer.

    .venv/bin/python benchmarks/tokenizers.py                         # >= 50 MB of books, 30k vocabularies
    .venv/bin/python benchmarks/tokenizers.py --mb 5 --vocab-size 8000 --encode-mb 1     # quick sanity run
    .venv/bin/python benchmarks/tokenizers.py --skip-train             # encoding only, on saved vocabularies
    .venv/bin/python benchmarks/tokenizers.py --mb 5 --profile         # cProfile of attnlab's training

Training (each run in a fresh subprocess, so its peak memory is its own): a WordPiece vocabulary (BERT
pipeline: clean, lowercase + strip accents, whitespace/punctuation split) and a byte-level BPE vocabulary
(RoBERTa: GPT-2 bytes), ``--vocab-size`` tokens each, on whole files of ``--data`` taken in name order until
``--mb`` MB. Time is wall-clock seconds; memory is the peak resident set of the training process and of its
largest counting worker (``parent + workers x worker`` bounds the total). HF trains on the same files with
the same pipeline and special tokens (``WordPieceTrainer(min_frequency=2, limit_alphabet=1000)``,
``BpeTrainer`` with the byte alphabet).

Encoding: attnlab's vocabularies are saved once (``vocab.txt``; ``vocab.json`` + ``merges.txt``) and loaded
from those same files by all three libraries; ``--encode-mb`` MB of the corpus's lines are encoded with
special tokens. Single process: attnlab ``encode_batch`` (full encodings) and ``encode_ids_flat`` (the
ids-only path) in one process; HF tokenizers ``encode_batch`` with ``RAYON_NUM_THREADS=1``; transformers'
``BertTokenizerLegacy`` (the slow Python ``BertTokenizer``) on the first ``--slow-mb`` MB. All cores:
attnlab's ``parallel.encode_texts_flat`` (a process pool on the ids-only path; the ids come back to the parent
as arrays), timed with the pool's start-up; HF ``encode_batch`` with all threads (the goal's reference) and,
for information, HF's ``encode_batch_fast``, which skips offsets as attnlab's ids-only path does. Ids of
every attnlab path are checked against HF tokenizers' on the first 2,000 lines (``agree``: the lowest of
the three).

Goals (printed with the ratios): training time <= 3x HF's, training peak memory <= 2 GB, all-cores
encoding >= 1.0x HF tokenizers' batch throughput, single-process encoding >= 2x the slow Python tokenizer.
"""

from __future__ import annotations

import os
import sys

# This file is named like the `tokenizers` package: keep its directory off the import path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

SPECIALS = {
    "wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "byte_level_bpe": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data",
        default=os.path.join(_ROOT, "..", "shared", "data", "books", "en"),
        help="a folder of UTF-8 text files (default: ../shared/data/books/en)",
    )
    p.add_argument("--mb", type=float, default=50.0, help="training corpus in MB (whole files; default 50)")
    p.add_argument("--vocab-size", type=int, default=30_000, help="vocabulary size (default 30000)")
    p.add_argument("--encode-mb", type=float, default=10.0, help="MB of lines to encode (default 10)")
    p.add_argument("--slow-mb", type=float, default=1.0, help="MB for the slow Python tokenizer (default 1)")
    p.add_argument("--processes", type=int, default=None, help="processes to count/encode (default: all)")
    p.add_argument("--work-dir", default="/tmp/attnlab-bench-tokenizers", help="where vocabularies are saved")
    p.add_argument("--skip-train", action="store_true", help="reuse the vocabularies saved in --work-dir")
    p.add_argument("--skip-hf-train", action="store_true", help="do not train with HF tokenizers")
    p.add_argument("--skip-encode", action="store_true", help="training only")
    p.add_argument("--kinds", default="wordpiece,byte_level_bpe", help="which vocabularies (comma-separated)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile attnlab's WordPiece training (one process) and print the top functions",
    )
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def corpus_files(folder: str, mb: float) -> tuple[list[str], int]:
    root = Path(folder)
    if not root.is_dir():
        raise SystemExit(f"benchmarks/tokenizers.py: data folder not found: {root} (pass --data)")
    files, total = [], 0
    for path in sorted(root.iterdir()):
        if not path.is_file():
            continue
        files.append(str(path))
        total += path.stat().st_size
        if total >= mb * 1e6:
            break
    if not files:
        raise SystemExit(f"benchmarks/tokenizers.py: no files in {root}")
    return files, total


def peak_mb() -> tuple[float, float]:
    """Peak RSS of this process and of its largest (waited-for) child, in MB (Linux reports KB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, kids


# ----------------------------------------------------------------------------------------------------------
# Children: one training or encoding measurement per process


def child_train_attnlab(cfg: dict) -> dict:
    from attnlab.tokenizers.files import save_vocab_files
    from attnlab.tokenizers.trainers import train_tokenizer

    start = time.perf_counter()
    tok = train_tokenizer(
        cfg["kind"],
        cfg["files"],
        cfg["vocab_size"],
        show_progress=False,
        processes=cfg["processes"],
        special_tokens=SPECIALS[cfg["kind"]],
    )
    seconds = time.perf_counter() - start
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    save_vocab_files(tok, out)  # the classic files only: every library loads exactly these
    own, worker = peak_mb()
    return {"seconds": seconds, "peak_mb": own, "worker_mb": worker, "vocab": tok.get_vocab_size()}


def child_train_hf(cfg: dict) -> dict:
    import tokenizers as hft

    if cfg["kind"] == "wordpiece":
        tok = hft.Tokenizer(hft.models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = hft.normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = hft.pre_tokenizers.BertPreTokenizer()
        trainer = hft.trainers.WordPieceTrainer(
            vocab_size=cfg["vocab_size"],
            min_frequency=2,
            limit_alphabet=1000,
            special_tokens=SPECIALS["wordpiece"],
            show_progress=False,
        )
    else:
        tok = hft.Tokenizer(hft.models.BPE())
        tok.pre_tokenizer = hft.pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = hft.trainers.BpeTrainer(
            vocab_size=cfg["vocab_size"],
            special_tokens=SPECIALS["byte_level_bpe"],
            initial_alphabet=hft.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    start = time.perf_counter()
    tok.train(cfg["files"], trainer)
    seconds = time.perf_counter() - start
    own, _ = peak_mb()
    return {"seconds": seconds, "peak_mb": own, "worker_mb": 0.0, "vocab": tok.get_vocab_size()}


def child_encode_hf(cfg: dict) -> dict:
    import tokenizers as hft

    d = Path(cfg["dir"])
    if cfg["kind"] == "wordpiece":
        tok = hft.BertWordPieceTokenizer(str(d / "vocab.txt"), lowercase=True)
    else:
        tok = hft.ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt"))
        tok.post_processor = hft.processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
        )
    lines = Path(cfg["sample"]).read_text(encoding="utf-8").split("\n")
    tok.encode_batch(lines[:100])  # warm-up (thread pool)
    start = time.perf_counter()
    encs = tok.encode_batch(lines)
    seconds = time.perf_counter() - start
    ids = [e.ids for e in encs[:2000]]
    result = {"seconds": seconds, "tokens": sum(len(e.ids) for e in encs), "ids": ids}
    fast = getattr(tok._tokenizer, "encode_batch_fast", None)  # tokenizers >= 0.21: no offsets computed
    if fast is not None:
        start = time.perf_counter()
        fast(lines)
        result["fast_seconds"] = time.perf_counter() - start
    return result


def child_encode_slow(cfg: dict) -> dict:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    tok = BertTokenizerLegacy(str(Path(cfg["dir"]) / "vocab.txt"), do_lower_case=True)
    lines = Path(cfg["sample"]).read_text(encoding="utf-8").split("\n")
    start = time.perf_counter()
    n = 0
    for i in range(0, len(lines), 1000):
        n += sum(len(x) for x in tok(lines[i : i + 1000])["input_ids"])
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": n}


def run_child(kind: str, cfg: dict, env: dict | None = None) -> dict:
    """Run one measurement in a fresh interpreter; returns its JSON result."""
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", kind]
    proc = subprocess.run(
        cmd, input=json.dumps(cfg), capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------------------
# attnlab encoding (in this process and over a pool)


def encode_attnlab(
    directory: str, lines: list[str], processes: int, ids_only: bool
) -> tuple[float, int, list]:
    """Seconds, token count and the first 2,000 lines' ids of attnlab encoding ``lines`` with special tokens.

    One process: ``encode_batch`` (full encodings, as HF's ``encode_batch``) or, with ``ids_only``,
    ``encode_ids_flat``, in blocks of 2,000 lines. All cores: ``parallel.encode_texts_flat``, timed whole
    (pool start-up included; the tokenizer is loaded before, and forked workers inherit it with cold caches).
    """
    import numpy as np

    from attnlab.tokenizers import load_tokenizer
    from attnlab.tokenizers.parallel import encode_texts_flat

    tok = load_tokenizer(directory)
    if processes > 1:
        start = time.perf_counter()
        ids, lengths = encode_texts_flat(tok, lines, processes, chunk_size=2000, add_special_tokens=True)
        seconds = time.perf_counter() - start
    else:
        tok.encode_batch(lines[:100])
        chunks = [lines[i : i + 2000] for i in range(0, len(lines), 2000)]
        start = time.perf_counter()
        if ids_only:
            parts = [tok.encode_ids_flat(chunk) for chunk in chunks]
        else:
            parts = [_flat([e.ids for e in tok.encode_batch(chunk)]) for chunk in chunks]
        seconds = time.perf_counter() - start
        ids, lengths = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    ends = np.cumsum(lengths[:2000])
    first = np.split(ids[: ends[-1] if len(ends) else 0], ends[:-1])
    return seconds, len(ids), [x.tolist() for x in first]


def _flat(lists: list[list[int]]) -> tuple:
    import numpy as np

    return np.asarray([i for x in lists for i in x], np.int64), np.asarray([len(x) for x in lists], np.int64)


# ----------------------------------------------------------------------------------------------------------


def sample_lines(files: list[str], mb: float, path: Path) -> tuple[list[str], int]:
    lines: list[str] = []
    size = 0
    for f in files:
        for line in Path(f).read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                lines.append(line)
                size += len(line.encode("utf-8")) + 1
            if size >= mb * 1e6:
                break
        if size >= mb * 1e6:
            break
    path.write_text("\n".join(lines), encoding="utf-8")
    return lines, size


def profile_training(files: list[str], vocab_size: int) -> None:
    import cProfile
    import pstats

    from attnlab.tokenizers.trainers import train_tokenizer

    prof = cProfile.Profile()
    prof.enable()
    train_tokenizer("wordpiece", files, vocab_size, show_progress=False, processes=1)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args._child:
        cfg = json.loads(sys.stdin.read())
        fn = {
            "train_attnlab": child_train_attnlab,
            "train_hf": child_train_hf,
            "encode_hf": child_encode_hf,
            "encode_slow": child_encode_slow,
        }[args._child]
        print(json.dumps(fn(cfg)))
        return 0
    processes = args.processes or os.cpu_count() or 1
    files, total = corpus_files(args.data, args.mb)
    if args.profile:
        profile_training(files, args.vocab_size)
        return 0
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    kinds = [k for k in args.kinds.split(",") if k]
    import tokenizers as hft
    import transformers

    print(
        f"corpus: {len(files)} files, {total / 1e6:.1f} MB; vocab_size={args.vocab_size}; "
        f"processes={processes}; cpus={os.cpu_count()}; tokenizers {hft.__version__}, "
        f"transformers {transformers.__version__}"
    )
    rows: list[tuple[str, str, str, str, str]] = []
    for kind in kinds:
        out = work / kind
        if not args.skip_train:
            cfg = {
                "kind": kind,
                "files": files,
                "vocab_size": args.vocab_size,
                "processes": processes,
                "out": str(out),
            }
            ours = run_child("train_attnlab", cfg)
            line = (
                f"train {kind:15s} attnlab {ours['seconds']:7.1f}s  peak {ours['peak_mb']:6.0f} MB "
                f"(+ {ours['worker_mb']:.0f} MB per counting worker)  vocab {ours['vocab']}"
            )
            bound = ours["peak_mb"] + processes * ours["worker_mb"]
            rows.append(
                (f"train {kind} peak memory (parent + workers)", f"{bound:.0f} MB", "", "", "<= 2048 MB")
            )
            if not args.skip_hf_train:
                ref = run_child("train_hf", cfg)
                line += f"\n      {'':15s} HF      {ref['seconds']:7.1f}s  peak {ref['peak_mb']:6.0f} MB"
                rows.append(
                    (
                        f"train {kind} time",
                        f"{ours['seconds']:.1f} s",
                        f"{ref['seconds']:.1f} s",
                        f"{ours['seconds'] / ref['seconds']:.2f}x",
                        "<= 3x",
                    )
                )
            print(line, flush=True)
        elif not out.is_dir():
            raise SystemExit(f"--skip-train: no saved vocabulary in {out}; run once without --skip-train")
    if args.skip_encode:
        print_table(rows)
        return 0
    sample = work / "sample.txt"
    lines, size = sample_lines(files, args.encode_mb, sample)
    mb = size / 1e6
    print(f"encode: {len(lines)} lines, {mb:.1f} MB")
    for kind in kinds:
        d = str(work / kind)
        t1, n1, ids1 = encode_attnlab(d, lines, 1, ids_only=False)
        t1i, _, ids1i = encode_attnlab(d, lines, 1, ids_only=True)
        tn, nn, idsn = encode_attnlab(d, lines, processes, ids_only=True)
        hf_cfg = {"kind": kind, "dir": d, "sample": str(sample)}
        h1 = run_child("encode_hf", hf_cfg, {"RAYON_NUM_THREADS": "1"})
        hn = run_child("encode_hf", hf_cfg)
        agree = min(
            sum(a == b for a, b in zip(ours, h1["ids"])) / max(1, min(len(ours), len(h1["ids"])))
            for ours in (ids1, ids1i, idsn)
        )
        print(
            f"encode {kind:15s} attnlab 1 proc {mb / t1:6.2f} MB/s {n1 / t1:9.0f} tok/s "
            f"(ids-only {mb / t1i:6.2f} MB/s) | "
            f"{processes} procs {mb / tn:6.2f} MB/s {nn / tn:9.0f} tok/s | "
            f"HF 1 thread {mb / h1['seconds']:6.2f} MB/s | "
            f"HF batch {mb / hn['seconds']:6.2f} MB/s {hn['tokens'] / hn['seconds']:9.0f} tok/s | "
            f"ids agree {agree:.1%}",
            flush=True,
        )
        rows.append(
            (
                f"encode {kind} all cores vs HF batch",
                f"{mb / tn:.2f} MB/s",
                f"{mb / hn['seconds']:.2f} MB/s",
                f"{hn['seconds'] / tn:.2f}x",
                ">= 1.0x",
            )
        )
        if "fast_seconds" in hn:  # HF's ids-oriented variant (offsets not computed), for information
            rows.append(
                (
                    f"encode {kind} all cores vs HF encode_batch_fast",
                    f"{mb / tn:.2f} MB/s",
                    f"{mb / hn['fast_seconds']:.2f} MB/s",
                    f"{hn['fast_seconds'] / tn:.2f}x",
                    "(info)",
                )
            )
        rows.append(
            (
                f"encode {kind} 1 process vs HF 1 thread",
                f"{mb / t1:.2f} MB/s",
                f"{mb / h1['seconds']:.2f} MB/s",
                f"{h1['seconds'] / t1:.2f}x",
                "(info)",
            )
        )
        rows.append(
            (
                f"encode {kind} 1 process ids-only vs HF 1 thread",
                f"{mb / t1i:.2f} MB/s",
                f"{mb / h1['seconds']:.2f} MB/s",
                f"{h1['seconds'] / t1i:.2f}x",
                "(info)",
            )
        )
        if kind == "wordpiece":
            slow_lines, slow_size = sample_lines(files, args.slow_mb, work / "sample_slow.txt")
            s = run_child("encode_slow", {"dir": d, "sample": str(work / "sample_slow.txt")})
            slow_rate = slow_size / 1e6 / s["seconds"]
            rows.append(
                (
                    "encode wordpiece 1 process vs slow BertTokenizer",
                    f"{mb / t1:.2f} MB/s",
                    f"{slow_rate:.2f} MB/s",
                    f"{(mb / t1) / slow_rate:.2f}x",
                    ">= 2x",
                )
            )
    print_table(rows)
    return 0


def print_table(rows: list[tuple[str, str, str, str, str]]) -> None:
    print()
    print(f"{'measure':52s} {'attnlab':>12s} {'reference':>12s} {'ratio':>8s}  goal")
    for name, ours_v, ref_v, ratio, goal in rows:
        print(f"{name:52s} {ours_v:>12s} {ref_v:>12s} {ratio:>8s}  {goal}")


if __name__ == "__main__":
    sys.exit(main())
