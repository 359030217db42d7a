"""Pre-training for the time a user gives it: what ``attnlab pretrain`` does without ``--paper``.

A `Budget` holds the sizes for runs up to ``minutes``; `for_budget` turns any paper's recipe into its budget
version, keeping the paper's objective and data format (BERT keeps NSP, ALBERT SOP and its architecture,
SpanBERT SBO, ELECTRA replaced-token detection): the size and optimisation change, not the idea. The
architecture changes (pre-LN) are `MODEL_CHANGES`, applied to the chosen preset. ``attnlab pretrain
--paper`` runs the paper's recipe instead.

Measured by `experiments/pretrain_budget.py` (the figures and their machines: docs/pretraining_budget.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attnlab.pretraining.recipes import LengthStage, Recipe

TRAIN_MASK_RATE = 0.4  # Wettig et al. 2023; evaluation stays at 15% (inputs.EVAL_MASK_RATE)
WARMUP_FRACTION = 0.05  # of the planned steps; pre-LN needs little (Xiong et al. 2020)
MODEL_CHANGES: dict[str, Any] = {"norm_first": True}  # pre-LN + a final LayerNorm (EncoderConfig field)
SHORT_FRACTION = 0.9  # of the steps at a budget's short_length (BERT: 90% at 128, 10% at 512)


@dataclass(frozen=True)
class Budget:
    """The sizes of a run of up to ``minutes`` on a CPU."""

    minutes: float  # runs of up to this many minutes take this budget's sizes
    preset: str  # the model (attnlab.models.PRESETS), changed by MODEL_CHANGES
    max_length: int  # tokens per packed sequence (of the last length stage)
    batch_size: int  # sequences per optimizer step
    lr: float  # peak learning rate
    vocab_size: int  # size of a tokenizer trained on the corpus
    short_length: int | None = None  # BERT's two stages: SHORT_FRACTION of the steps at this length first

    def stages(self, max_length: int | None = None) -> tuple[LengthStage, ...]:
        """The length stages: ``short_length`` then ``max_length``, or one stage (of ``max_length`` when
        given: a user's length replaces the budget's schedule)."""
        if max_length is not None or self.short_length is None:
            return (LengthStage(max_length or self.max_length),)
        short, rest = SHORT_FRACTION, 1 - SHORT_FRACTION
        return (LengthStage(self.short_length, short), LengthStage(self.max_length, rest))


# Chosen by measurement on 2 cores (experiments/pretrain_budget.py for the first; the module docstring for the
# second, at 30 and 120 minutes). Runs without a time budget (--max-steps alone) take the second.
BUDGETS: tuple[Budget, ...] = (
    Budget(minutes=20, preset="bert-tiny", max_length=32, batch_size=32, lr=2e-3, vocab_size=2048),
    Budget(
        minutes=math.inf,
        preset="bert-mini",
        max_length=128,
        batch_size=32,
        lr=1e-3,
        vocab_size=8192,
        short_length=64,
    ),
)


# Causal LMs (the ``gpt`` recipe). Up to 20 minutes: nanoGPT's CPU-sized Tiny Shakespeare model (4 x 128,
# context 64, batch 12, lr 1e-3: 1.9 nats/char after 2,000 steps, about 3 minutes here; experiments/
# gpt_tinyshakespeare.py) with a 2,048-token BPE (or the characters); longer: the 6 x 384 gpt-bpe-small model
# at context 256 and lr 6e-4 (GPT-2 small's 6e-4, Radford et al. 2019 via nanoGPT's reproduction). Dropout 0:
# a budget of minutes sees the corpus too few times to overfit it. Not yet measured against other sizes.
GPT_BUDGETS: tuple[Budget, ...] = (
    Budget(minutes=20, preset="gpt-char-tiny", max_length=64, batch_size=12, lr=1e-3, vocab_size=2048),
    Budget(minutes=math.inf, preset="gpt-bpe-small", max_length=256, batch_size=12, lr=6e-4, vocab_size=8192),
)


# Transformer-XL (the ``transfo-xl`` recipe): experiments/transformer_xl.py's miniature, GPT's tiny model with
# the paper's two ideas (4 x 128, segments of 64, memory 64, batch 16 streams, lr 1e-3, AdamW betas
# (0.9, 0.99), weight decay 0.1, clipping 1.0): 2.37 bpc on Tiny Shakespeare after 2,000 steps against GPT's
# 2.63 at the same segments and steps. One size for every budget: larger ones are not yet measured.
XL_BUDGETS: tuple[Budget, ...] = (
    Budget(minutes=math.inf, preset="transfo-xl-char-tiny", max_length=64, batch_size=16, lr=1e-3,
           vocab_size=2048),
)  # fmt: skip


def budget_for(minutes: float | None, objective: str = "mlm", *, recurrent: bool = False) -> Budget:
    """The `Budget` for a run of ``minutes`` (None: no time budget, the second one; a causal LM: the small
    one) of a recipe with ``objective`` (``recurrent``: with segment recurrence, Transformer-XL)."""
    if recurrent:
        return next(b for b in XL_BUDGETS if minutes is None or minutes <= b.minutes)
    budgets = GPT_BUDGETS if objective == "clm" else BUDGETS
    if minutes is None:
        return budgets[0] if objective == "clm" else budgets[len(budgets) // 2]
    return next(b for b in budgets if minutes <= b.minutes)


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
    if recipe.objective == "clm":  # no masking; a causal LM keeps the recipe's tokenizer kind
        return dataclasses.replace(
            recipe,
            stages=(LengthStage(length),),
            dropout=0.0,
            lr=budget.lr,
            betas=(0.9, 0.99),  # nanoGPT's for small models that see few tokens per step
            weight_decay=0.1,
            clip_norm=1.0,  # nanoGPT's (the gpt recipe's already; Transformer-XL's paper clips at 0.25)
            warmup=WARMUP_FRACTION,
            max_steps=max_steps,
            batch_size=batch_size or budget.batch_size,
            vocab_size=budget.vocab_size,
        )
    return dataclasses.replace(
        recipe,
        stages=budget.stages(max_length),  # predictions per sequence follow the rate
        stage_positions="copy",  # a longer stage's new positions start from the trained ones
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
