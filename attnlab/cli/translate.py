"""``attnlab translate-train``, ``translate``, ``translate-average`` and ``bleu``: the Transformer as a
translation system (Vaswani et al. 2017).

attnlab translate-train --data-dir data/multi30k --src-lang en --tgt-lang de --output-dir runs/ende \\
    --minutes 60  # on a CPU: transformer-cpu; on a GPU: transformer-base
attnlab translate runs/ende/model --input test.en --beam 4 > hyp.de
attnlab bleu hyp.de test.de                       # BLEU = 34.12 (nrefs:1|case:mixed|eff:no|tok:13a|...)
attnlab translate-average runs/ende --last 5 --output runs/ende/avg5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .args import (
    device,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from .parallel import add_parallel_options, check_parallel, parallel_settings

# Multi30k file names under --data-dir: {split}.{lang}
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "translate-train",
        help="learn a joint BPE and train a Transformer translation model (the paper's recipe)",
        description="Train an encoder-decoder Transformer on aligned parallel text (one sentence per line) "
        "with Adam (0.9, 0.98, 1e-9), the inverse-square-root schedule with warm-up, label smoothing, "
        "token-count batches and averaging of the last checkpoints. Writes OUTPUT_DIR/model "
        "(config.json, model.safetensors, tokenizer.json).",
    )
    _data_options(train.add_argument_group("data"))
    _model_options(train.add_argument_group("model (overrides of the preset)"))
    add_parallel_options(train)
    _run_options(train.add_argument_group("run"))
    train.set_defaults(func=run_train)
    _register_translate(subparsers)
    _register_average(subparsers)
    _register_bleu(subparsers)


def _data_options(data: argparse._ArgumentGroup) -> None:
    """The parallel text: files, or a Multi30k-style directory; the BPE and batch sizes."""
    data.add_argument(
        "--src-train", help="source side of the training data (default: DATA_DIR/train.SRC_LANG)"
    )
    data.add_argument(
        "--tgt-train", help="target side of the training data (default: DATA_DIR/train.TGT_LANG)"
    )
    data.add_argument(
        "--src-valid",
        help="source side of held-out data, loss reported at the end (default: DATA_DIR/val.SRC_LANG)",
    )
    data.add_argument("--tgt-valid", help="target side of held-out data (default: DATA_DIR/val.TGT_LANG)")
    data.add_argument(
        "--data-dir", help="a directory with Multi30k-style names: train.L, val.L (L = --src-lang/--tgt-lang)"
    )
    data.add_argument("--src-lang", default="en", help="source language suffix of --data-dir files")
    data.add_argument("--tgt-lang", default="de", help="target language suffix of --data-dir files")
    data.add_argument(
        "--vocab-size", type=positive_int, default=8000, help="joint BPE vocabulary (paper: ~37000)"
    )
    data.add_argument(
        "--max-length", type=positive_int, default=256, help="drop pairs longer than this (tokens)"
    )
    data.add_argument(
        "--max-tokens",
        type=positive_int,
        help="padded tokens per batch and side (default: 2500 on a CPU, 4096 on a GPU; paper: 25000)",
    )


def _model_options(model: argparse._ArgumentGroup) -> None:
    """The preset and its overrides."""
    model.add_argument(
        "--preset",
        help="transformer-base, transformer-big, transformer-cpu, transformer-tiny (default: transformer-cpu "
        "when training on a CPU, transformer-base on a GPU; see attnlab.translation.plan.sizes_for)",
    )
    model.add_argument("--layers", type=positive_int, help="N (default: the preset's)")
    model.add_argument("--d-model", type=positive_int, help="d_model (default: the preset's)")
    model.add_argument("--d-ff", type=positive_int, help="d_ff (default: the preset's)")
    model.add_argument("--heads", type=positive_int, help="h (default: the preset's)")
    model.add_argument("--d-k", type=positive_int, help="per-head key/value size (default d_model / h)")
    model.add_argument("--dropout", type=probability, help="P_drop (default: the preset's)")
    model.add_argument("--label-smoothing", type=fraction, help="epsilon_ls (default: the preset's)")
    model.add_argument(
        "--positions", choices=["sinusoidal", "learned"], help="position embeddings (default: the preset's)"
    )
    model.add_argument(
        "--pre-ln", action="store_true", help="pre-LN residuals instead of the paper's post-LN"
    )


def _run_options(run: argparse._ArgumentGroup) -> None:
    """Output, steps and time, schedule, checkpoints, resume, device."""
    run.add_argument("--output-dir", required=True, help="run directory (checkpoints, logs, model)")
    run.add_argument(
        "--max-steps",
        type=positive_int,
        help="optimizer steps (default: what fits in --minutes, planned from timed steps; "
        "without --minutes the paper's 100,000)",
    )
    run.add_argument(
        "--minutes",
        type=positive_float,
        help="training time budget: the steps and warm-up are planned to fit it (default: none)",
    )
    run.add_argument(
        "--warmup",
        type=non_negative_int,
        help="warm-up steps (default: 800 on a CPU, the paper's 4000 on a GPU; with --minutes at most a "
        "quarter of the planned steps; a given warm-up longer than the plan: 4%% of it)",
    )
    run.add_argument(
        "--lr-scale", type=positive_float, default=1.0, help="multiplies the paper's learning rate formula"
    )
    run.add_argument(
        "--average-last", type=positive_int, default=5, help="average the last N checkpoints (paper: 5)"
    )
    run.add_argument(
        "--save-every",
        type=positive_int,
        help="steps between checkpoints (default: 50 on a CPU, 1000 on a GPU)",
    )
    run.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    again = run.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in OUTPUT_DIR from its newest checkpoint that verifies (with its tokenizer)",
    )
    again.add_argument(
        "--overwrite", action="store_true", help="remove an earlier run's outputs in OUTPUT_DIR, start afresh"
    )
    run.add_argument(
        "--device", type=device, default="auto", help="cpu, cuda, ... (default auto: cuda if available)"
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--threads",
        type=positive_int,
        help="torch intra-op threads (1 is fastest on a busy CPU; default: torch's)",
    )


def _register_translate(subparsers: argparse._SubParsersAction) -> None:
    tr = subparsers.add_parser(
        "translate",
        help="translate sentences (stdin or --input, one per line) with a trained model",
        description="Translate one sentence per line from --input (default stdin) to stdout (or --output).",
    )
    tr.add_argument("model_dir", metavar="MODEL_DIR", help="a translate-train model directory (RUN/model)")
    tr.add_argument("--input", help="source file (default: stdin)")
    tr.add_argument("--output", help="write here (default: stdout)")
    tr.add_argument("--beam", type=positive_int, default=4, help="beam size; 1 is greedy (paper: 4)")
    tr.add_argument("--alpha", type=non_negative_float, default=0.6, help="GNMT length penalty (paper: 0.6)")
    tr.add_argument(
        "--max-length-offset", type=positive_int, default=50, help="output length <= input length + this"
    )
    tr.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch")
    tr.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:1, ...")
    tr.add_argument("--threads", type=positive_int, help="torch intra-op threads (default: torch's)")
    tr.set_defaults(func=run_translate)


def _register_average(subparsers: argparse._SubParsersAction) -> None:
    avg = subparsers.add_parser(
        "translate-average",
        help="average the last N checkpoints of a translate-train run into a model directory",
    )
    avg.add_argument("run_dir", metavar="RUN_DIR", help="a translate-train --output-dir")
    avg.add_argument("--last", type=positive_int, default=5, help="how many of the newest checkpoints")
    avg.add_argument("--output-dir", "--output", required=True, help="model directory to write")
    avg.set_defaults(func=run_average)


def _register_bleu(subparsers: argparse._SubParsersAction) -> None:
    bleu = subparsers.add_parser(
        "bleu",
        help="sacreBLEU of detokenised hypotheses against references, with its signature",
    )
    bleu.add_argument("hypotheses", metavar="HYP", help="detokenised hypotheses, one per line")
    bleu.add_argument("references", metavar="REF", nargs="+", help="reference files, aligned with HYP")
    bleu.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer")
    bleu.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")
    bleu.set_defaults(func=run_bleu)


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def _data_paths(args: argparse.Namespace) -> dict[str, Path | None]:
    paths: dict[str, Path | None] = {
        "src_train": Path(args.src_train) if args.src_train else None,
        "tgt_train": Path(args.tgt_train) if args.tgt_train else None,
        "src_valid": Path(args.src_valid) if args.src_valid else None,
        "tgt_valid": Path(args.tgt_valid) if args.tgt_valid else None,
    }
    if args.data_dir:
        d = Path(args.data_dir)
        if not d.is_dir():
            raise FileNotFoundError(f"--data-dir {d}: no such directory")
        for key, split in (("train", SPLITS["train"]), ("valid", SPLITS["valid"])):
            for side, lang in (("src", args.src_lang), ("tgt", args.tgt_lang)):
                if paths[f"{side}_{key}"] is None and (d / f"{split}.{lang}").is_file():
                    paths[f"{side}_{key}"] = d / f"{split}.{lang}"
    if paths["src_train"] is None or paths["tgt_train"] is None:
        if args.data_dir:  # name the file the directory lacks
            d = Path(args.data_dir)
            missing = [
                str(d / f"{SPLITS['train']}.{lang}")
                for side, lang in (("src", args.src_lang), ("tgt", args.tgt_lang))
                if paths[f"{side}_train"] is None
            ]
            raise FileNotFoundError(
                f"{' and '.join(missing)}: no such file (--data-dir {d} needs train.{args.src_lang} and "
                f"train.{args.tgt_lang}, or give --src-train and --tgt-train)"
            )
        missing = [f"--{side}-train" for side in ("src", "tgt") if paths[f"{side}_train"] is None]
        raise FileNotFoundError(
            f"no training data: give {' and '.join(missing)} (parallel text files), or --data-dir holding "
            f"train.{args.src_lang} and train.{args.tgt_lang}"
        )
    if (paths["src_valid"] is None) != (paths["tgt_valid"] is None):
        raise ValueError(
            f"held-out data needs both sides (--src-valid {paths['src_valid']}, "
            f"--tgt-valid {paths['tgt_valid']}); give both or neither"
        )
    for key, path in paths.items():
        if path is not None and path.is_dir():
            raise IsADirectoryError(f"--{key.replace('_', '-')} {path}: is a directory, expected a text file")
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"--{key.replace('_', '-')} {path}: no such file")
    return paths


def _check_before_writing(args: argparse.Namespace, paths: dict[str, Path | None], overrides: dict) -> None:
    """Read the parallel files and build the model config once before the run starts, so that a malformed
    input (unequal lengths, not UTF-8, no pairs) or a bad override is reported before anything is written
    into --output-dir."""
    from attnlab.translation.config import preset
    from attnlab.translation.data import MIN_VOCAB_SIZE, read_parallel

    if args.vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"--vocab-size {args.vocab_size}: expected at least {MIN_VOCAB_SIZE} (the {MIN_VOCAB_SIZE - 1} "
            "special and byte tokens and one learned symbol)"
        )
    read_parallel(paths["src_train"], paths["tgt_train"])
    if paths["src_valid"] is not None and paths["tgt_valid"] is not None:
        read_parallel(paths["src_valid"], paths["tgt_valid"])
    preset(args.preset, **overrides)


def run_train(args: argparse.Namespace) -> int:
    from attnlab.inference.allocator import bound_kernel_caches
    from attnlab.train.distributed import setup_distributed
    from attnlab.translation.plan import DEFAULT_WARMUP_SHARE, sizes_for
    from attnlab.translation.recipe import train_translation

    bound_kernel_caches()  # oneDNN's kernels per batch shape, capped (benchmarks/training_memory.py)

    context = setup_distributed(device=str(args.device))  # one process unless launched by torchrun
    check_parallel(parallel_settings(args), context.is_distributed, "translate-train")
    if context.is_distributed and args.max_steps is None and args.minutes is not None:
        raise ValueError(
            "translate-train under torchrun: --minutes plans the steps from one process's timing; give "
            "--max-steps as well (--minutes then stops the run early, on every process at the same step)"
        )
    paths = _data_paths(args)
    _set_threads(args.threads)
    sizes = sizes_for(args.device)  # what the run takes for options left out, by where it trains
    args.preset = args.preset or sizes.preset
    warmup = sizes.warmup if args.warmup is None else args.warmup
    max_tokens = sizes.max_tokens if args.max_tokens is None else args.max_tokens
    save_every = sizes.save_every if args.save_every is None else args.save_every
    if context.is_main:
        print(
            f"translate-train: preset {args.preset}, warm-up {warmup}, {max_tokens} tokens a batch, "
            f"a checkpoint every {save_every} steps (defaults for "
            f"{sizes.preset.removeprefix('transformer-')} training unless given)"
        )
    overrides = {
        key: value
        for key, value in (
            ("num_layers", args.layers),
            ("d_model", args.d_model),
            ("d_ff", args.d_ff),
            ("num_heads", args.heads),
            ("d_k", args.d_k),
            ("dropout", args.dropout),
            ("label_smoothing", args.label_smoothing),
            ("position_embedding", args.positions),
        )
        if value is not None
    }
    if args.pre_ln:
        overrides["norm_first"] = True
    _check_before_writing(args, paths, overrides)
    run = train_translation(
        paths["src_train"],
        paths["tgt_train"],
        args.output_dir,
        config_overrides=overrides,
        preset_name=args.preset,
        vocab_size=args.vocab_size,
        max_length=args.max_length,
        max_tokens=max_tokens,
        max_steps=100_000 if args.max_steps is None else args.max_steps,
        minutes=args.minutes,
        auto_steps=args.max_steps is None and args.minutes is not None,
        warmup_share=DEFAULT_WARMUP_SHARE if args.warmup is None else None,
        warmup=warmup,
        lr_scale=args.lr_scale,
        average_last=args.average_last,
        save_every=save_every,
        seed=args.seed,
        src_valid=paths["src_valid"],
        tgt_valid=paths["tgt_valid"],
        trainer_overrides={
            "device": args.device,
            "progress_bar": not args.no_progress,
            **parallel_settings(args),
        },
        resume=args.resume,
        overwrite=args.overwrite,
        log=(lambda m: print(m, file=sys.stderr)) if context.is_main else (lambda m: None),
    )
    if not context.is_main:  # rank 0 wrote the model and reports
        return 0
    print(f"model written to {run.model_dir} after {run.steps} steps", file=sys.stderr)
    if paths["src_valid"] and paths["tgt_valid"]:
        print_what_it_learned(run.model_dir, paths["src_valid"], paths["tgt_valid"])
    return 0


VALID_SENTENCES = 200  # validation pairs translated at the end of translate-train (beam 4, ~10 s on a CPU)


def print_what_it_learned(model_dir: Any, src_valid: str, tgt_valid: str) -> None:
    """What the trained model can do: BLEU on the first `VALID_SENTENCES` validation pairs with the
    paper's beam search, and two of its translations beside the references."""
    from attnlab.accel import optimize
    from attnlab.io import load
    from attnlab.metrics.bleu import corpus_bleu
    from attnlab.tokenizers import load_tokenizer
    from attnlab.translation.data import read_parallel
    from attnlab.translation.recipe import translate_texts

    valid = read_parallel(src_valid, tgt_valid)
    source, reference = valid.source[:VALID_SENTENCES], valid.target[:VALID_SENTENCES]
    if not source:
        return
    model, tokenizer = load(model_dir, expect="marian"), load_tokenizer(model_dir)
    optimize(model)  # the CPU fast paths of decoding (attnlab.accel)
    hypotheses = translate_texts(model, tokenizer, source, beam_size=4, alpha=0.6)
    bleu = corpus_bleu(hypotheses, reference)
    print(f"validation BLEU on the first {len(source)} pairs of {src_valid} (beam 4): {bleu.score:.2f}")
    for s, h, r in list(zip(source, hypotheses, reference))[:2]:
        print(f"  {s}\n    -> {h}\n    reference: {r}")


