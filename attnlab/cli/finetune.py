"""``attnlab finetune`` and ``attnlab evaluate``: BERT's fine-tuning recipe and its scoring.

    attnlab finetune --task sst2 --data-dir data/glue/SST-2 --model runs/bert/best --output-dir runs/sst2
    attnlab finetune --task mrpc --data-dir data/glue/MRPC --model bert-mini --tokenizer tok/ --sweep
    attnlab finetune --task squad --data-dir data/squad --model hf/bert-base-uncased --max-length 384
    attnlab evaluate --task sst2 --data-dir data/glue/SST-2 --model runs/sst2/best

``--model`` is a checkpoint directory (attnlab or HF transformers) or, when no checkpoint exists, a preset
name (``attnlab info`` lists them) for random initialisation with ``--tokenizer``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from attnlab.cli.parallel import add_parallel_options, check_parallel, parallel_settings
from attnlab.tasks.finetune_config import ENCODER_DROPOUT, LEARNING_RATES, SMALL_MODEL_LEARNING_RATES
from attnlab.tasks.registry import TASKS

from .args import (
    device,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    probability_or_keep,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    _finetune_parser(subparsers)
    _evaluate_parser(subparsers)


OWN_DATA_EPILOG = """\
your own data (--task generic):
  --data-dir holds train.csv and dev.csv (or train.tsv/dev.tsv, train.jsonl/dev.jsonl): CSV quoted,
  TSV unquoted (GLUE style), JSON lines one object per line; every file has a header row (JSON: keys)
  naming its columns. --text-a names the text column (default sentence), --text-b a second text for
  sentence pairs, --label-column the label (default label): labels are class names (any strings),
  or numbers with --regression (MSE loss, Pearson/Spearman).
  e.g. attnlab finetune --task generic --data-dir mydata --model runs/pretrain-mlm/model \\
           --text-a review --label-column stars
the named tasks read their data sets' own files: GLUE's train.tsv/dev.tsv (MNLI dev_matched.tsv),
SQuAD's train-v1.1.json/dev-v1.1.json (or train.json/dev.json), CoNLL-2003's train.txt/valid.txt,
SWAG's train.csv/val.csv."""


def _finetune_parser(subparsers: argparse._SubParsersAction) -> None:
    ft = subparsers.add_parser(
        "finetune",
        help="fine-tune a checkpoint (or a randomly initialised preset) on a task",
        description="BERT's fine-tuning recipe: AdamW, 10% warm-up then linear decay, dropout 0.1, "
        "batch 32, 2-4 epochs, dev evaluation after every epoch, the best epoch kept in OUTPUT_DIR/best.",
        epilog=OWN_DATA_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _task_args(ft)
    ft.add_argument(
        "--model", required=True, metavar="DIR_OR_PRESET", help="checkpoint directory or preset name"
    )
    ft.add_argument("--tokenizer", help="tokenizer directory (default: the model directory)")
    ft.add_argument("--output-dir", default=None, help="where runs go (default: runs/finetune-TASK)")
    _recipe_args(ft)
    _length_args(ft)
    _example_args(ft)
    _machine_args(ft)
    add_parallel_options(ft)
    _distillation_args(ft)
    _kg_args(ft)
    _run_dir_args(ft)
    _generic_args(ft)
    ft.set_defaults(func=run_finetune)


def _task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, choices=sorted(TASKS), help="the task")
    p.add_argument(
        "--data-dir",
        required=True,
        help="directory with the task's train and dev files (--task generic: train.csv and dev.csv, or "
        ".tsv/.jsonl; see below)",
    )


