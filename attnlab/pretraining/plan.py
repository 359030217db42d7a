"""The plan of a pre-training run: how many steps, the warm-up, and the callbacks that keep the schedule's
end on the clock; kept in run.json so that a resumed run rebuilds the same schedule.

With a time budget (``auto_steps``) each length stage's step time is timed on a copy of the model before
training (`attnlab.train.budget.estimate_stage_steps`) and the run re-planned from its own step time at
`REPLAN_AT` of the first plan (`replan_steps`, `StagePlan`). The warm-up is in absolute steps: a re-plan
moves the schedule's end, not the warm-up; a warm-up longer than the steps that fit keeps its share of the
recipe's schedule (`scaled_warmup`), as a warm-up given as a fraction does.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.atomic import write_json_atomic
from attnlab.pretraining.inputs import RunInputs
from attnlab.pretraining.recipes import Recipe
from attnlab.train import ResumableLoader, Trainer, TrainerConfig, resolve_warmup
from attnlab.train.budget import (
    MIN_REPLAN_STEPS,
    REPLAN_AT,
    StagePlan,
    estimate_stage_steps,
    replan_steps,
    scaled_warmup,
    time_limit,
)
from attnlab.train.distributed import DistributedContext, all_gather_object
from attnlab.train.footprint import check_step_fits

MIN_USEFUL_STEPS = 200  # fewer leave a masked LM on the unigram plateau (measured: ~300 steps to leave it)


def size_warnings(train_tokens: int, vocab_size: int, parameters: int) -> list[str]:
    """What is wrong with a corpus too small for its vocabulary or model, with the numbers."""
    out = []
    if train_tokens < 50 * vocab_size:
        out.append(
            f"the corpus has {train_tokens:,} training tokens for a vocabulary of {vocab_size:,}: each token "
            f"is seen {train_tokens / vocab_size:.0f} times on average, too few to learn it; a vocabulary of "
            f"at most {max(100, train_tokens // 50):,} (--vocab-size) or a larger corpus fits"
        )
    # Several epochs of a small corpus are fine (0.75M parameters, 0.4M tokens, 20 epochs in 4 minutes reach
    # 43% held-out accuracy: experiments/pretrain_budget.py); ten times more parameters than tokens is not.
    if parameters > 10 * train_tokens:
        out.append(
            f"the model has {parameters:,} parameters for {train_tokens:,} training tokens: it can memorise "
            "the corpus rather than learn the language; a smaller model (--preset) or a larger corpus fits"
        )
    return out


def too_few_steps_warning(steps: int, minutes: float) -> str:
    """The one line a budget too small for learning gets."""
    return (
        f"warning: {steps} steps are too few to learn anything: a masked LM needs a few hundred before it "
        f"predicts more than the most frequent tokens; give it more time than {minutes:g} minutes "
        "(--minutes) or a smaller model (--preset)"
    )


@dataclass
class RunPlan:
    """The recipe with its planned ``max_steps``, the warm-up in steps, and what planning measured: the
    stages' loaders it built to time steps (reused by the stages) and their seconds a step."""

    recipe: Recipe
    warmup: int
    timed: bool = False  # planned from a timed probe (then re-planned during the run)
    too_few_steps: bool = False  # the budget holds fewer than MIN_USEFUL_STEPS steps (said once, here)
    prepared: dict[int, ResumableLoader] = field(default_factory=dict)
    stage_costs: list[float] = field(default_factory=list)


