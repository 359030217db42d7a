"""What one training step needs, known before it runs: memory and arithmetic from the model's shape.

A time-budgeted run times a few real steps before it plans (`attnlab.train.budget`); at the papers' sizes
one such step can take minutes and tens of GB (BERT-base at 256 x 128 tokens: about 24 GB and 16.7 TFLOP).
`check_step_fits` prices the step first and refuses (`StepDoesNotFit`, one sentence) a step that cannot fit
in the machine's memory or in the time given, so that no probe is built only to fail; a command adds which
of its options would fit.

- memory: what one process of a run holds (`attnlab.train.memory_plan.plan_memory`: weights, gradients and
  Adam's two moments, 16 bytes a parameter in float32; the activations a Transformer layer keeps for the
  backward pass, Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  eq. 1, doubled for float32), plus the probe's copy of the weights (4 bytes a parameter);
- arithmetic: 6 * N * tokens for the weights' products (forward 2, backward 4: Kaplan et al. 2020) plus
  12 * L * s * h * tokens for attention's two products; the machine's rate is a float32 matrix product
  timed here, an upper bound on what a training step reaches, so a refusal is never a close call.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .memory_plan import plan_memory

GiB = 1024**3
PROBE_COPY_BYTES = 4  # a parameter's float32 copy that the timing probe keeps
MEMORY_SHARE = 0.9  # of the memory available that a step may take
BUDGET_STEPS = 3  # the fewest steps a timed run takes: the probe's untimed and timed one, one of training


class StepDoesNotFit(ValueError):
    """A training step larger than the machine's memory or the time given; the message says by how much."""


@dataclass(frozen=True)
class StepCost:
    """One optimizer step's memory (bytes) and arithmetic (floating-point operations)."""

    state_bytes: int
    activation_bytes: int
    flops: float

    @property
    def memory_bytes(self) -> int:
        return self.state_bytes + self.activation_bytes


def step_cost(model: nn.Module, batch: int, length: int, accum: int = 1) -> StepCost:
    """`StepCost` of ``model`` on ``batch`` sequences of ``length`` tokens (``accum`` micro-batches a step:
    arithmetic grows with it, activations do not). A model without ``config.num_heads`` (ELMo's LSTMs) is
    priced by its weights alone."""
    plan = plan_memory(model, batch_size=batch, length=length)
    parameters = plan.parameter_count
    config = getattr(model, "config", None)
    layers = getattr(config, "num_layers", 0)
    hidden = getattr(config, "hidden_size", 0)
    tokens = batch * length * accum
    flops = 6.0 * parameters * tokens
    if plan.activations:
        flops += 12.0 * layers * length * hidden * tokens
    state = plan.parameters + plan.gradients + plan.optimizer + PROBE_COPY_BYTES * parameters
    return StepCost(state, plan.activations, flops)


def available_memory_bytes() -> int | None:
    """Memory this process may still take: /proc/meminfo's MemAvailable, capped by a cgroup's limit (a
    container's); None where neither can be read."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


@functools.cache
def matmul_flops_per_second(size: int = 512, seconds: float = 0.1) -> float:
    """float32 matrix products a second on this process's threads (timed once, for ``seconds``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # untimed: the first call loads the kernels
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        torch.mm(a, b)
        count += 1
    return 2.0 * size**3 * count / elapsed


def check_step_fits(
    model: nn.Module, batch: int, length: int, seconds: float | None, accum: int = 1, what: str = "one step"
) -> StepCost:
    """`step_cost`, with `StepDoesNotFit` where the step needs more memory than is available or where, at
    this machine's matrix-product rate, the `BUDGET_STEPS` steps of the shortest timed run take longer than
    ``seconds`` (None: no time limit)."""
    cost = step_cost(model, batch, length, accum)
    parameters = sum(p.numel() for p in model.parameters())
    shape = f"{what} of this {parameters / 1e6:.1f}M-parameter model at {batch} x {length} tokens"
    available = available_memory_bytes()
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if on_cpu and available is not None and cost.memory_bytes > MEMORY_SHARE * available:
        raise StepDoesNotFit(
            f"{shape} needs about {cost.memory_bytes / GiB:.1f} GiB of memory (weights, gradients, Adam's "
            f"moments and activations) and {available / GiB:.1f} GiB is available here"
        )
    if on_cpu and seconds is not None:
        at_best = cost.flops / matmul_flops_per_second()
        if BUDGET_STEPS * at_best > seconds:
            raise StepDoesNotFit(
                f"{shape} takes at least {at_best:.1f} s on this machine ({cost.flops / 1e12:.2f} TFLOP); "
                f"timing it and training need {BUDGET_STEPS} steps and the time budget leaves "
                f"{max(seconds, 0):.0f} s"
            )
    return cost
