"""Learning-rate schedules at known steps, through LambdaLR as the optimizer sees them."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.train import TrainerConfig, build_schedule, resolve_warmup
from attnlab.train.schedules import (
    constant_schedule,
    cosine_schedule,
    inverse_sqrt_schedule,
    linear_schedule,
    transformer_factor,
    transformer_schedule,
)


def _lrs(make, n_steps: int, lr: float = 1.0) -> list[float]:
    """lr used by updates 1..n_steps (read before each optimizer.step)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = make(opt)
    out = []
    for _ in range(n_steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_linear_warmup_then_decay_at_known_steps() -> None:
    lrs = _lrs(lambda o: linear_schedule(o, warmup_steps=4, total_steps=11), 11, lr=1e-4)
    # warm-up over updates 1-4, then 8 equal decrements reaching 0 one update after the last (update 11)
    expected = [1e-4 * f for f in (0.25, 0.5, 0.75, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8)]
    assert lrs == pytest.approx(expected, rel=1e-12, abs=1e-20)
    assert max(lrs) == pytest.approx(1e-4) and lrs.index(max(lrs)) == 3  # peak on update 4 = warm-up


def test_linear_without_warmup_decays_from_the_first_update() -> None:
    # the peak sits at "update 0"; 4 equal decrements of 1/5 leave update 4 with 0.2, never 0
    assert _lrs(lambda o: linear_schedule(o, 0, 4), 4) == pytest.approx([0.8, 0.6, 0.4, 0.2])


def test_cosine_warmup_then_half_a_cosine_at_known_steps() -> None:
    lrs = _lrs(lambda o: cosine_schedule(o, warmup_steps=2, total_steps=9), 9)
    # warm-up over updates 1-2, then the linear schedule's progress k / 8 (k = 1..7) through half a cosine
    expected = [0.5, 1.0] + [0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(1, 8)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[5] == pytest.approx(0.5)  # halfway (k = 4 of 8)
    assert 0 < lrs[-1] < 0.05  # the last update still moves
    config = TrainerConfig(max_steps=9, schedule="cosine", warmup=2, output_dir=".")
    assert _lrs(lambda o: build_schedule(o, config, 9), 9) == pytest.approx(expected, rel=1e-12)


def test_inverse_sqrt_at_known_steps() -> None:
    lrs = _lrs(lambda o: inverse_sqrt_schedule(o, warmup_steps=4), 16)
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[8 - 1] == pytest.approx(math.sqrt(4 / 8))
    assert lrs[16 - 1] == pytest.approx(0.5)
    no_warmup = _lrs(lambda o: inverse_sqrt_schedule(o, 0), 4)
    assert no_warmup == pytest.approx([1, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5])


def test_transformer_schedule_formula_and_peak_at_warmup() -> None:
    d, w = 512, 4000
    # Vaswani et al. 2017, eq. (3)
    assert transformer_factor(1, d, w) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert transformer_factor(100, d, w) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)
    assert transformer_factor(16000, d, w) == pytest.approx(512**-0.5 * 16000**-0.5)
    values = [transformer_factor(s, d, w) for s in range(1, 20001)]
    assert values.index(max(values)) + 1 == 4000
    assert max(values) == pytest.approx((512 * 4000) ** -0.5)  # 6.99e-4
    assert max(values) == pytest.approx(6.9877e-4, rel=1e-4)


def test_transformer_schedule_through_lambdalr() -> None:
    lrs = _lrs(lambda o: transformer_schedule(o, d_model=16, warmup_steps=4), 8)
    assert lrs == pytest.approx([transformer_factor(s, 16, 4) for s in range(1, 9)])
    assert lrs.index(max(lrs)) == 3
    with pytest.raises(ValueError, match="warmup_steps"):
        transformer_factor(1, 16, 0)


def test_constant_with_warmup() -> None:
    assert _lrs(lambda o: constant_schedule(o, 2), 4) == pytest.approx([0.5, 1, 1, 1])


def test_warmup_as_steps_or_fraction() -> None:
    assert resolve_warmup(0.1, 1000) == 100
    assert resolve_warmup(0.0, 1000) == 0
    assert resolve_warmup(400, 1000) == 400
    assert resolve_warmup(4000.0, 100000) == 4000
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="warmup"):
            resolve_warmup(bad, 1000)


@pytest.mark.parametrize("name", ["linear", "inverse_sqrt", "transformer", "constant"])
def test_build_schedule_from_config(name: str) -> None:
    cfg = TrainerConfig(max_steps=20, schedule=name, warmup=0.25, d_model=64, lr=1.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    sched = build_schedule(opt, cfg, 20)
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs.index(max(lrs)) == 4, lrs  # warm-up = 0.25 * 20 = 5 steps: the peak is update 5


def test_linear_schedule_rejects_warmup_past_total() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        linear_schedule(opt, 10, 5)


def test_transformer_schedule_needs_d_model() -> None:
    with pytest.raises(ValueError, match="d_model"):
        TrainerConfig(max_steps=10, schedule="transformer")
