"""Time-budget planning shared by pretraining, translation and ELMo (`attnlab.train.budget`): warm-ups that
scale to the steps that fit, and a timed probe bounded by the budget."""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch
from test_train_tiny import lm_trainer

from attnlab.pretraining.elmo import _plan_from_step_time
from attnlab.pretraining.recipes import RECIPES
from attnlab.train.budget import _time_steps, fit_warmup, scaled_warmup


def test_a_warm_up_that_fits_is_kept_and_a_longer_one_keeps_its_share():
    assert scaled_warmup(40, 2000, 500) == 40
    assert scaled_warmup(40, 2000, 40) == 40  # a schedule may end its warm-up on its last step
    assert scaled_warmup(10_000, 1_000_000, 300) == 3  # BERT's 1% of the paper's schedule
    assert scaled_warmup(40, 2000, 21) == 0  # ELMo's 2% of 21 steps
    assert scaled_warmup(900, 1000, 10) == 5  # at most half of a short plan


def test_fit_warmup_lets_a_short_replan_keep_a_decaying_schedule(tmp_path):
    """ELMo at --minutes 0.3: its 40 warm-up steps of a 2,000-step plan, re-planned to 21 steps, failed with
    "linear schedule: need 0 <= warmup_steps (40) <= total_steps (21)"."""
    trainer = lm_trainer(tmp_path, 2000, warmup=40, schedule="linear")
    trainer.step = 20
    logged: list[str] = []
    fit_warmup(trainer, 21, logged.append)
    trainer.set_total_steps(21)
    assert trainer.config.warmup == 0 and trainer.config.max_steps == 21
    assert logged and "warm-up 0 steps" in logged[0]


def test_elmo_replan_scales_the_warm_up_and_warns_once_of_too_few_steps(tmp_path, monkeypatch):
    from attnlab.pretraining import elmo

    clock = {"now": 0.0}
    monkeypatch.setattr(elmo, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    trainer = lm_trainer(tmp_path, 2000, warmup=0.02, schedule="linear")
    logged: list[str] = []
    callback = _plan_from_step_time(18.0, logged.append)  # 0.3 minutes at 1 s a step
    for step in (1, 20):
        trainer.step, clock["now"] = step, float(step)
        callback(trainer, {})
    assert trainer.config.max_steps == 21 and trainer.config.warmup == 0
    assert sum("too few" in line for line in logged) == 1


class _Slow(torch.nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.w, self.seconds = torch.nn.Parameter(torch.ones(1)), seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return SimpleNamespace(loss=(self.w * x).sum())


def test_the_timed_probe_stops_at_its_limit():
    model = _Slow(0.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [{"x": torch.ones(2)} for _ in range(20)]
    t0 = time.perf_counter()
    per_step = _time_steps(model, optimizer, batches, 1, limit=0.01)
    assert time.perf_counter() - t0 < 0.5  # one step, not twenty
    assert per_step >= 0.05  # the untimed first step stands in for the median


def test_a_paper_recipe_planned_for_a_short_budget_scales_its_warm_up(monkeypatch):
    """--recipe bert --paper --minutes 0.3: BERT's 10,000 warm-up steps do not fit in the few steps that do;
    the run keeps the paper's proportion instead of failing after the probe."""
    from attnlab.pretraining import plan as plan_module
    from attnlab.train.distributed import DistributedContext

    monkeypatch.setattr(plan_module, "estimate_stage_steps", lambda *a, **k: (30, [0.5] * len(a[1])))
    recipe = RECIPES["bert"]
    tconfig = recipe.trainer_config(output_dir=".")
    inputs = SimpleNamespace(train_loader=lambda k: None)
    logged: list[str] = []
    plan = plan_module.plan_run(
        recipe, torch.nn.Linear(1, 1), inputs, tconfig, DistributedContext(), previous={}, minutes=0.3,
        auto_steps=True, started=time.monotonic(), log=logged.append,
    )  # fmt: skip
    assert plan.recipe.max_steps == 30 and plan.warmup == round(30 * 10_000 / recipe.max_steps)
    assert plan.too_few_steps and sum("too few" in line for line in logged) == 1
    assert not any("--max-steps" in line for line in logged)


def test_a_later_stage_left_no_probe_time_is_priced_not_timed(monkeypatch):
    from attnlab.train import TrainerConfig, budget

    timed: list[int] = []

    def fake_time(model, optimizer, batches, accum, limit=None):
        timed.append(batches[0]["input_ids"].size(1))
        return 0.001 * batches[0]["input_ids"].size(1)

    class Batches:
        def __init__(self, length):
            self.length = length

        def iter_epoch(self, epoch=0):
            for _ in range(3):
                yield {"input_ids": torch.zeros(2, self.length, dtype=torch.long)}

    monkeypatch.setattr(budget, "_time_steps", fake_time)
    monkeypatch.setattr(budget, "check_step_fits", lambda *a, **k: None)  # a budget of 0 s fits no step
    cfg = TrainerConfig(device="cpu", max_steps=10)
    logged: list[str] = []
    steps, costs = budget.estimate_stage_steps(
        torch.nn.Linear(2, 2), [Batches(128), Batches(512)], [0.9, 0.1], cfg, 0.0, log=logged.append,
        lengths=[128, 512],
    )  # fmt: skip
    assert 512 not in timed and costs == [0.128, 0.512]
    assert any("no time left to time length 512" in line for line in logged)
