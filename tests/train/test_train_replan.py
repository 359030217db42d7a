"""Changing a run's length mid-way: Trainer.set_total_steps and the time-budget re-plan of pretrain."""

from __future__ import annotations

import pytest
from test_train_tiny import lm_trainer

from attnlab.train.budget import replan_steps
from attnlab.train.schedules import linear_warmup_decay_factor


def test_set_total_steps_continues_the_schedule_a_longer_plan_would_follow(tmp_path) -> None:
    # planned 20 steps with 10% warm-up (2 steps); at step 6 the plan becomes 30 steps
    trainer = lm_trainer(tmp_path / "run", 20, warmup=0.1, schedule="linear", save_every=0, log_every=1)
    peak = trainer.config.lr
    lrs: dict[int, float] = {}

    def watch(t, record) -> None:
        lrs[record["step"]] = record["lr"]
        if record["step"] == 6:
            t.set_total_steps(30)

    trainer.callbacks.append(watch)
    result = trainer.train()
    assert result.step == 30 and trainer.total_steps == 30 and trainer.config.max_steps == 30
    assert trainer.config.warmup == 2  # kept in absolute steps, not 10% of the new length
    for step, lr in lrs.items():
        total = 20 if step <= 6 else 30
        assert lr == pytest.approx(peak * linear_warmup_decay_factor(step, 2, total), rel=1e-9), step
    assert lrs[30] > 0 and trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_set_total_steps_below_the_steps_done_is_an_error(tmp_path) -> None:
    trainer = lm_trainer(tmp_path / "run", 8, save_every=0)
    trainer.callbacks.append(lambda t, r: t.set_total_steps(2) if r["step"] == 3 else None)
    with pytest.raises(ValueError, match="below the 3 steps already done"):
        trainer.train()
    with pytest.raises(ValueError, match=r"stop_at \(9\) is beyond total_steps \(8\)"):
        trainer.set_total_steps(8, stop_at=9)


def test_replan_measures_the_step_time_and_moves_the_end(tmp_path) -> None:
    trainer = lm_trainer(tmp_path / "run", 40, save_every=0)
    # a fake clock: every optimizer step takes 1 s; 100 s of budget from time 0
    callback = replan_steps(
        deadline=100.0, at_step=10, on_change=lambda t: changes.append(t.total_steps), log=lambda m: None,
        clock=lambda: float(trainer.step),
    )  # fmt: skip
    changes: list[int] = []
    trainer.callbacks.append(callback)
    result = trainer.train()
    # at step 10, 90 s are left at 1 s a step, 5% kept in reserve: 10 + 85 steps
    assert changes == [95] and result.step == 95


def test_replan_leaves_a_good_plan_alone(tmp_path) -> None:
    trainer = lm_trainer(tmp_path / "run", 40, save_every=0)
    changes: list[int] = []
    trainer.callbacks.append(
        replan_steps(
            42.0,
            10,
            lambda t: changes.append(t.total_steps),
            lambda m: None,
            clock=lambda: float(trainer.step),
        )
    )
    assert trainer.train().step == 40 and changes == []  # 10 + 0.95 * 32 = 40: within 2%
