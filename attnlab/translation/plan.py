"""The plan of a time-budgeted ``translate-train`` run: how many steps fit in ``--minutes`` and a warm-up that
ends inside them, with the trainer's time-budget planning (`attnlab.train.budget`), as ``attnlab pretrain``.

Without a plan a 60-minute run is scheduled for the paper's 100,000 steps: its progress bar shows 100,000
steps and an ETA of hundreds of hours, and on a CPU its 4,000 warm-up steps may never end, so the learning
rate only ever rises. With one, the steps are timed on a copy of the model before training
(`attnlab.train.budget.estimate_steps`) and re-planned from the run's own step time at a few points
(`replan_steps`), so the bar's total and ETA are true and the schedule ends when time does.

The warm-up keeps the paper's proportion when the planned run is shorter than the paper's: 4,000 of
100,000 steps (Vaswani et al. 2017, section 5.3), i.e. 4% of the planned steps, at least 1; a warm-up the
user asked for is kept when it ends inside the plan, and shortened to that proportion otherwise (with a
log line saying so). A default warm-up (``--warmup`` not given) is at most ``warmup_share`` of the plan: 800
steps on a CPU were measured inside a 3,420-step hour (23%), and 800 of a 900-step run would be all
warm-up. The warm-up stays in absolute steps when a re-plan moves the end.

The sizes a run takes when the user names none (`sizes_for`) depend on where it trains, as ``attnlab
pretrain``'s do on its budget (`attnlab.pretraining.budget`): on a CPU the model, warm-up and batches that
``experiments/translate_multi30k.py`` measured (test2016 BLEU 36.51 in 55 minutes on 2 cores); on a GPU the
paper's base model and warm-up.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.train import Trainer, TrainerConfig
from attnlab.train.budget import MIN_REPLAN_STEPS, REPLAN_AT, estimate_steps, replan_steps, time_limit

PAPER_STEPS = 100_000  # base model, section 5.3
PAPER_WARMUP = 4_000
# The most of a time plan a default warm-up takes: the measured CPU hour warmed up for 800 of 3,420 steps.
DEFAULT_WARMUP_SHARE = 0.25


@dataclass(frozen=True)
class TrainingSizes:
    """What ``translate-train`` takes for the options a user leaves out, on one kind of device."""

    preset: str  # attnlab.translation.config.PRESETS
    warmup: int  # steps; with a time plan at most DEFAULT_WARMUP_SHARE of it (planned_warmup)
    max_tokens: int  # padded tokens per batch and side
    save_every: int  # steps between checkpoints: the last few are averaged, so they must fall inside the run


# CPU: experiments/translate_multi30k.py's measured run (3,420 updates of 2,500 tokens in 55 minutes, warm-up
# 800, a checkpoint every 50 steps so the 5 averaged ones are the run's last 250 steps). GPU: the paper's base
# model and warm-up (section 5.3) with the batches translate-train has always taken.
CPU_SIZES = TrainingSizes(preset="transformer-cpu", warmup=800, max_tokens=2500, save_every=50)
GPU_SIZES = TrainingSizes(preset="transformer-base", warmup=PAPER_WARMUP, max_tokens=4096, save_every=1000)


def sizes_for(device: str = "auto") -> TrainingSizes:
    """The `TrainingSizes` for a run on ``device`` ("auto": CUDA if available, as the trainer resolves it)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise ValueError(
            f"--device {device!r}: not a torch device (cpu, cuda, cuda:1, ...): {error}"
        ) from None
    return CPU_SIZES if kind == "cpu" else GPU_SIZES


@dataclass
class StepPlan:
    """``max_steps`` and ``warmup`` (steps) for the run's `TrainerConfig`; ``callbacks`` for its `Trainer`
    (they end the run when time does and re-plan its length)."""

    max_steps: int
    warmup: int
    callbacks: list[Callable[[Trainer, dict[str, Any]], None]] = field(default_factory=list)


def planned_warmup(
    requested: int,
    planned_steps: int,
    log: Callable[[str], None] = print,
    share: float | None = None,
) -> int:
    """``requested`` warm-up steps when they end inside ``planned_steps``; else the paper's 4% of the plan.
    With ``share`` (a default warm-up, not one the user asked for): at most that fraction of the plan."""
    if share is not None and requested > share * planned_steps:
        warmup = max(1, round(share * planned_steps))
        log(
            f"warm-up {warmup} steps ({share:.0%} of the {planned_steps} planned; "
            f"{requested} in a longer run)"
        )
        return warmup
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
    warmup_share: float | None = None,
) -> StepPlan:
    """The steps that fit in what is left of ``minutes`` (``started``: time.monotonic() at the start of the
    command; default now), with ``loader``'s first batches timed on a copy of ``model``; the warm-up inside
    them (a default ``warmup``: at most ``warmup_share`` of them); and the callbacks that stop the run at the
    deadline and re-plan it from its own step time."""
    started = time.monotonic() if started is None else started
    deadline = started + 60.0 * minutes
    device = _run_device(tconfig)
    if device.type != "cpu":  # time the steps where the run takes them, not on the CPU the model was built on
        model, loader = copy.deepcopy(model).to(device), _OnDevice(loader, device)
    steps = estimate_steps(model, loader, tconfig, deadline - time.monotonic(), log=log)
    log(f"{steps} steps fit in {minutes:g} minutes here")
    callbacks = [time_limit(deadline)]
    if steps >= MIN_REPLAN_STEPS:  # a shorter run has no room to measure itself
        points = [max(10, int(f * steps)) for f in REPLAN_AT]
        callbacks.append(replan_steps(deadline, points, log=log))
    return StepPlan(steps, planned_warmup(warmup, steps, log, share=warmup_share), callbacks)


def _run_device(tconfig: TrainerConfig) -> torch.device:
    """The device the `Trainer` will train on (``auto``: CUDA when available, as the trainer resolves it)."""
    if tconfig.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(tconfig.device)


class _OnDevice:
    """``loader``'s batches moved to ``device``: what `estimate_steps` times on an accelerator."""

    def __init__(self, loader: Any, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def iter_epoch(self, epoch: int = 0) -> Iterator[dict[str, Any]]:
        for batch in self.loader.iter_epoch(epoch):
            yield {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
