"""The fine-tuning recipe over learning rates and seeds: one run per pair (`attnlab.tasks.finetune_run`),
the learning rate with the best median dev score wins (BERT: "we selected the best fine-tuning learning rate
on the Dev set"), and its best run's model is copied to ``OUTPUT_DIR/best``.

Read top to bottom, `finetune_examples` is: the examples (and an optional held-out selection split), the
inputs both plug-ins allow, the features, the run directory, the runs, the choice, the outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.io.model_card import finetune_record, write_training_record
from attnlab.limits import check_max_length
from attnlab.metrics import score_label
from attnlab.tasks.distillation import soft_targets_for_task
from attnlab.tasks.evaluation import TaskEvaluator, evaluate_directory, metric_value
from attnlab.tasks.feature_builder import FeatureBuilder, TaskFeatures
from attnlab.tasks.finetune_config import FinetuneConfig, ModelSource
from attnlab.tasks.finetune_run import ExtraLoss, RunResult, TaskLossOnly, run_once
from attnlab.tasks.registry import GenericColumns, TaskSpec, get_task, load_split, task_labels
from attnlab.train.checkpoint import atomic_directory
from attnlab.train.distributed import barrier, broadcast_object, current_context
from attnlab.train.run_dir import prepare_run_directory

logger = logging.getLogger(__name__)

SELECTION_SEED = 1234  # the draw of held-out training examples: fixed, every model chosen on the same ones


@dataclass
class FinetuneResult:
    """A sweep: every run, the chosen learning rate, the median over seeds of its best dev scores (percent).

    With a selection split (``FinetuneConfig.selection_examples``) the runs' ``epochs``/``best`` are scores on
    the held-out training examples, which chose the learning rate and each run's model (``selection_median``);
    ``median`` is then the dev score of the chosen models, each run's in its ``dev``."""

    task: str
    metric: str
    runs: list[RunResult]
    learning_rate: float
    median: float
    train_examples: int
    eval_examples: int
    best_dir: str | None
    feature_reports: dict[str, str] = field(default_factory=dict)
    selection_examples: int = 0
    selection_median: float | None = None
    scale: str = "percent"  # of every score above (attnlab.metrics.scale); results.json without it: fractions

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def split_selection(examples: list[Any], n: int, task: str) -> tuple[list[Any], list[Any]]:
    """(training examples, ``n`` held out for selection): a fixed random draw, order kept in both."""
    if n <= 0:
        return examples, []
    if n >= len(examples):
        raise ValueError(
            f"{task}: selection_examples {n} leaves nothing to train on ({len(examples)} training examples)"
        )
    held = set(random.Random(SELECTION_SEED).sample(range(len(examples)), n))
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in sorted(held)]


def run_settings(spec: TaskSpec, source: ModelSource, cfg: FinetuneConfig, max_length: int) -> dict[str, Any]:
    """What a fine-tuning's checkpoints were made under, written to run.json: ``--resume`` with other values
    is refused and each difference named (`attnlab.train.run_dir`). Learning rates and seeds are not among
    them (each pair has its own run directory), nor the time budget (a resumed run may be given more)."""
    model = str(Path(source.directory).resolve()) if source.directory is not None else source.name
    teacher = str(Path(cfg.teacher).resolve()) if cfg.teacher is not None else None
    fields = (
        "pooling", "epochs", "batch_size", "warmup", "weight_decay", "dropout", "encoder_dropout",
        "max_train_examples", "selection_examples", "precision", "distill_temperature", "distill_alpha",
        "group_by_length",
    )  # fmt: skip
    return {
        "task": spec.name, "model": model, "max_length": max_length, "teacher": teacher,
        "knowledge": cfg.knowledge is not None, **{name: getattr(cfg, name) for name in fields},
    }  # fmt: skip


def finetune_outputs(out: Path) -> list[str]:
    """What a finetune run writes in its output directory: ``best``, ``results.json`` and one ``lr*-seed*``
    directory per run (an earlier sweep's too); `prepare_run_directory` guards them."""
    runs = sorted(p.name for p in out.glob("lr*-seed*")) if out.is_dir() else []
    return ["best", "results.json", *runs]


def _copy_files(source: str | os.PathLike, target: Path) -> None:
    for path in Path(source).iterdir():
        if path.is_file():
            shutil.copy2(path, target / path.name)


