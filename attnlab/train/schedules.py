"""Learning-rate schedules as `torch.optim.lr_scheduler.LambdaLR` factories.

Convention: the multiplier is a function of ``step``, the 1-based number of the update about to be
made. `LambdaLR` evaluates its lambda at ``last_epoch`` = number of ``scheduler.step()`` calls so far
(0 before the first update), so every factory wraps ``f(step)`` as ``lambda i: f(i + 1)``. This is the
paper's ``step_num`` for the Transformer (whose formula is undefined at 0) and makes warm-up's first
update use lr / warmup rather than a wasted lr = 0.

The multiplier scales each parameter group's initial ``lr``. For ``transformer_schedule`` the multiplier
*is* the paper's learning rate, so set the optimizer's lr to 1.0 to reproduce the paper (or to a scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

from .config import TrainerConfig, resolve_warmup


def linear_warmup_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """BERT: linear warm-up to 1 at update `warmup_steps`, then linear decay towards 0.

    The decay reaches 0 one update after `total_steps` (factor 1 / (total - warmup + 1) on the last
    update), so that neither the first nor the last update is wasted with lr = 0.
    """
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step + 1) / (total_steps - warmup_steps + 1))


def cosine_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1 at update `warmup_steps`, then half a cosine from 1 towards 0 at `total_steps`
    (Loshchilov & Hutter 2017 without restarts; Transformer-XL's ``--scheduler cosine`` with ``eta_min`` 0).

    The progress is the linear schedule's (``1 - progress`` is its factor): the decay reaches 0 one update
    after `total_steps`, so the last update keeps a small positive rate; past that the factor is 0.
    """
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps + 1))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up to 1 at `warmup_steps`, then sqrt(warmup_steps / step); 1/sqrt(step) if no warm-up."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    return math.sqrt(max(warmup_steps, 1) / step)


def transformer_factor(step: int, d_model: int, warmup_steps: int) -> float:
    """Vaswani et al. 2017, eq. (3): d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    The two terms meet at step = warmup_steps, where the rate peaks at (d_model * warmup_steps)^-0.5
    (7.0e-4 for d_model = 512, warmup = 4000).
    """
    if warmup_steps < 1:
        raise ValueError(f"transformer schedule: warmup_steps must be >= 1, got {warmup_steps}")
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def _lambda_lr(optimizer: torch.optim.Optimizer, factor: Callable[[int], float]) -> LambdaLR:
    return LambdaLR(optimizer, lambda i: factor(i + 1))


def linear_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """Warm-up then linear decay (BERT)."""
    if total_steps < 1 or not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"linear schedule: need 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps})"
        )
    return _lambda_lr(optimizer, lambda s: linear_warmup_decay_factor(s, warmup_steps, total_steps))


def cosine_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """Warm-up then cosine decay (Transformer-XL)."""
    if total_steps < 1 or not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"cosine schedule: need 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps})"
        )
    return _lambda_lr(optimizer, lambda s: cosine_factor(s, warmup_steps, total_steps))


def inverse_sqrt_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """Warm-up then inverse square root decay, normalised to the peak lr."""
    if warmup_steps < 0:
        raise ValueError(f"inverse_sqrt schedule: warmup_steps must be >= 0, got {warmup_steps}")
    return _lambda_lr(optimizer, lambda s: inverse_sqrt_factor(s, warmup_steps))


def transformer_schedule(
    optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int = 4000
) -> LambdaLR:
    """The original Transformer's schedule; the optimizer's lr multiplies it (1.0 for the paper)."""
    transformer_factor(1, d_model, warmup_steps)  # validate now
    return _lambda_lr(optimizer, lambda s: transformer_factor(s, d_model, warmup_steps))


def constant_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int = 0) -> LambdaLR:
    """Linear warm-up then a constant lr."""
    return _lambda_lr(optimizer, lambda s: min(1.0, s / warmup_steps) if warmup_steps > 0 else 1.0)


def build_schedule(optimizer: torch.optim.Optimizer, config: TrainerConfig, total_steps: int) -> LambdaLR:
    """The schedule named by ``config.schedule``, with ``config.warmup`` resolved against `total_steps`."""
    warmup = resolve_warmup(config.warmup, total_steps)
    if config.schedule == "linear":
        return linear_schedule(optimizer, warmup, total_steps)
    if config.schedule == "cosine":
        return cosine_schedule(optimizer, warmup, total_steps)
    if config.schedule == "inverse_sqrt":
        return inverse_sqrt_schedule(optimizer, warmup)
    if config.schedule == "transformer":
        return transformer_schedule(optimizer, config.d_model, warmup)
    if config.schedule == "constant":
        return constant_schedule(optimizer, warmup)
    raise ValueError(f"TrainerConfig.schedule: {config.schedule!r} is not a known schedule")
