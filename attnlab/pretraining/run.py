"""A pre-training run end to end, composed from the library's pieces: `pretrain` reads as its steps,
the run (directory, record) -> model (model.py) -> inputs (inputs.py) -> plan (plan.py) -> train
(stages.py) -> report (report.py). The corpus and tokenizer come before it (corpus.py, tokenizer.py).

    corpus ─► tokenizer (given, or trained: attnlab.tokenizers.train_tokenizer)
           ─► shards (attnlab.data.prepare_shards; train and held-out documents apart, cached in the output)
           ─► PretrainingInstances ─► MaskedDataset ─► PretrainingCollator ─► ResumableLoader
           ─► model (EncoderForPreTraining / SpanBertForPreTraining / ElectraPreTrainer)
    (a causal LM, objective "clm": shards ─► TokenBlocks ─► BlockCollator ─► GPT; pretraining.causal_lm)
    (with segment recurrence, Transformer-XL: shards ─► StreamSegments ─► SegmentCollator, read in order
     ─► SegmentRecurrence(TransfoXL), the memory carried between steps; pretraining.transfo_xl)
           ─► attnlab.train.Trainer, once per length stage (BERT's 128 -> 512)
           ─► OUTPUT/model (attnlab checkpoint + tokenizer files), OUTPUT/hf (HF transformers layout)

Output directory::

    tokenizer/            the tokenizer (trained here unless given)
    data/train, data/heldout   prepared shards (reused when the corpus and tokenizer are unchanged)
    train/ (train/stage-N with several length stages)   the Trainer's checkpoints, log.jsonl,
                          TensorBoard events and loss_curve.png
    model/                the final model (ELECTRA: the discriminator; GPT: a causal-LM directory for
                          `attnlab generate`; Transformer-XL: attnlab.io.families.transfo_xl's directory for
                          `attnlab perplexity`) and tokenizer files
    generator/            ELECTRA only: the generator, a masked LM usable by fill-mask
    hf/                   the same model in HF transformers' layout, where it can be exported
    run.json              recipe, model config, steps, held-out metrics

Held-out evaluation: every ``heldout_every``-th document is set aside before preparation; the held-out
instances are masked once (static, seeded) and scored for MLM accuracy and perplexity over masked tokens
(a causal LM: next-token loss, perplexity and accuracy over the held-out blocks; Transformer-XL: over the
held-out stream read in order, segment after segment with the memory carried, every token scored once).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.data import ShardedCorpus
from attnlab.manifest import new_run_id
from attnlab.models import EncoderConfig, count_parameters
from attnlab.pretraining.inputs import inputs_for
from attnlab.pretraining.model import build_pretraining_model, model_config
from attnlab.pretraining.plan import RunRecord, plan_callbacks, plan_run, size_warnings
from attnlab.pretraining.recipes import Recipe
from attnlab.pretraining.report import held_out_metrics, save_final
from attnlab.pretraining.stages import train_stages
from attnlab.train import Trainer, set_seed
from attnlab.train.distributed import barrier, current_context
from attnlab.train.run_dir import RUN_FILE, read_run_file
from attnlab.train.sharded import consolidated_model


@dataclass
class PretrainResult:
    output_dir: Path
    model_dir: Path
    steps: int
    seconds: float
    eval_metrics: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    model: nn.Module | None = None  # the pre-training module (all heads), in memory
    tokenizer: Any = None
    too_few_steps: bool = False  # the time budget held too few steps to learn (the plan said so)


def pretrain(
    recipe: Recipe,
    tokenizer: Any,
    train_corpus: ShardedCorpus,
    heldout_corpus: ShardedCorpus,
    output_dir: str | os.PathLike,
    *,
    preset: str | EncoderConfig | None = None,
    model_overrides: dict[str, Any] | None = None,
    trainer_overrides: dict[str, Any] | None = None,
    minutes: float | None = None,
    auto_steps: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    eval_examples: int = 1024,
    seed: int = 0,
    run_id: str | None = None,
    log: Callable[[str], None] = print,
    model: nn.Module | None = None,
) -> PretrainResult:
    """Train ``recipe`` on prepared shards and save the final model; see the module docstring.

    ``minutes`` stops at the first step boundary after that much training time (the model is still
    evaluated and saved); with ``auto_steps`` the run's ``max_steps`` is first set to what fits in it, so
    that the learning-rate schedule ends when time does. ``resume`` continues from the newest checkpoints;
    without it, checkpoints of an earlier run in ``output_dir`` are an error unless ``overwrite`` (then they
    are deleted). ``run_id`` (default: the resumed run's, or a new one) goes into run.json, every
    checkpoint's manifest and the saved model's (`attnlab.manifest`), so that no other run's files are taken
    for this one's. ``model``: a pre-training module built by the caller instead of the recipe's (its
    ``config`` is the saved model's; `attnlab.pretraining.distillation.DistillationPreTrainer`).
    """
    ctx = current_context()
    started = time.monotonic()
    deadline = started + 60.0 * minutes if minutes is not None else None
    out, record, previous = open_run(output_dir, run_id, resume=resume, overwrite=overwrite, ctx=ctx)

    if model is None:
        config = model_config(recipe, preset or recipe.preset, tokenizer, **(model_overrides or {}))
        set_seed(seed)
        model = build_pretraining_model(recipe, config)
    else:  # built by the caller (attnlab distill: the student around its frozen teacher)
        config = model.config
    for warning in size_warnings(train_corpus.n_tokens, config.vocab_size, count_parameters(model)):
        log(f"warning: {warning}")

    tconfig = recipe.trainer_config(output_dir=out / "train", seed=seed, **(trainer_overrides or {}))
    inputs = inputs_for(recipe, config, tokenizer, train_corpus, heldout_corpus, tconfig, ctx, seed=seed)

    plan = plan_run(
        recipe, model, inputs, tconfig, ctx, previous=previous, minutes=minutes, auto_steps=auto_steps,
        started=started, log=log,
    )  # fmt: skip
    recipe = plan.recipe
    clear_earlier_run(out, resume, ctx)  # --overwrite, once the model and the schedule are known to be good
    record.plan = {"max_steps": recipe.max_steps, "warmup_steps": int(plan.warmup)}
    tconfig = dataclasses.replace(tconfig, max_steps=recipe.max_steps, warmup=plan.warmup)
    log = log if ctx.is_main else _silent
    record.write(recipe, config)

    def record_plan(trainer: Trainer) -> None:  # a re-plan moved the schedule's length
        record.plan["max_steps"] = trainer.config.max_steps
        record.write(recipe, config)

    eval_loader = inputs.eval_loader(eval_examples)
    stages = train_stages(
        model, plan, record.plan, inputs, eval_loader, tconfig,
        callbacks=plan_callbacks(plan, deadline, record_plan, log), output_dir=out, run_id=record.run_id,
        resume=resume, log=log,
    )  # fmt: skip

    eval_metrics = held_out_metrics(stages, inputs, eval_loader, config.vocab_size, ctx.is_main)
    final = consolidated_model(model, ctx)  # sharded (FSDP): gathered once, onto rank 0
    if ctx.is_main:
        save_final(final, tokenizer, recipe, out, config, log, run_id=record.run_id)
    barrier(ctx)
    timed_out = deadline is not None and time.monotonic() >= deadline
    seconds = time.monotonic() - started
    result = PretrainResult(
        output_dir=out, model_dir=out / "model", steps=stages.trainer.step, seconds=seconds,
        eval_metrics=eval_metrics, interrupted=stages.interrupted and not timed_out, model=final or model,
        tokenizer=tokenizer, too_few_steps=plan.too_few_steps,
    )  # fmt: skip
    record.write(
        recipe, config, steps=result.steps, interrupted=result.interrupted,
        stopped_by_time_limit=stages.interrupted and timed_out, eval=eval_metrics, seconds=result.seconds,
    )  # fmt: skip
    return result


def open_run(
    output_dir: str | os.PathLike, run_id: str | None, *, resume: bool, overwrite: bool, ctx: Any
) -> tuple[Path, RunRecord, dict[str, Any]]:
    """The output directory, refused when it holds an earlier run's checkpoints and neither ``resume`` nor
    ``overwrite`` is given; its run.json record; the earlier plan a resumed run follows."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    old_checkpoints = sorted((out / "train").glob("**/checkpoints/step-*"))
    if old_checkpoints and not resume and not overwrite:
        raise ValueError(
            f"{out / 'train'} holds checkpoints of an earlier run ({old_checkpoints[-1].name}); "
            "resume it (--resume) or start again (--overwrite, or another --output)"
        )
    info = read_run_file(out) or {}  # the earlier run's plan, or what the CLI's claim wrote
    previous = info if resume else {}
    run_id = run_id or (info.get("run_id") if resume else None) or new_run_id()
    if info.get("run_id") != run_id:
        info = {}  # an earlier run's record, not this run's
    return out, RunRecord(out / RUN_FILE, info, run_id, ctx.is_main), previous


def clear_earlier_run(out: Path, resume: bool, ctx: Any) -> None:
    """Delete an earlier run's checkpoints (``open_run`` let them through only with ``overwrite``)."""
    if resume or not any((out / "train").glob("**/checkpoints/step-*")):
        return
    if ctx.is_main:
        shutil.rmtree(out / "train")
    barrier(ctx)


def _silent(message: str) -> None:
    pass