@dataclass
class _Examples:
    """The examples of a sweep: what trains, what chooses (the selection split, else dev), what dev is."""

    train: list[Any]
    selection: list[Any]
    dev: list[Any]
    labels: list[str] | None

    @property
    def chooser(self) -> list[Any]:
        return self.selection or self.dev


def _examples(
    spec: TaskSpec, train: Sequence[Any], dev: Sequence[Any], cfg: FinetuneConfig, regression: bool,
    labels: Sequence[str] | None,
) -> _Examples:  # fmt: skip
    """The class names from the whole training file, then its first ``max_train_examples`` (and dev's first
    ``max_eval_examples``), then the held-out selection draw."""
    train = list(train)
    labels = list(labels) if labels is not None else task_labels(spec, train, regression)
    train, dev = train[: cfg.max_train_examples], list(dev)[: cfg.max_eval_examples]
    if not train or not dev:
        raise ValueError(f"{spec.name}: {len(train)} training and {len(dev)} dev examples")
    train, selection = split_selection(train, cfg.selection_examples, spec.name)
    if selection and not cfg.keep_best:
        raise ValueError("selection_examples: dev scores the chosen runs' saved models: keep_best must be on")
    return _Examples(train, selection, dev, labels)


def _choose(runs: list[RunResult], metric: str) -> tuple[float, dict[float, float], RunResult]:
    """The learning rate with the best median score over seeds (NaN never wins), the medians, and that
    learning rate's best run."""
    lrs = list(dict.fromkeys(r.learning_rate for r in runs))
    medians = {lr: statistics.median(r.score(metric) for r in runs if r.learning_rate == lr) for lr in lrs}
    chosen = max(medians, key=lambda lr: -math.inf if math.isnan(medians[lr]) else medians[lr])
    best_run = max(
        (r for r in runs if r.learning_rate == chosen),
        key=lambda r: -math.inf if math.isnan(r.score(metric)) else r.score(metric),
    )
    return chosen, medians, best_run


def _score_chosen_on_dev(
    spec: TaskSpec, runs: list[RunResult], chosen: float, data: _Examples, cfg: FinetuneConfig,
    max_length: int, features: FeatureBuilder,
) -> float:  # fmt: skip
    """With a selection split: dev scores the chosen learning rate's saved models, once each (their
    ``dev``); the median of those is what the sweep reports."""
    # "auto" is the trainer's choice for this process (cuda:LOCAL_RANK where there is a GPU, else cpu)
    device = str(current_context().default_device()) if cfg.device == "auto" else cfg.device
    for r in runs:
        if r.learning_rate == chosen and r.best_dir:
            r.dev = evaluate_directory(
                spec, r.best_dir, data.dev, max_length=max_length, stride=cfg.stride,
                max_query_length=cfg.max_query_length, batch_size=cfg.eval_batch_size, device=device,
                knowledge=features,
            )  # fmt: skip
    scored = [metric_value(r.dev, spec.metric) for r in runs if r.dev]
    logger.info(
        "%s: lr %g chosen on %d held-out training examples; dev %s %s", spec.name, chosen,
        len(data.selection), score_label(spec.metric), " ".join(f"{x:.2f}" for x in scored),
    )  # fmt: skip
    return statistics.median(scored) if scored else math.nan


def _keep_best(
    spec: TaskSpec, source: ModelSource, result: FinetuneResult, best_run: RunResult, out: Path
) -> str | None:
    """The chosen run's best model as ``out/best``, with the training record a HF model card reads
    (`attnlab.io.model_card`)."""
    if not (best_run.best_dir and Path(best_run.best_dir).is_dir()):
        return None
    source_dir = best_run.best_dir
    best_dir = str(atomic_directory(out / "best", lambda tmp: _copy_files(source_dir, tmp)))
    base = None if source.directory is None else str(source.directory)
    record = finetune_record(
        spec.name, base, best_run.dev or best_run.best, initialisation=None if base else source.name,
        learning_rate=result.learning_rate, train_examples=result.train_examples,
        eval_examples=result.eval_examples,
    )  # fmt: skip
    write_training_record(best_dir, record)
    return best_dir


