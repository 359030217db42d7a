"""The training step of a pre-training run: one `Trainer` per length stage (BERT's 90% of the steps at 128
tokens, then 10% at 512; Devlin et al. 2019, appendix A.2), the optimizer, schedule and step count carried
from stage to stage, each stage resumable from its own checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.accel import optimize
from attnlab.nn.embeddings import Embeddings
from attnlab.pretraining.inputs import RunInputs
from attnlab.pretraining.plan import RunPlan
from attnlab.pretraining.recipes import Recipe
from attnlab.train import ResumableLoader, Trainer, TrainerConfig, latest_checkpoint


def start_stage_positions(model: nn.Module, recipe: Recipe, k: int, log: Callable[[str], None]) -> None:
    """Before length stage ``k``: with ``recipe.stage_positions == "copy"``, the learned positions beyond the
    longest earlier stage start as copies of those it trained (`Embeddings.tile_positions`), in every
    embedding table of ``model`` (ELECTRA has two)."""
    trained = max(s.max_length for s in recipe.stages[:k])
    length = recipe.stages[k].max_length
    if recipe.stage_positions == "keep" or length <= trained:
        return
    tiled = [m.tile_positions(trained, length) for m in model.modules() if isinstance(m, Embeddings)]
    if any(tiled):
        log(f"positions {trained}-{length - 1} start as copies of positions 0-{trained - 1}")


@dataclass
class StagesResult:
    trainer: Trainer  # the last stage's
    interrupted: bool  # stopped by a signal or the time limit (the checkpoint is saved)
    evaluated: bool  # the last stage's Trainer.train evaluated at its end (it does unless stopped early)


def train_stages(
    model: nn.Module,
    plan: RunPlan,
    schedule: dict[str, int],
    inputs: RunInputs,
    eval_loader: ResumableLoader,
    tconfig: TrainerConfig,
    *,
    callbacks: list[Callable[[Trainer, dict[str, Any]], None]],
    output_dir: Path,
    run_id: str,
    resume: bool,
    log: Callable[[str], None],
) -> StagesResult:
    """Train ``model`` through ``plan.recipe``'s length stages. ``schedule["max_steps"]`` is the schedule's
    current length: a re-plan in an earlier stage moves it, and with it the later stages' ends."""
    recipe = plan.recipe
    multi = len(recipe.stages) > 1
    trainer: Trainer | None = None
    evaluated = False
    for k in range(len(recipe.stages)):
        end = recipe.stage_ends(schedule["max_steps"])[k]
        stage_dir = output_dir / "train" / f"stage-{k + 1}" if multi else output_dir / "train"
        cfg = dataclasses.replace(tconfig, output_dir=stage_dir, max_steps=schedule["max_steps"])
        previous = trainer
        loader = plan.prepared.pop(k) if k in plan.prepared else inputs.train_loader(k)
        optimize(model, "training")  # oneDNN's products where they are faster (attnlab.accel)
        trainer = Trainer(
            model, cfg, loader, eval_data=eval_loader, metric_fn=inputs.metric(), callbacks=callbacks,
            run_id=run_id,
            optimizer=previous.optimizer if previous else None,
            scheduler=previous.scheduler if previous else None,
        )  # fmt: skip
        trainer.total_steps = end  # the schedule spans all stages; this stage stops at its end
        if previous is not None:  # continue the step count, optimizer and schedule of the last stage
            trainer.step = previous.step
            trainer.examples_seen, trainer.tokens_seen = previous.examples_seen, previous.tokens_seen
        resumed = resume and latest_checkpoint(trainer.checkpoint_root) is not None
        if resumed:
            log(f"resumed from {trainer.resume()} (step {trainer.step})")
        if trainer.step >= end:
            evaluated = False
            continue  # this stage finished in an earlier run
        if previous is not None and not resumed:  # the stage starts here (a resumed one started)
            start_stage_positions(model, recipe, k, log)
        if multi:
            log(f"stage {k + 1}/{len(recipe.stages)}: length {recipe.stages[k].max_length}, steps to {end}")
        result = trainer.train()
        evaluated = not result.interrupted
        if result.interrupted:  # a signal or the time limit: the checkpoint is saved, the rest skipped
            return StagesResult(trainer, True, False)
    assert trainer is not None
    return StagesResult(trainer, False, evaluated)
