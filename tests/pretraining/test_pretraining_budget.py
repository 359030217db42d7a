"""The budget recipe (`attnlab.pretraining.budget`), the unigram baseline, and the run's guards for budgets
and corpora too small to learn from."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_train_tiny import lm_trainer

from attnlab.pretraining.baselines import unigram_baseline
from attnlab.pretraining.budget import (
    BUDGETS,
    MODEL_CHANGES,
    TRAIN_MASK_RATE,
    budget_for,
    for_budget,
)
from attnlab.pretraining.plan import size_warnings
from attnlab.pretraining.recipes import RECIPES
from attnlab.train.budget import replan_steps


def test_budget_tiers_grow_with_the_minutes():
    assert budget_for(4).preset == "bert-tiny" and budget_for(4).max_length == 32
    assert budget_for(20) is BUDGETS[0] and budget_for(20.01) is BUDGETS[1]
    assert budget_for(1e6) is BUDGETS[-1] and budget_for(None) is BUDGETS[1]
    assert [b.minutes for b in BUDGETS] == sorted(b.minutes for b in BUDGETS)


def test_the_half_hour_budget_runs_two_length_stages():
    budget = budget_for(30)
    r = for_budget(RECIPES["mlm"], budget, max_steps=1000)
    assert [(s.max_length, s.fraction) for s in r.stages] == [(64, 0.9), (128, pytest.approx(0.1))]
    assert r.stage_ends() == [900, 1000] and r.stage_positions == "copy"
    assert [s.max_length for s in for_budget(RECIPES["mlm"], budget, max_length=96).stages] == [96]
    assert [s.max_length for s in for_budget(RECIPES["mlm"], budget_for(4)).stages] == [32]


# the masked LMs (the causal LM, recipe gpt: tests/pretraining/test_pretrain_gpt.py)
MASKED_LM_RECIPES = sorted(n for n, r in RECIPES.items() if r.objective != "clm")


@pytest.mark.parametrize("name", MASKED_LM_RECIPES)
def test_for_budget_keeps_the_papers_idea_and_changes_the_sizes(name):
    paper = RECIPES[name]
    budget = budget_for(4)
    r = for_budget(paper, budget, max_steps=500)
    # the paper's objective, data format, tokenizer kind and masking strategy stay
    for field in ("objective", "instance_format", "template", "tokenizer", "lowercase", "optimizer"):
        assert getattr(r, field) == getattr(paper, field), field
    assert r.masking.strategy == paper.masking.strategy
    assert r.masking.mask_prob == paper.masking.mask_prob
    # sizes and optimisation follow the budget
    assert [s.max_length for s in r.stages] == [budget.max_length] and r.stages[0].max_predictions is None
    assert (r.lr, r.batch_size, r.vocab_size, r.max_steps) == (budget.lr, budget.batch_size, 2048, 500)
    assert r.masking.rate == TRAIN_MASK_RATE and r.dropout == 0.0 and not r.static_masking
    assert r.dupe_factor == 1 and 0 < r.warmup < 1  # a fraction of the planned steps
    assert for_budget(paper, budget, batch_size=8, max_length=64).stages[0].max_length == 64


def test_model_changes_are_encoder_config_fields():
    from dataclasses import fields

    from attnlab.models import EncoderConfig

    assert set(MODEL_CHANGES) <= {f.name for f in fields(EncoderConfig)}


def test_unigram_baseline_counts_the_most_frequent_token_at_masked_positions():
    counts = np.array([0, 0, 5, 3, 2])  # ids 0, 1 special; 2 most frequent
    labels = torch.tensor([[-100, 2, 3, -100], [2, -100, 4, 2]])
    out = unigram_baseline(counts, [{"labels": labels}])
    assert out["unigram_accuracy"] == pytest.approx(3 / 5)
    p = (counts + 1) / (counts.sum() + counts.size)  # add-one smoothing
    nll = -(3 * math.log(p[2]) + math.log(p[3]) + math.log(p[4])) / 5
    assert out["unigram_perplexity"] == pytest.approx(math.exp(nll))
    assert unigram_baseline(counts, [{"labels": torch.full((2, 3), -100)}]) == {}


def test_size_warnings_name_the_numbers():
    assert size_warnings(10_000_000, 8000, 1_000_000) == []
    vocab, params = size_warnings(40_000, 8000, 1_000_000)
    assert "40,000 training tokens for a vocabulary of 8,000" in vocab and "at most 800" in vocab
    assert "1,000,000 parameters for 40,000 training tokens" in params


def test_replan_at_several_steps_follows_a_slower_machine(tmp_path):
    trainer = lm_trainer(tmp_path / "run", 40, save_every=0)
    # 1 s a step until step 20, then 2 s a step (another job took a core); 100 s of budget
    clock = lambda: float(min(trainer.step, 20) + 2 * max(0, trainer.step - 20))  # noqa: E731
    changes: list[int] = []
    callback = replan_steps(
        100.0, [10, 30], lambda t: changes.append(t.total_steps), lambda m: None, 0.0, clock
    )
    trainer.callbacks.append(callback)
    result = trainer.train()
    # at 10: 1 s a step, 90 s left -> 100 steps; at 30: 30 s for the 20 steps since step 10 (1.5 s a step),
    # 60 s left -> 30 + 40 = 70 steps (a single re-plan at 10 would have run out of time at step 60)
    assert changes == [100, 70] and result.step == 70


def test_a_schedule_in_length_stages_is_planned_on_each_stage_step_time(monkeypatch):
    """BERT's 90% of steps at 128 tokens and 10% at 512: the long steps cost more, and the plan counts them
    (timing the first stage alone planned every step as a short one, and the clock cut the run short)."""
    from attnlab.train import TrainerConfig, budget

    timed: list[int] = []

    def fake_time(model, optimizer, batches, accum, limit=None):  # 1 ms a token position
        timed.append(batches[0]["input_ids"].size(1))
        return 0.001 * batches[0]["input_ids"].size(1)

    class Batches:  # what estimate_step_time reads of a loader
        def __init__(self, length):
            self.length = length

        def iter_epoch(self, epoch=0):
            for _ in range(10):
                yield {"input_ids": torch.zeros(2, self.length, dtype=torch.long)}

    monkeypatch.setattr(budget, "_time_steps", fake_time)
    model, cfg = torch.nn.Linear(2, 2), TrainerConfig(device="cpu", max_steps=10)
    one = budget.estimate_stage_steps(model, [Batches(128)], [1.0], cfg, 100.0, log=lambda m: None)
    logged: list[str] = []
    two = budget.estimate_stage_steps(
        model, [Batches(128), Batches(512)], [0.9, 0.1], cfg, 100.0, log=logged.append
    )
    assert one[0] == int(0.9 * 100.0 / 0.128) == 703 and one[1] == [0.128]
    assert two[0] == int(0.9 * 100.0 / (0.9 * 0.128 + 0.1 * 0.512)) == 540  # 0.1664 s a step on average
    assert 512 in timed and "0.128, 0.512" in logged[-1]
    # the plan fits the budget: 90% of the steps at 0.128 s and 10% at 0.512 s take 0.9 x 100 s at most
    assert round(0.9 * two[0]) * 0.128 + round(0.1 * two[0]) * 0.512 <= 90.0 + 1e-9
    assert budget.estimate_steps(model, Batches(128), cfg, 100.0, log=lambda m: None) == one[0]


def _two_stages(fractions=(0.5, 0.5)):
    """A recipe of two length stages and its `StagePlan` with the second stage's steps 3x the first's."""
    from attnlab.train.budget import StagePlan

    recipe = RECIPES["bert"].override(stages=[{"max_length": 16, "fraction": fractions[0]},
                                             {"max_length": 64, "fraction": fractions[1]}])  # fmt: skip
    return recipe, StagePlan(fractions, (1.0, 3.0), recipe.stage_ends)


def test_stage_plan_solves_for_the_steps_that_fit():
    recipe, plan = _two_stages()
    assert plan.ends(100) == [50, 100] and plan.stage_of(50, 100) == 0 and plan.stage_of(51, 100) == 1
    # at step 10 of stage 0, 2 s a step, 180 s left: N x (0.5 + 0.5 x 3) = 10 + 90 -> N = 50
    assert plan.steps_that_fit(0, 10, 180.0, 2.0) == 50
    # in the last stage only its own rest counts: N x 1.0 = 60 + 40 / 6
    assert plan.steps_that_fit(1, 60, 40.0, 6.0) == 66


def test_replan_in_a_stage_moves_the_schedule_and_the_stage_end(tmp_path):
    """BERT-like stages (half the steps at 3x the cost), a machine twice as slow as the estimate: the re-plan
    at step 10 shrinks the whole schedule to what fits and stops this stage at its new end."""
    _, plan = _two_stages()
    trainer = lm_trainer(tmp_path / "run", 100, save_every=0)
    trainer.total_steps = 50  # the first stage of a 100-step schedule, as pretraining.stages builds it
    now = {"clock": lambda: 2.0 * trainer.step}  # 2 s a step in the first stage
    changes: list[tuple[int, int]] = []
    callback = replan_steps(
        200.0, [10, 20, 30, 40], lambda t: changes.append((t.config.max_steps, t.total_steps)),
        lambda m: None, 0.0, lambda: now["clock"](), stages=plan,
    )  # fmt: skip
    trainer.callbacks.append(callback)
    result = trainer.train()
    # 200 s: 20 spent at step 10; the rest of stage 0 at 2 s and stage 1 at 6 s -> N = 50, stage 0 ends at 25
    # (15 x 2 + 25 x 6 = 180 s); at step 20 the plan holds and nothing changes
    assert changes == [(50, 25)] and result.step == 25
    # the learning rate is where a schedule planned for 50 steps from the start has it after 25
    from attnlab.train.schedules import build_schedule

    fresh = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=trainer.config.lr)
    reference = build_schedule(fresh, trainer.config, 50)
    for _ in range(25):
        fresh.step()
        reference.step()
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(reference.get_last_lr()[0], rel=1e-9)
    assert 0 < reference.get_last_lr()[0] < trainer.config.lr  # mid-decay: a real check

    # the second stage, 6 s a step as planned, with the same callback. The window 11..30 spans both stages
    # (3 s a step on average): used, it would re-plan to 70 steps; it is skipped. The window 31..40 is the
    # second stage's alone, and the plan holds.
    second = lm_trainer(tmp_path / "run2", 50, save_every=0)
    second.step = 25
    now["clock"] = lambda: 50.0 + 6.0 * (second.step - 25)
    second.callbacks.append(callback)
    assert second.train().step == 50 and changes == [(50, 25)]


@pytest.mark.parametrize("preset", ["bert-tiny", "bert-mini", "albert-base"])
def test_albert_recipe_trains_an_albert_shaped_model_at_any_size(preset):
    from attnlab.models import get_preset
    from attnlab.pretraining.model import model_config

    class Tok:  # what model_config reads of a tokenizer
        def get_vocab_size(self):
            return 100

        def token_to_id(self, token):
            return {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}.get(token)

        def id_to_token(self, i):
            return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"][i] if i < 5 else f"w{i}"

    albert = for_budget(RECIPES["albert"], budget_for(4))
    config = model_config(albert, preset, Tok())
    hidden = get_preset(preset).hidden_size
    assert config.sharing == "all" and config.embedding_size == min(128, hidden // 2) < hidden
    bert = model_config(for_budget(RECIPES["bert"], budget_for(4)), preset, Tok())
    assert bert.sharing == get_preset(preset).sharing  # other recipes keep the preset's architecture