def run_translate(args: argparse.Namespace) -> int:
    from attnlab.accel import optimize
    from attnlab.io import load
    from attnlab.tokenizers import load_tokenizer
    from attnlab.translation.recipe import translate_texts

    from .inputs import read_stdin
    from .model_dirs import check_seq2seq_dir

    _set_threads(args.threads)
    directory = check_seq2seq_dir(args.model_dir)
    lines = _read(args.input, "--input") if args.input else read_stdin().splitlines()
    model = load(directory, device=args.device, expect="marian")
    tokenizer = load_tokenizer(directory)
    optimize(model)  # the CPU fast paths of decoding (attnlab.accel)
    outputs = translate_texts(
        model, tokenizer, lines, beam_size=args.beam, alpha=args.alpha,
        max_length_offset=args.max_length_offset, batch_size=args.batch_size,
    )  # fmt: skip
    text = "".join(o + "\n" for o in outputs)
    if args.output:
        from attnlab.atomic import atomic_write

        with atomic_write(args.output) as f:  # all or nothing
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def run_average(args: argparse.Namespace) -> int:
    from attnlab.io import load, save
    from attnlab.manifest import read_manifest
    from attnlab.tokenizers import load_tokenizer
    from attnlab.translation.recipe import last_checkpoints, load_averaged

    from .model_dirs import check_seq2seq_dir

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"RUN_DIR {run_dir}: no such directory")
    model_dir = check_seq2seq_dir(run_dir / "model", "RUN_DIR/model")
    model, tokenizer = load(model_dir, expect="marian"), load_tokenizer(model_dir)
    manifest = read_manifest(run_dir / "model")
    run_id = manifest.run_id if manifest is not None else None  # only the checkpoints of the model's run
    checkpoints = last_checkpoints(run_dir, args.last, run_id=run_id)
    load_averaged(model, checkpoints)
    save(model, args.output_dir, run_id=run_id, tokenizer=tokenizer)
    print(f"averaged {', '.join(p.name for p in checkpoints)} into {args.output_dir}", file=sys.stderr)
    return 0


def _read(path: str, what: str = "") -> list[str]:
    """The lines of a UTF-8 text file; errors name the file (and the option it came from)."""
    name = f"{what} {path}" if what else path
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{name}: no such file")
    if not p.is_file():
        raise IsADirectoryError(f"{name}: expected a text file, found a directory")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{name}:{line}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    return text.splitlines()


def run_bleu(args: argparse.Namespace) -> int:
    from attnlab.metrics.bleu import corpus_bleu

    hyps = _read(args.hypotheses, "HYP")
    refs = []
    for ref in args.references:
        lines = _read(ref, "REF")
        if len(lines) != len(hyps):
            raise ValueError(
                f"{args.hypotheses} has {len(hyps)} lines, {ref} has {len(lines)}; they must align"
            )
        refs.append(lines)
    result = corpus_bleu(hyps, refs, tokenize=args.tokenize, lowercase=args.lowercase)
    print(result)
    return 0