def _recipe_args(ft: argparse.ArgumentParser) -> None:
    """BERT's hyper-parameters: learning rates and seeds, epochs, batch, warm-up, decay, dropout, pooling."""
    ft.add_argument(
        "--lr",
        type=positive_float,
        nargs="+",
        default=None,
        help="learning rate(s) (default: 3e-5, BERT's, for BERT-base's width and up; 1e-4 below it)",
    )
    ft.add_argument(
        "--sweep",
        action="store_true",
        help=f"sweep BERT's learning rates {list(LEARNING_RATES)}; below BERT-base's width the smaller "
        f"BERTs' {list(SMALL_MODEL_LEARNING_RATES)}",
    )
    ft.add_argument(
        "--seeds",
        type=non_negative_int,
        nargs="+",
        default=[0],
        help="seeds; the median over them is reported",
    )
    ft.add_argument("--epochs", type=positive_float, default=3.0, help="epochs (BERT: 2 to 4; default 3)")
    ft.add_argument("--batch-size", type=positive_int, default=32, help="sequences per step")
    ft.add_argument(
        "--warmup", type=fraction, default=0.1, help="warm-up fraction of the steps (default 0.1)"
    )
    ft.add_argument("--weight-decay", type=non_negative_float, default=0.01, help="AdamW weight decay")
    ft.add_argument("--dropout", type=probability, default=0.1, help="classifier dropout (default 0.1)")
    ft.add_argument(
        "--pooling", choices=("cls", "mean"), default="cls",
        help="classification and regression: the sentence vector the classifier reads, BERT's pooled [CLS] "
        "(default) or the mean of the tokens' final states (no pooler; attnlab format and ONNX only)",
    )  # fmt: skip
    ft.add_argument(
        "--eval-every", type=non_negative_int, default=0,
        help="optimizer steps between evaluations, each keeping the best model so far (default 0: each "
        "epoch's end); the last step is always evaluated",
    )  # fmt: skip
    ft.add_argument(
        "--group-by-length", action="store_true",
        help="batches of examples of similar length (HF's group_by_length): less padding, faster steps; "
        "every example still once an epoch in a seeded order",
    )  # fmt: skip
    ft.add_argument(
        "--encoder-dropout", type=probability_or_keep, default=ENCODER_DROPOUT, metavar="P|keep",
        help="dropout of the encoder's layers while fine-tuning (BERT's 0.1, also for models pre-trained "
        "without dropout); 'keep': the checkpoint's own",
    )  # fmt: skip


def _length_args(ft: argparse.ArgumentParser) -> None:
    """Tokens per sequence; QA's passage windows and question cut."""
    ft.add_argument(
        "--max-length", type=positive_int, default=None, help="tokens per sequence (default 128; QA 384)"
    )
    ft.add_argument(
        "--stride", type=positive_int, default=128, help="QA: overlap of passage windows in tokens"
    )
    ft.add_argument("--max-query-length", type=positive_int, default=64, help="QA: longer questions are cut")


def _example_args(ft: argparse.ArgumentParser) -> None:
    """How many training and dev examples, and the held-out selection split."""
    ft.add_argument(
        "--max-train-examples", type=positive_int, default=None,
        help="use the first N training examples (default: all)",
    )  # fmt: skip
    ft.add_argument(
        "--selection-examples",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="hold out N training examples (a fixed random draw) to choose the learning rate and each run's "
        "best evaluation; dev then scores the chosen models only (default 0: dev chooses, as BERT did)",
    )
    ft.add_argument(
        "--max-eval-examples",
        type=positive_int,
        default=None,
        help="use the first N dev examples (default: all)",
    )


def _machine_args(ft: argparse.ArgumentParser) -> None:
    """Time budget, device, precision, progress bars."""
    ft.add_argument(
        "--minutes", type=positive_float, default=None, help="wall-clock budget per run (default: none)"
    )
    ft.add_argument(
        "--device", type=device, default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)"
    )
    ft.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    ft.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True,
        help="show progress bars (default: yes, as pretrain; --no-progress for logs only)",
    )  # fmt: skip


def _distillation_args(ft: argparse.ArgumentParser) -> None:
    g = ft.add_argument_group("task-specific distillation (DistilBERT, attnlab.tasks.distillation)")
    g.add_argument(
        "--teacher", metavar="FINETUNED_DIR",
        help="a model fine-tuned on the same task: its soft targets are added to the task loss",
    )  # fmt: skip
    g.add_argument("--temperature", type=positive_float, default=2.0, help="soft-target temperature")
    g.add_argument(
        "--alpha", type=fraction, default=0.5, help="weight of the soft-target loss (task loss: 1 - alpha)"
    )


