"""Training for the time a user gives: how many steps fit, and the schedule's end kept on the clock.

Shared by every time-budgeted run (``attnlab pretrain``, ``translate-train``, ELMo): `estimate_steps` and
`estimate_stage_steps` time a few steps of a copy of the model before training (bounded by the budget),
`replan_steps` moves the learning-rate schedule's end from the run's own measured step time, `time_limit`
stops the run at the deadline, and `fit_warmup` keeps a warm-up inside a plan shorter than it.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .config import TrainerConfig, resolve_warmup
from .data import ResumableLoader
from .distributed import all_gather_object
from .footprint import check_step_fits
from .optim import build_optimizer
from .trainer import Trainer

TIME_LIMIT = "time limit"  # the stop reason `time_limit` gives the trainer
REPLAN_AT = (0.1, 0.3, 0.5, 0.7, 0.85)  # fractions of a time-budgeted run's first plan where it re-plans
MIN_REPLAN_STEPS = 40  # a shorter plan has no room to measure itself
PROBE_SHARE = 0.25  # the most of a budget that timing steps before training may take
MAX_WARMUP_SHARE = 0.5  # a warm-up scaled into a short plan takes at most half of it


def time_limit(deadline: float) -> Callable[[Trainer, dict[str, Any]], None]:
    """A Trainer callback ending the run at the first step boundary after ``deadline`` (time.monotonic):
    the trainer saves a checkpoint there and returns (`Trainer.request_stop`, safe under DDP)."""

    def callback(trainer: Trainer, record: dict[str, Any]) -> None:
        if time.monotonic() >= deadline:
            trainer.request_stop(TIME_LIMIT)

    return callback


def scaled_warmup(warmup: int, planned: int, steps: int) -> int:
    """``warmup`` steps of a ``planned``-step schedule, kept when they end inside ``steps``; otherwise their
    share of the plan (at most `MAX_WARMUP_SHARE`) applied to ``steps``, as a fractional warm-up is."""
    if warmup <= steps:
        return warmup
    share = min(warmup / max(1, planned), MAX_WARMUP_SHARE)
    return min(steps, int(share * steps + 0.5))


def fit_warmup(trainer: Trainer, total_steps: int, log: Callable[[str], None] = print) -> None:
    """Before `Trainer.set_total_steps` shortens a run: a warm-up that would not end inside ``total_steps``
    is scaled to them (`scaled_warmup`), so the linear and cosine schedules still decay."""
    length = trainer.config.max_steps or trainer.total_steps
    warmup = resolve_warmup(trainer.config.warmup, length)
    fitted = scaled_warmup(warmup, length, total_steps)
    if fitted != warmup:
        log(f"warm-up {fitted} steps (of {total_steps}; {warmup} in the {length}-step plan)")
        trainer.config = dataclasses.replace(trainer.config, warmup=fitted)


@dataclass(frozen=True)
class StagePlan:
    """A schedule in length stages, for `replan_steps`: stage k takes ``fractions[k]`` of the steps at
    ``costs[k]`` seconds a step (measured before training; only their ratios are used), and
    ``ends(n)`` gives each stage's last step when the run has n steps (`Recipe.stage_ends`)."""

    fractions: tuple[float, ...]
    costs: tuple[float, ...]
    ends: Callable[[int], list[int]]

    def stage_of(self, step: int, total: int) -> int:
        """The stage that step ``step`` (1-based) belongs to in a run of ``total`` steps."""
        ends = self.ends(total)
        return next((k for k, end in enumerate(ends) if step <= end), len(ends) - 1)

    def steps_that_fit(self, stage: int, step: int, seconds: float, per_step: float) -> int:
        """Total steps N such that the rest of ``stage`` (from ``step``, at ``per_step`` seconds) and the
        later stages (at ``per_step`` times their cost ratio) take ``seconds``: N (C + sum_j>k f_j r_j) =
        step + seconds / per_step, C the stages' fractions up to ``stage``."""
        done = sum(self.fractions[: stage + 1])
        later = sum(
            f * c / self.costs[stage] for f, c in zip(self.fractions[stage + 1 :], self.costs[stage + 1 :])
        )
        return int((step + seconds / per_step) / (done + later))


