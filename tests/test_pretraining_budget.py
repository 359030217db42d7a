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
from attnlab.pretraining.recipes import RECIPES
from attnlab.pretraining.run import replan_steps, size_warnings


def test_budget_tiers_grow_with_the_minutes():
    assert budget_for(4).preset == "bert-tiny" and budget_for(4).max_length == 32
    assert budget_for(20) is BUDGETS[0] and budget_for(20.01) is BUDGETS[1]
    assert budget_for(1e6) is BUDGETS[-1] and budget_for(None) is BUDGETS[1]
    assert [b.minutes for b in BUDGETS] == sorted(b.minutes for b in BUDGETS)


# the masked LMs (the causal LM, recipe gpt: tests/test_pretrain_gpt.py)
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


@pytest.mark.parametrize("preset", ["bert-tiny", "bert-mini", "albert-base"])
def test_albert_recipe_trains_an_albert_shaped_model_at_any_size(preset):
    from attnlab.models import get_preset
    from attnlab.pretraining.run import model_config

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