def _evaluate_parser(subparsers: argparse._SubParsersAction) -> None:
    ev = subparsers.add_parser(
        "evaluate",
        help="score a fine-tuned model directory on a task's dev (or other labelled) split",
        description="Load a fine-tuned model (attnlab or HF task checkpoint) and its tokenizer and print "
        "the task's metrics.",
    )
    _task_args(ev)
    ev.add_argument("--model", required=True, metavar="DIR", help="a fine-tuned model directory (RUN/best)")
    ev.add_argument("--split", default="dev", help="split to score (default: dev)")
    ev.add_argument(
        "--max-eval-examples", type=positive_int, default=None, help="score the first N (default: all)"
    )
    ev.add_argument(
        "--max-length", type=positive_int, default=None, help="tokens per sequence (default 128; QA 384)"
    )
    ev.add_argument("--stride", type=positive_int, default=128, help="QA: overlap of passage windows")
    ev.add_argument("--max-query-length", type=positive_int, default=64, help="QA: longer questions are cut")
    ev.add_argument("--batch-size", type=positive_int, default=64, help="sequences per forward pass")
    ev.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:1, ...")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    _kg_args(ev)
    ev.add_argument(
        "--output-dir",
        help="write eval_results.json there and, for QA, the official predictions.json (+ null_odds.json) "
        "(default: print only)",
    )
    _generic_args(ev)
    ev.set_defaults(func=run_evaluate)


def _kg_args(p: argparse.ArgumentParser) -> None:
    k = p.add_argument_group("knowledge injection (K-BERT, attnlab.knowledge)")
    k.add_argument(
        "--kg", metavar="PATH.spo",
        help="inject a knowledge graph: K-BERT .spo file(s) joined by ',', a WordNet directory, or 'wordnet' "
        "(classification of single sentences and NER)",
    )  # fmt: skip
    k.add_argument("--kg-max-triples", type=positive_int, default=2, help="triples injected per entity")
    k.add_argument(
        "--kg-predicate", action=argparse.BooleanOptionalAction, default=True,
        help="a branch reads 'predicate object' (the paper); --no-kg-predicate: the object alone "
        "(default: yes)",
    )  # fmt: skip
    k.add_argument(
        "--no-visible-matrix", action="store_true",
        help="ablation: inject the branches but let every token see every token",
    )  # fmt: skip


def _knowledge(args: argparse.Namespace) -> Any:
    """The `KnowledgeInjector` of ``--kg`` (None without it)."""
    if not args.kg:
        return None
    from attnlab.knowledge.features import load_injector

    return load_injector(args.kg, args.kg_max_triples, args.kg_predicate, not args.no_visible_matrix)


def _run_dir_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("checkpoints and resuming")
    g.add_argument(
        "--save-every", type=non_negative_int, default=0,
        help="optimizer steps between checkpoints (default 0: at every evaluation, i.e. each epoch's end)",
    )  # fmt: skip
    again = g.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true",
        help="continue the run in --output-dir: each (lr, seed) from its newest checkpoint that verifies",
    )  # fmt: skip
    again.add_argument(
        "--overwrite", action="store_true", help="remove an earlier run's outputs in --output-dir first"
    )


def _generic_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "generic task (--task generic: DATA_DIR/train.csv and dev.csv, or .tsv / .jsonl, with a header)"
    )
    g.add_argument("--text-a", default="sentence", help="first text column (default: sentence)")
    g.add_argument("--text-b", default=None, help="second text column, for sentence pairs (default: none)")
    g.add_argument("--label-column", default="label", help="label column, class names (default: label)")
    g.add_argument(
        "--regression", action="store_true", help="numeric labels: MSE loss, Pearson/Spearman metrics"
    )


def _columns(args: argparse.Namespace) -> Any:
    from attnlab.tasks.finetune import GenericColumns

    return GenericColumns(args.text_a, args.text_b, args.label_column, args.regression)