def replan_steps(
    deadline: float,
    at_step: int | Sequence[int],
    on_change: Callable[[Trainer], None] = lambda trainer: None,
    log: Callable[[str], None] = print,
    reserve: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    stages: StagePlan | None = None,
) -> Callable[[Trainer, dict[str, Any]], None]:
    """A Trainer callback that re-plans the run's length at step ``at_step`` (or at each of several steps)
    from its own measured step time, so that the learning-rate schedule ends when ``deadline``
    (time.monotonic) comes.

    The probe before training misjudges the step time (the first steps of a process are slower, and other
    work sharing the cores changes it during a run; measured in docs/pretraining_budget.md, "Re-planning").
    So at each re-plan step the time per step is measured over the steps since the previous one (the first
    window starts at the end of the first step), ``reserve`` of the time left is kept for the final
    evaluation and save, a warm-up longer than the new plan is scaled to it (`fit_warmup`), and
    `Trainer.set_total_steps` moves the end. Every rank takes the smallest plan (one all-gather per re-plan
    step, where all ranks are). ``on_change(trainer)`` is called after a change (to record it); ``clock`` is
    the time source (``deadline`` is on its scale).

    With ``stages`` (a schedule in length stages, e.g. BERT's 90% at 128 / 10% at 512 tokens) the measured
    step time is the current stage's; the later stages' are scaled by their cost ratios measured before
    training, the whole schedule's length moves, and the current trainer stops at its stage's new end. A
    window that spans two stages is not used (its steps cost two prices); the next one starts afresh."""
    points = sorted({at_step} if isinstance(at_step, int) else set(at_step))
    state: dict[str, float] = {}

    def callback(trainer: Trainer, record: dict[str, Any]) -> None:
        if "t0" not in state:
            state["t0"], state["s0"] = clock(), trainer.step
            return
        if trainer.step not in points:
            return
        now = clock()
        per_step = (now - state["t0"]) / max(1, trainer.step - state["s0"])
        first = int(state["s0"]) + 1  # the window's first step
        state["t0"], state["s0"] = now, trainer.step  # the next window starts here
        seconds = (1.0 - reserve) * (deadline - now)
        total = trainer.config.max_steps or trainer.total_steps  # the schedule's length
        if stages is None:
            steps = trainer.step + max(0, int(seconds / per_step))
        else:
            stage = stages.stage_of(trainer.step, total)
            if stages.stage_of(first, total) != stage:
                return
            fit = stages.steps_that_fit(stage, trainer.step, max(0.0, seconds), per_step)
            steps = max(trainer.step, fit)
        steps = min(all_gather_object(steps, trainer.context))
        if abs(steps - total) <= 0.02 * total:
            return
        stop = None  # a single stage stops at the schedule's end; a stage of several at its own new end
        if stages is not None:
            stop = max(trainer.step, stages.ends(steps)[stages.stage_of(trainer.step, total)])
        log(
            f"re-planned at step {trainer.step}: {per_step:.3f} s a step here, so {steps} steps fit "
            f"(planned {total})"
        )
        fit_warmup(trainer, steps, log)
        trainer.set_total_steps(steps, stop)
        on_change(trainer)

    return callback


