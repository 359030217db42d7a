"""The plan of a time-budgeted ``translate-train`` run: how many steps fit in ``--minutes`` and a warm-up that
ends inside them, as ``attnlab pretrain`` plans its runs (`attnlab.pretraining.run`).

Without a plan a 60-minute run is scheduled for the paper's 100,000 steps: its progress bar shows 100,000
steps and an ETA of hundreds of hours, and on a CPU its 4,000 warm-up steps may never end, so the learning
rate only ever rises. With one, the steps are timed on a copy of the model before training
(`attnlab.pretraining.run.estimate_steps`) and re-planned from the run's own step time at a few points
(`replan_steps`), so the bar's total and ETA are true and the schedule ends when time does.

The warm-up keeps the paper's proportion when the planned run is shorter than the paper's: 4,000 of
100,000 steps (Vaswani et al. 2017, section 5.3), i.e. 4% of the planned steps, at least 1; a warm-up the
user asked for is kept when it ends inside the plan, and shortened to that proportion otherwise (with a
log line saying so). The warm-up stays in absolute steps when a re-plan moves the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from attnlab.train import Trainer, TrainerConfig

PAPER_STEPS = 100_000  # base model, section 5.3
PAPER_WARMUP = 4_000


@dataclass
class StepPlan:
    """``max_steps`` and ``warmup`` (steps) for the run's `TrainerConfig`; ``callbacks`` for its `Trainer`
    (they end the run when time does and re-plan its length)."""

    max_steps: int
    warmup: int
    callbacks: list[Callable[[Trainer, dict[str, Any]], None]] = field(default_factory=list)


def planned_warmup(requested: int, planned_steps: int, log: Callable[[str], None] = print) -> int:
    """``requested`` warm-up steps when they end inside ``planned_steps``; else the paper's 4% of the plan."""
    if requested < planned_steps:
        return requested
    warmup = max(1, round(planned_steps * PAPER_WARMUP / PAPER_STEPS))
    log(
        f"warm-up of {requested} steps would not end within the {planned_steps} planned steps: "
        f"{warmup} steps instead (the paper's {PAPER_WARMUP} of {PAPER_STEPS})"
    )
    return warmup


def plan_for_minutes(
    model: nn.Module,
    loader: Any,
    tconfig: TrainerConfig,
    minutes: float,
    warmup: int,
    started: float | None = None,
    log: Callable[[str], None] = print,
) -> StepPlan:
    """The steps that fit in what is left of ``minutes`` (``started``: time.monotonic() at the start of the
    command; default now), with ``loader``'s first batches timed on a copy of ``model``; the warm-up inside
    them; and the callbacks that stop the run at the deadline and re-plan it from its own step time."""
    from attnlab.pretraining.run import REPLAN_AT, estimate_steps, replan_steps, time_limit

    started = time.monotonic() if started is None else started
    deadline = started + 60.0 * minutes
    steps = estimate_steps(model, loader, tconfig, deadline - time.monotonic(), log=log)
    log(f"{steps} steps fit in {minutes:g} minutes here")
    callbacks = [time_limit(deadline)]
    if steps >= 40:  # a shorter run has no room to measure itself
        points = [max(10, int(f * steps)) for f in REPLAN_AT]
        callbacks.append(replan_steps(deadline, points, log=log))
    return StepPlan(steps, planned_warmup(warmup, steps, log), callbacks)