def _source(args: argparse.Namespace) -> Any:
    """A checkpoint directory, or a preset built for the tokenizer's vocabulary."""
    from attnlab.models import PRESETS, get_preset
    from attnlab.tasks.features import pad_id_of
    from attnlab.tasks.finetune import ModelSource
    from attnlab.tokenizers import load_tokenizer

    from .model_dirs import check_model_dir, check_vocab_fits

    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    if Path(args.model).exists():
        directory = check_model_dir(args.model)  # a run or checkpoint directory: says which one to pass
        source = ModelSource(directory=directory, tokenizer=tokenizer)
        check_vocab_fits(directory, source.tokenizer, args.tokenizer)
        if tokenizer is not None:
            _check_same_vocabulary(directory, tokenizer, args.tokenizer)
        return source
    if args.model in PRESETS:
        if tokenizer is None:
            raise ValueError(
                f"--model {args.model} is a preset (random initialisation): give --tokenizer DIR"
            )
        config = get_preset(args.model, vocab_size=tokenizer.vocab_size, pad_token_id=pad_id_of(tokenizer, 0))
        return ModelSource(config=config, tokenizer=tokenizer, name=f"{args.model} (random init)")
    if "/" in args.model or "\\" in args.model:
        raise FileNotFoundError(f"--model {args.model}: no such directory")
    raise ValueError(f"--model {args.model!r} is neither a directory nor a preset ({', '.join(PRESETS)})")


def _check_same_vocabulary(model_dir: Path, tokenizer: Any, tokenizer_dir: str) -> None:
    """``--tokenizer`` must be the tokenizer saved with the model: the model learned one embedding row per
    token id, so another vocabulary (even a smaller one, which fits the embedding) trains on wrong words.
    A model directory without a tokenizer of its own cannot be compared and is let through."""
    from attnlab.tokenizers import load_tokenizer
    from attnlab.tokenizers.vocab_diff import vocabulary_difference

    try:
        own = load_tokenizer(model_dir)
    except (OSError, ValueError):
        return
    reason = vocabulary_difference(tokenizer, own, "it", "the model's")
    if reason is None:
        return
    raise ValueError(
        f"--tokenizer {tokenizer_dir}: its vocabulary differs from the one saved with the model in "
        f"{model_dir} ({reason}); the model's embedding rows are that vocabulary's ids, so leave --tokenizer "
        "out (or give the model's own tokenizer)"
    )


def _plot_runs(output_dir: Path) -> None:
    """``loss_curve.png`` beside each run's ``log.jsonl`` (as pretrain and translate-train write theirs)."""
    from attnlab.train.logging import LOG_FILE, PLOT_FILE, plot_loss_curve

    for log in sorted(output_dir.glob(f"*/{LOG_FILE}")):
        plot_loss_curve(log, log.parent / PLOT_FILE)


def run_finetune(args: argparse.Namespace) -> int:
    import logging

    from attnlab.inference.allocator import bound_kernel_caches
    from attnlab.tasks.finetune import finetune, get_task
    from attnlab.train.distributed import setup_distributed

    bound_kernel_caches()  # oneDNN's kernels per batch shape, capped (benchmarks/training_memory.py)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    context = setup_distributed(device=str(args.device))  # one process unless launched by torchrun
    check_parallel(parallel_settings(args), context.is_distributed, "finetune")
    spec = get_task(args.task)
    source = _source(args)
    cfg = _finetune_config(args, spec, source)
    result = finetune(spec, args.data_dir, source, cfg, _columns(args))
    if not context.is_main:  # rank 0 reports
        return 0
    _plot_runs(Path(cfg.output_dir))
    _print_sweep(result, spec, len(args.seeds), Path(cfg.output_dir) / "results.json")
    return 0


def _finetune_config(args: argparse.Namespace, spec: Any, source: Any) -> Any:
    """The `FinetuneConfig` of the command line; without --lr, the default learning rate(s) for the model's
    width (said on standard error)."""
    from attnlab.tasks.finetune import FinetuneConfig, default_learning_rates

    if args.lr and not args.sweep:
        lrs = tuple(args.lr)
    else:
        width = source.model_config.hidden_size
        lrs = default_learning_rates(source.model_config, args.sweep)
        chosen = ", ".join(f"{lr:g}" for lr in lrs)
        print(f"finetune: learning rate {chosen} for a {width}-wide encoder (--lr sets it)", file=sys.stderr)
    return FinetuneConfig(
        learning_rates=lrs, seeds=tuple(args.seeds), epochs=args.epochs, batch_size=args.batch_size,
        warmup=args.warmup, weight_decay=args.weight_decay, dropout=args.dropout,
        encoder_dropout=args.encoder_dropout, pooling=args.pooling, group_by_length=args.group_by_length,
        max_length=args.max_length, stride=args.stride,  # None: the library's 128 (QA 384) within the model's
        max_query_length=args.max_query_length, max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples, minutes=args.minutes, precision=args.precision,
        selection_examples=args.selection_examples, device=args.device, **parallel_settings(args),
        output_dir=args.output_dir or f"runs/finetune-{spec.name}",
        progress_bar=args.progress, save_every=args.save_every, eval_every=args.eval_every,
        resume=args.resume, overwrite=args.overwrite, tensorboard=True, teacher=args.teacher,
        distill_temperature=args.temperature, distill_alpha=args.alpha, knowledge=_knowledge(args),
    )  # fmt: skip