def plan_run(
    recipe: Recipe,
    model: nn.Module,
    inputs: RunInputs,
    tconfig: TrainerConfig,
    ctx: DistributedContext,
    *,
    previous: dict[str, Any],
    minutes: float | None,
    auto_steps: bool,
    started: float,
    log: Callable[[str], None],
) -> RunPlan:
    """The run's steps and warm-up: a resumed run's recorded plan; with ``auto_steps`` and ``minutes`` what
    fits in the time left since ``started`` (time.monotonic); otherwise the recipe's ``max_steps``. A step
    of the longest stage that this machine's memory cannot hold is refused first (`check_step_fits`)."""
    longest = max(stage.max_length for stage in recipe.stages)
    check_step_fits(model, tconfig.batch_size, longest, None)
    if "max_steps" in previous:
        recipe = dataclasses.replace(recipe, max_steps=int(previous["max_steps"]))
        warmup = previous.get("warmup_steps", resolve_warmup(tconfig.warmup, recipe.max_steps))
        return RunPlan(recipe, int(warmup))
    if not (auto_steps and minutes is not None):
        warmup = resolve_warmup(tconfig.warmup, recipe.max_steps)
        return RunPlan(recipe, _checked_warmup(warmup, recipe, tconfig))
    prepared = {k: inputs.train_loader(k) for k in range(len(recipe.stages))}
    seconds = 60.0 * minutes - (time.monotonic() - started)
    fractions = [stage.fraction for stage in recipe.stages]
    lengths = [stage.max_length for stage in recipe.stages]
    steps, costs = estimate_stage_steps(
        model, list(prepared.values()), fractions, tconfig, seconds, log=log, lengths=lengths
    )
    steps = min(all_gather_object(steps, ctx))  # every rank must run the same schedule
    log(f"{steps} steps of {tconfig.batch_size} sequences fit in {minutes:g} minutes here")
    too_few = steps < MIN_USEFUL_STEPS
    if too_few:
        log(too_few_steps_warning(steps, minutes))
    warmup = resolve_warmup(tconfig.warmup, steps)  # a fraction: of the steps that fit
    fitted = scaled_warmup(warmup, recipe.max_steps, steps)  # steps: kept if they fit, else their share
    if fitted != warmup:
        log(f"warm-up {fitted} steps: the recipe's {warmup} of {recipe.max_steps}, scaled to {steps} steps")
    return RunPlan(dataclasses.replace(recipe, max_steps=steps), fitted, True, too_few, prepared, costs)


def _checked_warmup(warmup: int, recipe: Recipe, tconfig: TrainerConfig) -> int:
    """``warmup``, refused when a decaying schedule would never leave it (a run of steps the user chose)."""
    if warmup > recipe.max_steps and tconfig.schedule in ("linear", "cosine"):
        raise ValueError(
            f"warm-up: the recipe's {warmup} warm-up steps do not fit in the {recipe.max_steps} steps "
            "planned; give more steps (--max-steps, or --set max_steps=N with --paper) or a shorter warm-up "
            "(--set warmup=0.05 for 5% of the steps)"
        )
    return warmup


class RunRecord:
    """run.json: the recipe, model config and plan (``max_steps``, ``warmup_steps``), then the result;
    written by the main process only."""

    def __init__(self, path: Path, info: dict[str, Any], run_id: str, is_main: bool) -> None:
        self.path, self.info, self.run_id, self.is_main = path, info, run_id, is_main
        self.plan: dict[str, int] = {}

    def write(self, recipe: Recipe, config: Any, **extra: Any) -> None:
        if not self.is_main:
            return
        config_dict = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
        self.info.update(run_id=self.run_id, recipe=recipe.to_dict(), model_config=config_dict)
        self.info.update(**self.plan, **extra)
        write_json_atomic(json.loads(json.dumps(self.info, default=str)), self.path, indent=1)


def plan_callbacks(
    plan: RunPlan, deadline: float | None, on_change: Callable[[Trainer], None], log: Callable[[str], None]
) -> list[Callable[[Trainer, dict[str, Any]], None]]:
    """The Trainer callbacks of a time budget: stop at ``deadline``; a plan timed before training is also
    re-planned from the run's own step time at `REPLAN_AT` (``on_change`` records each new plan)."""
    if deadline is None:
        return []
    callbacks = [time_limit(deadline)]
    recipe = plan.recipe
    if plan.timed and recipe.max_steps >= MIN_REPLAN_STEPS:
        stage_plan = None
        if len(recipe.stages) > 1:
            fractions = tuple(s.fraction for s in recipe.stages)
            stage_plan = StagePlan(fractions, tuple(plan.stage_costs), recipe.stage_ends)
        points = [max(10, int(f * recipe.max_steps)) for f in REPLAN_AT]
        callbacks.append(replan_steps(deadline, points, on_change, log, stages=stage_plan))
    return callbacks