def _time_steps(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: list, accum: int, limit: float | None = None
) -> float:
    """Median seconds of one optimizer step over ``batches`` (after one untimed step). With ``limit``
    (seconds) the timing stops once it has taken that long; with no timed step, the untimed one counts."""
    times, first, started = [], None, time.perf_counter()
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        for _ in range(accum):
            model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - t0)
        else:
            first = time.perf_counter() - t0
        if limit is not None and time.perf_counter() - started >= limit:
            break
    if times:
        return sorted(times)[len(times) // 2]
    return first if first is not None else 1.0


def estimate_step_time(
    model: nn.Module,
    loader: ResumableLoader,
    tconfig: TrainerConfig,
    probe_steps: int = 6,  # 5 timed steps; with 3, 30-minute book runs ended about a third early
    log: Callable[[str], None] = print,
    choose_threads: bool = True,
    limit: float | None = None,
    budget: float | None = None,
) -> float:
    """Seconds of one optimizer step: times ``probe_steps`` steps of a copy of the model (after one warm-up
    step) on the first batches of ``loader``, with the run's optimizer settings, for at most ``limit``
    seconds (then fewer steps are timed). A step that cannot fit in memory or in ``budget`` seconds is
    refused before any runs (`attnlab.train.footprint.check_step_fits`).

    On CPU (with ``choose_threads``) it also times one thread against torch's default and keeps the faster,
    for the rest of the process: on a machine whose cores are busy with other work, torch's threads wait on
    each other at every operation (measured 20x slower with 2 threads than with 1 on a loaded 2-core
    machine), while on an idle one more threads win.
    """
    started = time.perf_counter()
    batches = []
    for batch in loader.iter_epoch(0):
        batches.append(batch)
        if len(batches) > probe_steps:
            break
    if batches:
        check_step_fits(model, *_batch_shape(batches[0]), budget, tconfig.grad_accum_steps)
    probe = copy.deepcopy(model)
    probe.train()
    optimizer = build_optimizer(probe, tconfig)
    threads = torch.get_num_threads()
    per_step = _time_steps(probe, optimizer, batches, tconfig.grad_accum_steps, limit)
    on_cpu = next(model.parameters()).device.type == "cpu" and tconfig.device in ("auto", "cpu")
    left = None if limit is None else limit - (time.perf_counter() - started)
    has_time = left is None or left > 0
    if choose_threads and on_cpu and threads > 1 and not torch.cuda.is_available() and has_time:
        torch.set_num_threads(1)
        single = _time_steps(probe, optimizer, batches, tconfig.grad_accum_steps, left)
        if single < per_step:
            log(f"one thread is faster here than {threads} ({single:.2f}s against {per_step:.2f}s a step)")
            per_step = single
        else:
            torch.set_num_threads(threads)
    return per_step


def _batch_shape(batch: dict[str, Any]) -> tuple[int, int]:
    """(sequences, tokens each) of a training batch: its ``input_ids`` (or first tensor) of (B, T, ...)."""
    ids = batch.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        ids = next(v for v in batch.values() if isinstance(v, torch.Tensor) and v.dim() >= 2)
    return int(ids.shape[0]), int(ids.shape[1])


def estimate_steps(
    model: nn.Module,
    loader: ResumableLoader,
    tconfig: TrainerConfig,
    seconds: float,
    probe_steps: int = 6,
    log: Callable[[str], None] = print,
) -> int:
    """How many optimizer steps fit in ``seconds`` (`estimate_step_time` on ``loader``'s batches, for at most
    `PROBE_SHARE` of them); keeps 10% in reserve."""
    per_step = estimate_step_time(
        model, loader, tconfig, probe_steps, log, limit=PROBE_SHARE * seconds, budget=seconds
    )
    return max(1, int(0.9 * seconds / per_step))


def estimate_stage_steps(
    model: nn.Module,
    loaders: Sequence[ResumableLoader],
    fractions: Sequence[float],
    tconfig: TrainerConfig,
    seconds: float,
    probe_steps: int = 6,
    log: Callable[[str], None] = print,
    lengths: Sequence[int] | None = None,
) -> tuple[int, list[float]]:
    """Total optimizer steps N of a schedule in length stages (stage k: ``fractions[k]`` of the steps on
    ``loaders[k]``'s sequences) that fit in ``seconds``: each stage's step time t_k is measured on its own
    batches, and N = 0.9 x seconds / sum_k(fractions[k] x t_k).

    Timing the first stage alone planned BERT's 90% at 128 / 10% at 512 tokens as if every step were a short
    one: the long steps cost several times more, so the clock stopped such a run before its schedule's end,
    with the learning rate still high and the long stage cut short. The thread count is chosen on the
    first stage and kept for the others, which are timed on 2 steps (BERT-base's 512-token steps cost
    seconds each on a CPU). All the timing takes at most `PROBE_SHARE` of ``seconds``, shared between the
    stages. A later stage left no time is not timed: with the stages' sequence ``lengths`` its step is
    priced at the first stage's times the length ratio (a lower bound: attention grows faster), so that a
    short budget never builds BERT-base's 512-token batches only to time them. Returns N and the stages'
    seconds a step."""
    times: list[float] = []  # later (longer) stages are timed on 2 steps: their steps are few and cost most
    deadline = time.perf_counter() + PROBE_SHARE * seconds
    for k, loader in enumerate(loaders):
        limit = max(0.0, deadline - time.perf_counter()) / (len(loaders) - k)
        if k > 0 and limit <= 0.0 and lengths is not None:
            times.append(times[0] * lengths[k] / lengths[0])
            log(f"no time left to time length {lengths[k]}: priced at {times[-1]:.3f} s a step")
            continue
        steps, first = (probe_steps, True) if k == 0 else (2, False)
        times.append(
            estimate_step_time(model, loader, tconfig, steps, log, first, limit=limit, budget=seconds)
        )
    per_step = sum(f * t for f, t in zip(fractions, times))
    if len(times) > 1:
        shown = ", ".join(f"{t:.3f}" for t in times)
        log(f"seconds a step by length stage: {shown}; {per_step:.3f} on average over the schedule")
    return max(1, int(0.9 * seconds / per_step)), times
