"""Pre-training for the time a user gives it: what ``attnlab pretrain`` does without ``--paper``.

The papers' recipes are for weeks on accelerator pods: BERT-base at lr 1e-4 with 10k warm-up steps learns
nothing a user can see in an afternoon on a laptop, and sits on the MLM plateau (the most frequent token
predicted at every mask) for the whole run. A budget of minutes on a CPU rewards other choices, each
measured on the project's 2-core CPU (`experiments/pretrain_budget.py`; the figures are in its docstring):

- **a small model that takes many steps**: in 4 minutes, 2 layers of 128 take ~6,000 steps and reach 43%
  held-out MLM accuracy; 4 layers of 256 take a fifth as many and reach less (the cramming line of work,
  Geiping & Goldstein 2022; Izsak et al. 2021, makes the same point on GPUs);
- **short sequences packed without padding** (RoBERTa's FULL-SENTENCES, Liu et al. 2019, 4.2): 32 tokens
  in the shortest budgets, where attention's cost and the long-range context buy nothing yet;
- **pre-LN and no dropout** (Xiong et al. 2020: pre-LN trains stably at high learning rates without a long
  warm-up; dropout only slows a run that sees its data a few times);
- **a high learning rate, warmed up and decayed to zero inside the budget** (`run.replan_steps` keeps the
  schedule's end on the clock);
- **30% masking** (Wettig et al. 2023, "Should You Mask 15% in Masked Language Modeling?": more predictions
  per sequence, better downstream for the same compute); held-out accuracy is still measured at 15%;
- **a small vocabulary** trained on the corpus: fewer output rows to learn and every token seen often.

A `Budget` holds the sizes for runs up to ``minutes``; `for_budget` turns any paper's recipe into its budget
version, keeping the paper's objective and data format (BERT keeps NSP, ALBERT SOP, SpanBERT SBO, ELECTRA
replaced-token detection): the size and optimisation change, not the idea. The architecture changes
(pre-LN) are `MODEL_CHANGES`, applied to the chosen preset. ``attnlab pretrain --paper`` runs the paper's
recipe instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attnlab.pretraining.recipes import LengthStage, Recipe

TRAIN_MASK_RATE = 0.3  # Wettig et al. 2023; evaluation stays at 15% (run.EVAL_MASK_RATE)
WARMUP_FRACTION = 0.05  # of the planned steps; pre-LN needs little (Xiong et al. 2020)
MODEL_CHANGES: dict[str, Any] = {"norm_first": True}  # pre-LN + a final LayerNorm (EncoderConfig field)


@dataclass(frozen=True)
class Budget:
    """The sizes of a run of up to ``minutes`` on a CPU."""

    minutes: float  # runs of up to this many minutes take this budget's sizes
    preset: str  # the model (attnlab.models.PRESETS), changed by MODEL_CHANGES
    max_length: int  # tokens per packed sequence
    batch_size: int  # sequences per optimizer step
    lr: float  # peak learning rate
    vocab_size: int  # size of a tokenizer trained on the corpus


# Chosen by measurement on 2 cores (experiments/pretrain_budget.py). Runs without a time budget (--max-steps
# alone) take the middle one.
BUDGETS: tuple[Budget, ...] = (
    Budget(minutes=10, preset="bert-tiny", max_length=32, batch_size=32, lr=2e-3, vocab_size=2048),
    Budget(minutes=60, preset="bert-mini", max_length=64, batch_size=32, lr=1e-3, vocab_size=8192),
    Budget(minutes=math.inf, preset="bert-small", max_length=128, batch_size=32, lr=1e-3, vocab_size=16384),
)


def budget_for(minutes: float | None) -> Budget:
    """The `Budget` for a run of ``minutes`` (None: no time budget, the middle one)."""
    if minutes is None:
        return BUDGETS[len(BUDGETS) // 2]
    return next(b for b in BUDGETS if minutes <= b.minutes)


def for_budget(
    recipe: Recipe,
    budget: Budget,
    *,
    max_steps: int = 1000,
    batch_size: int | None = None,
    max_length: int | None = None,
) -> Recipe:
    """``recipe`` (its objective, data format, tokenizer kind and masking strategy) at ``budget``'s sizes,
    with the changes listed in the module docstring. ``max_steps`` is a first plan; a time-budgeted run
    re-plans it from its measured step time. ``batch_size``/``max_length`` override the budget's."""
    length = max_length or budget.max_length
    return dataclasses.replace(
        recipe,
        stages=(LengthStage(length),),  # one length; predictions per sequence follow the rate
        masking=dataclasses.replace(recipe.masking, rate=TRAIN_MASK_RATE, max_predictions=None),
        static_masking=False,  # a new mask each epoch: a short corpus is seen many times
        dupe_factor=1,
        dropout=0.0,
        lr=budget.lr,
        warmup=WARMUP_FRACTION,
        max_steps=max_steps,
        batch_size=batch_size or budget.batch_size,
        vocab_size=budget.vocab_size,
    )
