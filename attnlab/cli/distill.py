"""``attnlab distill``: DistilBERT's pre-training distillation (Sanh et al. 2019) of a masked-LM teacher.

attnlab distill --teacher runs/pretrain-mlm/model --corpus books/ --format text --minutes 20
attnlab distill --teacher bert-dir --corpus wiki.txt --preset distilbert --paper      # DistilBERT's recipe
attnlab distill --teacher T --corpus c.txt --student-layers 3 --alpha-cos 0 --output runs/no-cos
attnlab distill --teacher T --corpus c.txt --output runs/d --resume

The student has half the teacher's layers (``--student-layers``, or a ``--preset`` of the teacher's width),
starts from every other teacher layer (``--layers`` picks them, ``--random-init`` none), has no token-type
embeddings or pooler, and is trained with the triple loss on the teacher's tokenizer, through the same
pre-training run as ``attnlab pretrain`` (shards, Trainer, checkpoints, ``--resume``, torchrun DDP or FSDP,
held-out MLM accuracy): see `attnlab.pretraining.distillation`. ``--set``/``--config`` work as for ``attnlab
pretrain``. The student is saved to OUTPUT/model and OUTPUT/hf, both loadable by HF transformers: as
DistilBertForMaskedLM when post-LN, else as the teacher's family with one zero type row
(`attnlab.io.hf.adds_type_row`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnlab.cli.parallel import add_parallel_options, check_parallel, parallel_settings

DISTILL_OUTPUTS = ("train", "model", "hf")  # what a run writes in --output (data/ is a reusable cache)


def register(subparsers: argparse._SubParsersAction) -> None:
    from attnlab.cli.args import non_negative_float, non_negative_int, positive_float, positive_int
    from attnlab.data.corpus import FORMATS

    p = subparsers.add_parser(
        "distill",
        help="distil a masked-LM teacher into a student with half its layers (DistilBERT)",
        description="DistilBERT's distillation during pre-training: a student initialised from every other "
        "layer of --teacher, without token types or pooler, trained on --corpus with the triple loss "
        "(soft targets at temperature T, masked LM, cosine of the last hidden states; weights 5/2/1), "
        "dynamic masking and no NSP, by the same run as attnlab pretrain (checkpoints, --resume, DDP). "
        "Without --paper, the sizes and optimisation of attnlab pretrain's time budget.",
    )
    p.add_argument("--teacher", required=True, metavar="MODEL_DIR", help="teacher masked LM (attnlab or HF)")
    p.add_argument("--corpus", nargs="+", required=True, metavar="PATH", help="files or directories")
    p.add_argument("--format", default="sentences", choices=FORMATS, help="corpus format (default sentences)")
    p.add_argument(
        "--preset",
        default=None,
        help="student preset of the teacher's width (e.g. distilbert for a BERT-base teacher; default: the "
        "teacher's shape with half its layers)",
    )
    p.add_argument("--student-layers", type=positive_int, help="student layers (default: half the teacher's)")
    p.add_argument(
        "--layers",
        metavar="I,J,...",
        help="teacher layers the student starts from (default every other one: 0,2,4,...)",
    )
    p.add_argument(
        "--random-init",
        action="store_true",
        help="start the student from BERT's random initialisation (the paper's Table 4 ablation)",
    )
    p.add_argument("--temperature", type=positive_float, default=2.0, help="soft-target temperature T")
    p.add_argument(
        "--alpha-ce", type=non_negative_float, default=5.0, help="weight of the soft-target loss (0: none)"
    )
    p.add_argument(
        "--alpha-mlm", type=non_negative_float, default=2.0, help="weight of the masked-LM loss (0: none)"
    )
    p.add_argument(
        "--alpha-cos", type=non_negative_float, default=1.0, help="weight of the cosine loss (0: none)"
    )
    p.add_argument("--tokenizer", metavar="DIR", help="must equal the teacher's (default: the teacher's)")
    p.add_argument("--config", metavar="FILE.yaml", help="YAML overrides (as attnlab pretrain)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override (repeatable)")
    p.add_argument("--output-dir", "--output", dest="output", metavar="DIR", help="default runs/distill")
    p.add_argument("--minutes", type=positive_float, help="training time budget")
    p.add_argument("--max-steps", type=positive_int, help="optimizer steps (default: what fits in --minutes)")
    p.add_argument("--batch-size", type=positive_int, help="sequences per step (default: the budget's)")
    p.add_argument("--max-length", type=positive_int, help="tokens per sequence (default: the budget's)")
    p.add_argument("--paper", action="store_true", help="DistilBERT's recipe: batch 4K, length 512, lr 5e-4")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoints in --output")
    p.add_argument("--overwrite", action="store_true", help="delete an earlier run's outputs in --output")
    p.add_argument("--workers", type=positive_int, help="tokenising processes for preparation")
    p.add_argument(
        "--heldout-every", type=positive_int, default=20, help="hold out every N-th document (default 20)"
    )
    p.add_argument(
        "--eval-examples", type=positive_int, default=1024, help="held-out sequences scored (default 1024)"
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_parallel_options(p)
    p.set_defaults(func=run_distill)  # errors: attnlab.cli.main (one line; --debug: traceback)


def parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers {text!r}: expected comma-separated layer indices, e.g. 0,2,4") from None


def run_distill(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    from attnlab.cli.overrides import check_overrides, collect_overrides
    from attnlab.cli.pretrain import options_that_fit, print_result
    from attnlab.inference.allocator import bound_kernel_caches
    from attnlab.pretraining.corpus import corpus_documents, files_key, prepare_corpus
    from attnlab.pretraining.distillation import (
        DistillationConfig,
        DistillationPreTrainer,
        build_student,
        load_teacher,
        student_config,
    )
    from attnlab.pretraining.run import pretrain
    from attnlab.tokenizers import load_tokenizer
    from attnlab.tokenizers.vocab_diff import check_same_vocabulary
    from attnlab.train import set_seed, setup_distributed
    from attnlab.train.distributed import barrier
    from attnlab.train.run_dir import prepare_run_directory, read_run_file

    bound_kernel_caches()  # oneDNN's kernels per batch shape, capped (benchmarks/training_memory.py)

    for path in args.corpus:
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such corpus file or directory")
    if not Path(args.teacher).is_dir():
        raise NotADirectoryError(f"{args.teacher}: --teacher expects a model directory")
    distillation = DistillationConfig(args.temperature, args.alpha_ce, args.alpha_mlm, args.alpha_cos)
    layers = parse_layers(args.layers)
    if layers is not None and args.random_init:
        raise ValueError("--layers and --random-init exclude each other")
    teacher, tokenizer = load_teacher(args.teacher)
    if args.tokenizer:
        if not Path(args.tokenizer).is_dir():
            raise NotADirectoryError(f"{args.tokenizer}: --tokenizer expects a tokenizer directory")
        check_same_vocabulary(tokenizer, load_tokenizer(args.tokenizer), args.teacher, args.tokenizer)

    overrides = collect_overrides(args.config, args.set)
    ctx = setup_distributed(device=str(overrides["trainer"].get("device", "auto")))
    log = print if ctx.is_main else (lambda message: None)
    check_parallel({**overrides["trainer"], **parallel_settings(args)}, ctx.is_distributed, "distill")
    minutes = args.minutes
    recipe = distill_recipe(args, overrides, teacher.config.max_sequence_length)
    longest = max(s.max_length for s in recipe.stages)
    auto_steps = minutes is not None and args.max_steps is None and "max_steps" not in overrides["recipe"]
    config = student_config(teacher.config, args.student_layers, preset=args.preset, dropout=recipe.dropout)
    if overrides["model"]:
        config = dataclasses.replace(config, **overrides["model"])
    check_overrides(recipe, "bert-tiny", {**overrides, "model": {}})  # trainer.* fields
    out = Path(args.output or "runs/distill")
    trainer_overrides = {"progress_bar": not args.no_progress, **overrides["trainer"]}
    trainer_overrides.update(parallel_settings(args))  # --parallel and its options: trainer.FIELD
    trainer_overrides.setdefault("save_every", 200)
    trainer_overrides.setdefault("log_every", 10)

    set_seed(args.seed)
    student, taken = build_student(teacher, config, layers=layers, random_init=args.random_init)
    model = DistillationPreTrainer(student, teacher, distillation)

    if ctx.is_main:
        prepare_run_directory(
            out, "distill", DISTILL_OUTPUTS, resume=args.resume, overwrite=args.overwrite, log=log,
            settings={"teacher": str(args.teacher), "distillation": distillation.to_dict(),
                      "teacher_layers": taken, "random_init": args.random_init},
        )  # fmt: skip
    barrier(ctx)
    run_id = (read_run_file(out) or {}).get("run_id")
    paths = [Path(p) for p in args.corpus]
    source = corpus_documents(paths, args.format)

    def prepare():
        return prepare_corpus(
            source, tokenizer, out / "data", source_key=files_key(paths, args.format),
            heldout_every=args.heldout_every, workers=args.workers or min(2, os.cpu_count() or 1), log=log,
        )  # fmt: skip

    if ctx.is_main:
        train_corpus, heldout = prepare()
    barrier(ctx)
    if not ctx.is_main:
        train_corpus, heldout = prepare()
    init = "random initialisation" if args.random_init else f"teacher layers {taken}"
    log(
        f"distilling {args.teacher} ({teacher.config.num_layers} layers) into {config.num_layers} layers "
        f"({init}); T={distillation.temperature:g}, alpha ce/mlm/cos = {distillation.alpha_ce:g}/"
        f"{distillation.alpha_mlm:g}/{distillation.alpha_cos:g}; batch {recipe.batch_size}, length {longest}"
        + (f", time budget {minutes:g} min" if minutes is not None else "")
    )
    with options_that_fit(args.paper):
        result = pretrain(
            recipe, tokenizer, train_corpus, heldout, out, trainer_overrides=trainer_overrides,
            minutes=minutes, auto_steps=auto_steps, resume=args.resume, overwrite=args.overwrite,
            eval_examples=args.eval_examples, seed=args.seed, run_id=run_id, log=log, model=model,
        )  # fmt: skip
    if ctx.is_main:
        student = args.preset or f"{config.num_layers}-layer student"
        print_result(result, student, minutes, paper=args.paper)
    return 0


def distill_recipe(args: argparse.Namespace, overrides: dict[str, Any], teacher_length: int) -> Any:
    """DistilBERT's recipe: the paper's with --paper, else its budget version for --minutes (the student's
    positions kept: they are the teacher's, trained), then the overrides; no longer than the teacher reads."""
    from attnlab.pretraining.budget import budget_for, for_budget
    from attnlab.pretraining.distillation import DISTILBERT

    recipe = DISTILBERT
    if args.paper:
        if any(v is not None for v in (args.max_steps, args.batch_size, args.max_length)):
            raise ValueError("--paper takes the paper's steps, batch and length; drop --max-steps, ...")
    else:
        recipe = for_budget(
            recipe, budget_for(args.minutes), max_steps=1000 if args.max_steps is None else args.max_steps,
            batch_size=args.batch_size, max_length=args.max_length,
        )  # fmt: skip
        recipe = recipe.override(stage_positions="keep")
    if overrides["masking"]:
        overrides["recipe"]["masking"] = overrides["masking"]
    recipe = recipe.override(**overrides["recipe"])
    longest = max(s.max_length for s in recipe.stages)
    if longest > teacher_length:
        raise ValueError(
            f"sequences of {longest} tokens are longer than the teacher's {teacher_length} (--max-length)"
        )
    return recipe
