"""One fine-tuning run (one learning rate, one seed): build the model, train it with the shared
`attnlab.train.Trainer`, evaluate on dev after every epoch and keep the best epoch's model.

Two plug-ins enter the run as objects, never as branches through it: the feature builder that pads its
batches (`attnlab.tasks.feature_builder`; K-BERT's `KnowledgeInjector` is one) and an extra loss that wraps
the model the trainer trains (`ExtraLoss`; task distillation's `attnlab.tasks.distillation.SoftTargets`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from attnlab.accel import optimize
from attnlab.atomic import write_json_atomic
from attnlab.io import save
from attnlab.io.format import read_json
from attnlab.io.hf_tokenizer import save_hf_tokenizer
from attnlab.manifest import add_to_manifest
from attnlab.tasks.evaluation import TaskEvaluator, metric_value
from attnlab.tasks.feature_builder import FeatureBuilder, TaskFeatures, batches_of
from attnlab.tasks.features import Feature, FeatureDataset, pad_id_of
from attnlab.tasks.finetune_config import FinetuneConfig, ModelSource
from attnlab.tasks.registry import TaskSpec
from attnlab.train import Trainer, TrainerConfig, set_seed
from attnlab.train.checkpoint import latest_checkpoint
from attnlab.train.distributed import DistributedContext, broadcast_object, current_context
from attnlab.train.sharded import consolidated_model

logger = logging.getLogger(__name__)


class ExtraLoss(Protocol):
    """A loss added to the task's: ``wrap(model)`` is the module the trainer trains (its ``forward``
    returns the task output with the combined loss); ``model`` alone is saved and evaluated."""

    def wrap(self, model: nn.Module) -> nn.Module: ...


class TaskLossOnly:
    """No extra loss: the task model trains alone."""

    def wrap(self, model: nn.Module) -> nn.Module:
        return model


@dataclass
class RunResult:
    """One fine-tuning run (one learning rate, one seed). Scores are percent (`attnlab.metrics.scale`)."""

    learning_rate: float
    seed: int
    epochs: list[dict[str, float]] = field(default_factory=list)  # dev metrics after each evaluation
    best: dict[str, float] = field(default_factory=dict)
    best_step: int = 0
    steps: int = 0
    minutes: float = 0.0
    stopped_by_time: bool = False
    best_dir: str | None = None
    dev: dict[str, float] = field(default_factory=dict)  # with a selection split: dev metrics of best_dir

    def score(self, metric: str) -> float:
        return metric_value(self.best, metric)


class BestKeeper:
    """Saves the model (and tokenizer) whenever the dev metric improves. With ``history_file`` the
    evaluations are also kept on disk (atomically), so that a resumed run knows its best epoch.

    Under torchrun rank 0 alone writes; a model sharded by FSDP is evaluated by every rank, and its
    weights are gathered (a collective call, `attnlab.train.sharded.consolidated_model`) before rank 0
    saves them."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        metric: str,
        directory: Path | None,
        history_file: Path | None = None,
        run_id: str | None = None,
        context: DistributedContext | None = None,
    ) -> None:
        self.model, self.tokenizer, self.metric, self.directory = model, tokenizer, metric, directory
        self.history_file, self.run_id = history_file, run_id
        self.context = context or current_context()
        self.best: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.best_step = 0
        self.trainer: Any = None

    def _improves(self, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.metric, float("nan"))
        return not self.best or (not math.isnan(value) and value > self.best.get(self.metric, -math.inf))

    def __call__(self, metrics: dict[str, float]) -> None:
        step = self.trainer.step if self.trainer is not None else len(self.history)
        record = {"step": step, **metrics}
        self.history.append(record)
        if self._improves(metrics):
            self.best, self.best_step = dict(metrics), step
            if self.directory is not None:
                model = consolidated_model(self.model, self.context)  # None on ranks other than 0
                if model is not None:
                    save_model_dir(model, self.tokenizer, self.directory, run_id=self.run_id)
        if self.history_file is not None and self.context.is_main:
            write_json_atomic({"history": self.history}, self.history_file)

    def restore(self, step: int) -> None:
        """The evaluations up to ``step`` (a resumed checkpoint's), read back from ``history_file``; later
        ones were made after that checkpoint and will be made again."""
        if self.history_file is None or not self.history_file.is_file():
            return
        try:
            history = json.loads(self.history_file.read_text(encoding="utf-8"))["history"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{self.history_file}: unreadable evaluation history ({e})") from e
        self.history, self.best, self.best_step = [], {}, 0
        for record in history:
            if record["step"] <= step:
                metrics = {k: v for k, v in record.items() if k != "step"}
                self.history.append(record)
                if self._improves(metrics):
                    self.best, self.best_step = metrics, record["step"]


def save_model_dir(
    model: nn.Module, tokenizer: Any, directory: str | os.PathLike, run_id: str | None = None
) -> Path:
    """`attnlab.io.save` plus the tokenizer's ``tokenizer.json`` (and vocab.txt / vocab.json when it has
    them) and the ``tokenizer_config.json`` HF rebuilds it from, so the directory serves `attnlab.io.load`,
    `attnlab.tokenizers.load_tokenizer` and, for a model with an exact HF form (`attnlab.io.hf_layout`),
    ``transformers.pipeline(...)`` alike. The tokenizer files join the manifest (`attnlab.manifest`) once
    written; ``run_id`` names the run."""
    directory = Path(directory)
    save(model, directory, run_id=run_id)
    if tokenizer is not None:
        config = model.config
        family = read_json(directory / "config.json").get("hf_family")
        written = save_hf_tokenizer(
            tokenizer, directory, family, config.max_sequence_length, config.type_vocab_size > 1
        )
        add_to_manifest(directory, [Path(p).name for p in written])
    return directory


def trainer_config(
    spec: TaskSpec, source: ModelSource, cfg: FinetuneConfig, learning_rate: float, seed: int,
    output_dir: Path, steps_per_epoch: int,
) -> TrainerConfig:  # fmt: skip
    """BERT's recipe as the trainer's settings: AdamW (eps 1e-6), linear warm-up and decay, clipping at 1,
    an evaluation (and a checkpoint) each epoch unless ``cfg`` asks for other intervals."""
    return TrainerConfig(
        epochs=cfg.epochs, batch_size=cfg.batch_size, optimizer="adamw", lr=learning_rate,
        weight_decay=cfg.weight_decay, eps=1e-6, schedule="linear", warmup=cfg.warmup, clip_norm=1.0,
        precision=cfg.precision, device=cfg.device, log_every=max(1, steps_per_epoch // 4),
        eval_every=cfg.eval_every or steps_per_epoch,
        save_every=cfg.save_every or cfg.eval_every or steps_per_epoch,  # default: with each evaluation
        keep_last=cfg.keep_last, output_dir=output_dir, seed=seed, tensorboard=cfg.tensorboard,
        progress_bar=cfg.progress_bar, plot=False, drop_last=False, group_by_length=cfg.group_by_length,
        max_minutes=cfg.minutes, parallel=cfg.parallel, activation_checkpointing=cfg.activation_checkpointing,
        cpu_offload=cfg.cpu_offload,
        extra={"task": spec.name, "model": source.name, "seed": seed, "lr": learning_rate},
    )  # fmt: skip


def _eval_batches(evaluator: TaskEvaluator, features: FeatureBuilder, size: int, pad: int) -> list[dict]:
    batches = list(batches_of(features, evaluator.features, size, pad))
    for b in batches:  # labels stay (eval loss); QA dev features carry no positions
        b.pop("start_positions", None)
        b.pop("end_positions", None)
    return batches


def _train(trainer: Trainer, keeper: BestKeeper, cfg: FinetuneConfig, spec: TaskSpec, name: str) -> None:
    """Resume when asked and a checkpoint is there, train to the end (or the time budget), and evaluate
    the last step if no evaluation was made there."""
    if cfg.resume and latest_checkpoint(trainer.checkpoint_root) is not None:
        path = trainer.resume("latest", log=logger.warning)
        keeper.restore(trainer.step)
        logger.info("%s: resumed from %s (step %d of %d)", spec.name, path, trainer.step, trainer.total_steps)
    if trainer.step < trainer.total_steps:
        result = trainer.train()  # ends at cfg.epochs or after cfg.minutes (TrainerConfig.max_minutes)
        if result.interrupted:  # SIGINT/SIGTERM: the checkpoint is saved; the command stops (no next run)
            raise KeyboardInterrupt(
                f"{name} stopped at step {trainer.step}; {result.last_checkpoint} saved: --resume continues"
            )
    if trainer.step < trainer.total_steps:
        logger.info("%s: time budget of %s min spent after step %d", spec.name, cfg.minutes, trainer.step)
    # rank 0's answer on every rank: under DDP the others do not evaluate and keep no history
    unscored = not keeper.history or keeper.history[-1]["step"] != trainer.step
    if broadcast_object(unscored, trainer.context):
        trainer.evaluate()  # stopped by the time budget before an epoch's end: score what was reached


def run_once(
    spec: TaskSpec,
    source: ModelSource,
    train_features: Sequence[Feature],
    evaluator: TaskEvaluator,
    labels: Sequence[str] | None,
    cfg: FinetuneConfig,
    learning_rate: float,
    seed: int,
    output_dir: Path,
    regression: bool = False,
    run_id: str | None = None,
    features: FeatureBuilder | None = None,
    extra_loss: ExtraLoss | None = None,
) -> RunResult:
    """One run of the recipe: build the model (seeded), train ``cfg.epochs`` with evaluation after every
    epoch, keep the best epoch. Returns its metrics; the best model is in ``output_dir/best``.

    Checkpoints go to ``output_dir/checkpoints`` (``cfg.save_every``, the last ``cfg.keep_last`` kept) with
    ``run_id`` in their manifests; with ``cfg.resume`` the run continues from the newest one that verifies
    and ends with the weights and optimizer state of an uninterrupted run, bit for bit on CPU. ``features``
    pads the batches (None: BERT's, `TaskFeatures`); ``extra_loss`` wraps the model the trainer trains
    (e.g. a teacher's soft targets, which `FinetuneConfig` refuses under parallel 'fsdp': FSDP shards the
    task model, not a wrapper around it); the task model alone is saved."""
    features = features or TaskFeatures()
    set_seed(seed)
    model = source.build(spec, labels, cfg.dropout, regression, cfg.encoder_dropout, cfg.pooling)
    pad = pad_id_of(source.tokenizer, model.config.pad_token_id)
    dataset = FeatureDataset(train_features)
    processes = current_context().world_size  # each reads its shard: batch_size examples per process
    steps_per_epoch = math.ceil(math.ceil(len(dataset) / processes) / cfg.batch_size)
    best_dir = output_dir / "best" if cfg.keep_best else None
    keeper = BestKeeper(model, source.tokenizer, spec.metric, best_dir, output_dir / "history.json", run_id)
    evaluator.on_result = keeper
    trained = (extra_loss or TaskLossOnly()).wrap(model)
    optimize(trained, "training")  # oneDNN's products where they are faster (attnlab.accel)
    trainer = Trainer(
        trained,
        trainer_config(spec, source, cfg, learning_rate, seed, output_dir, steps_per_epoch),
        dataset,
        eval_data=_eval_batches(evaluator, features, cfg.eval_batch_size, pad),
        metric_fn=evaluator,
        collate_fn=lambda items: features.collate(items, pad),
        run_id=run_id,
    )
    keeper.trainer = trainer
    start = time.monotonic()
    _train(trainer, keeper, cfg, spec, f"{spec.name} lr {learning_rate:g} seed {seed}")
    return RunResult(
        learning_rate=learning_rate,
        seed=seed,
        epochs=[{k.removeprefix("eval_"): v for k, v in h.items()} for h in keeper.history],
        best={k.removeprefix("eval_"): v for k, v in keeper.best.items()},
        best_step=keeper.best_step,
        steps=trainer.step,
        minutes=(time.monotonic() - start) / 60.0,
        stopped_by_time=trainer.step < trainer.total_steps,
        best_dir=str(best_dir) if best_dir is not None else None,
    )


__all__ = [
    "BestKeeper",
    "ExtraLoss",
    "RunResult",
    "TaskLossOnly",
    "run_once",
    "save_model_dir",
    "trainer_config",
]