def finetune_examples(
    spec: TaskSpec,
    source: ModelSource,
    train_examples: Sequence[Any],
    dev_examples: Sequence[Any],
    cfg: FinetuneConfig,
    regression: bool = False,
    labels: Sequence[str] | None = None,
) -> FinetuneResult:
    """The recipe on given examples: one run per (learning rate, seed); the learning rate with the best
    median dev score wins; its best run's model is copied to ``cfg.output_dir/best``."""
    data = _examples(spec, train_examples, dev_examples, cfg, regression, labels)
    features: FeatureBuilder = cfg.knowledge or TaskFeatures()
    config = source.model_config
    check_max_length(cfg.max_length, config.max_sequence_length, "--max-length", "the model")
    max_length = min(cfg.max_length or (384 if spec.kind == "qa" else 128), config.max_sequence_length)
    with_types = config.type_vocab_size > 0
    extra: ExtraLoss = TaskLossOnly()
    if cfg.teacher is not None:  # task distillation: the teacher's soft targets, an extra loss
        extra = soft_targets_for_task(
            cfg.teacher, spec, data.labels, source.tokenizer, regression, cfg.distill_temperature,
            cfg.distill_alpha,
        )  # fmt: skip
        max_length, with_types = extra.fit_inputs(max_length, with_types)
    options = dict(max_length=max_length, with_token_types=with_types, stride=cfg.stride,
                   max_query_length=cfg.max_query_length, regression=regression)  # fmt: skip
    tok, labels = source.tokenizer, data.labels
    train_features, train_report = features.build(spec, tok, data.train, labels, training=True, **options)
    dev_features, dev_report = features.build(spec, tok, data.chooser, labels, training=False, **options)
    out, ctx = Path(cfg.output_dir), current_context()
    run_id = None  # under torchrun: rank 0 claims the directory, every rank takes its run id
    if ctx.is_main:
        run_id = prepare_run_directory(
            out, "finetune", finetune_outputs(out), resume=cfg.resume, overwrite=cfg.overwrite,
            log=logger.info, settings=run_settings(spec, source, cfg, max_length),
        ).run_id  # fmt: skip
    barrier(ctx)
    run_id = broadcast_object(run_id, ctx)
    runs: list[RunResult] = []
    with source.once_per_sweep():  # every run builds the same model: its loading warnings are said once
        for lr in cfg.learning_rates:
            for seed in cfg.seeds:
                evaluator = TaskEvaluator(spec, dev_features, data.chooser, data.labels, regression)
                run_dir = out / f"lr{lr:g}-seed{seed}"
                run = run_once(
                    spec, source, train_features, evaluator, data.labels, cfg, lr, seed, run_dir, regression,
                    run_id=run_id, features=features, extra_loss=extra,
                )  # fmt: skip
                logger.info(
                    "%s lr=%g seed=%d: best %s = %.2f", spec.name, lr, seed, score_label(spec.metric),
                    run.score(spec.metric),
                )  # fmt: skip
                runs.append(run)
    chosen, medians, best_run = _choose(runs, spec.metric)
    result = FinetuneResult(
        task=spec.name, metric=spec.metric, runs=runs, learning_rate=chosen, median=medians[chosen],
        train_examples=len(data.train), eval_examples=len(data.dev), best_dir=None,
        feature_reports={
            "train": train_report.summary(), "selection" if data.selection else "dev": dev_report.summary()
        },
        selection_examples=len(data.selection), selection_median=medians[chosen] if data.selection else None,
    )  # fmt: skip
    if not ctx.is_main:  # rank 0 alone evaluated (DDP) and wrote the runs' best models; it reports
        barrier(ctx)
        return result
    if data.selection:
        result.median = _score_chosen_on_dev(spec, runs, chosen, data, cfg, max_length, features)
    if cfg.keep_best:
        result.best_dir = _keep_best(spec, source, result, best_run, out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(result.to_dict(), out / "results.json")
    barrier(ctx)
    return result


def finetune(
    task: str | TaskSpec,
    data_dir: str | os.PathLike,
    source: ModelSource,
    cfg: FinetuneConfig,
    columns: GenericColumns | None = None,
) -> FinetuneResult:
    """Load the task's train and dev splits from ``data_dir`` and run `finetune_examples`."""
    spec = get_task(task) if isinstance(task, str) else task
    train = load_split(spec, data_dir, "train", columns)
    dev = load_split(spec, data_dir, "dev", columns)
    regression = bool(columns and columns.regression)
    if regression and spec.kind == "classification":  # a generic table with float labels
        spec = dataclasses.replace(spec, kind="regression", metric="spearman")
    return finetune_examples(spec, source, train, dev, cfg, regression=regression)


__all__ = [
    "SELECTION_SEED",
    "FinetuneResult",
    "finetune",
    "finetune_examples",
    "finetune_outputs",
    "run_settings",
    "split_selection",
]