def _print_sweep(result: Any, spec: Any, seeds: int, results_file: Path) -> None:
    """A line per run and the sweep's choice; scores in percent, the column names say so."""
    from attnlab.metrics import score_label
    from attnlab.tasks.finetune import metric_value

    metric = score_label(spec.metric)
    held = result.selection_examples
    chooser = f"held-out {metric}" if held else f"best {metric}"
    header = f"{'lr':>8} {'seed':>5} {'steps':>6} {'min':>6}  {chooser}"
    print(header + (f"  dev {metric}" if held else ""))
    for r in result.runs:
        dev = metric_value(r.dev, spec.metric) if r.dev else None
        print(
            f"{r.learning_rate:8.0e} {r.seed:5d} {r.steps:6d} {r.minutes:6.2f}  {r.score(spec.metric):.2f}"
            + (f"  {dev:.2f}" if dev is not None else "")
        )
    if held:
        print(
            f"{spec.name}: lr {result.learning_rate:g} chosen on {held} held-out training examples "
            f"(median {result.selection_median:.2f}); dev scored the chosen models only"
        )
    print(
        f"{spec.name}: lr {result.learning_rate:g}, median dev {metric} over {seeds} seed(s) = "
        f"{result.median:.2f} ({result.train_examples} train / {result.eval_examples} dev examples); "
        f"best model: {result.best_dir}; all runs: {results_file}"
    )


def _check_evaluated_model(model: str, spec: Any) -> None:
    """Before loading: the directory holds a model fine-tuned for ``spec``'s head (else an error saying so),
    whose tokenizer fits its embedding; a model fine-tuned on another task is scored with a warning."""
    from attnlab.tokenizers import load_tokenizer

    from .model_dirs import check_model_dir, check_vocab_fits, fine_tuned_task, task_architecture_error

    directory = check_model_dir(model)
    problem = task_architecture_error(directory, spec.name, spec.architecture)
    if problem is not None:
        raise ValueError(problem)
    check_vocab_fits(directory, load_tokenizer(directory))
    trained_on = fine_tuned_task(directory)
    if trained_on is not None and trained_on != spec.name:
        print(
            f"attnlab evaluate: warning: {directory} was fine-tuned on {trained_on}, and is scored on "
            f"{spec.name}: its labels may mean something else",
            file=sys.stderr,
        )


def run_evaluate(args: argparse.Namespace) -> int:
    from attnlab.tasks.finetune import evaluate_directory, get_task, load_split

    spec = get_task(args.task)
    _check_evaluated_model(args.model, spec)
    examples = load_split(spec, args.data_dir, args.split, _columns(args))[: args.max_eval_examples]
    metrics = evaluate_directory(
        spec, args.model, examples, max_length=args.max_length,  # None: 128 (QA 384) within the model's
        stride=args.stride, max_query_length=args.max_query_length, batch_size=args.batch_size,
        device=args.device, output_dir=args.output_dir, knowledge=_knowledge(args),
    )  # fmt: skip
    if args.json:
        print(json.dumps({"task": spec.name, "split": args.split, "examples": len(examples), **metrics}))
    else:
        from attnlab.metrics import score_label

        for key, value in metrics.items():
            label = score_label(key)  # a score (percent) or, as SQuAD 2.0's threshold, a plain number
            shown = f"{value:.2f}" if label != key else f"{value:.4f}"
            print(f"{spec.name} {args.split} {label}: {shown}")
    return 0
