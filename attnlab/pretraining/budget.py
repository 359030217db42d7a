"""Pre-training for the time a user gives it: what ``attnlab pretrain`` does without ``--paper``.

The papers' recipes are for weeks on accelerator pods: BERT-base at lr 1e-4 with 10k warm-up steps learns
nothing a user can see in an afternoon on a laptop, and sits on the MLM plateau (the most frequent token
predicted at every mask) for the whole run. A budget of minutes on a CPU rewards other choices. Measured on
the project's 2-core CPU on the built-in corpus (`experiments/pretrain_budget.py`; held-out MLM accuracy at
15% masking, unigram guess 4-5%):

- **a small model that takes many steps**: in 3.5 minutes 2 layers of 128 take ~6,300 steps and reach
  43.5%; the cramming line of work (Geiping & Goldstein 2022; Izsak et al. 2021) makes the same point;
- **short sequences packed without padding** (RoBERTa's FULL-SENTENCES, Liu et al. 2019, 4.2): length 64
  instead of 32 took a third of the steps and reached 30.1% in the same 3.5 minutes;
- **no NSP**: at 3,000 equal steps, SEGMENT-PAIR + NSP (BERT's recipe) 17.1%, FULL-SENTENCES 33.1% (so the
  command's default recipe is ``mlm``; a recipe that names NSP keeps it);
- **pre-LN and no dropout** (Xiong et al. 2020: pre-LN trains stably at high learning rates): post-LN 29.9%
  against 33.1% at 3,000 steps;
- **a high learning rate, warmed up and decayed to zero inside the budget** (`run.replan_steps` keeps the
  schedule's end on the clock): 2e-3; 3e-3 fell back to the plateau for longer (18.3% at 3,000 steps);
- **40% masking** (Wettig et al. 2023, "Should You Mask 15% in Masked Language Modeling?"): 15% 19.1%,
  30% 33.1%, 40% 35.5% at 3,000 steps; held-out accuracy is still measured at 15%;
- **a small vocabulary** trained on the corpus (2,048 tokens): fewer output rows and every token seen often.

The longer budget's size (bert-mini, 4 layers of 256) is chosen so that a model pre-trained for half an hour
or more has trained every position a fine-tuning task uses (128 tokens). Its lengths, measured for half an
hour on the Gutenberg books (bert-mini, one 5,156-token WordPiece trained on the books, held-out MLM accuracy
on the same 16,669 masked tokens of 128-token blocks, unigram guess 5.6%; 2026-11-27, the later sessions'
AVX2 machine at 1.3 s a 128-token step):

- 128 tokens throughout: 1,424 steps, 15.7% (perplexity 281; 22.8% at 1,775 steps on 11-26's faster
  machine): the run spends most of its budget on the MLM plateau (loss about 5.7 from step 400 to its end);
- **BERT's two stages**, 90% of the steps at 64 tokens and 10% at 128 (as BERT ran its first 90% at 128
  and the last 10% at 512, Devlin et al. 2019, appendix A.2): 2,465 steps, 23.0% (perplexity 113). The short
  steps leave the plateau near step 800 instead of 1,300, but the positions 64-127 enter at the end of the
  schedule, with the learning rate near zero: the 128-token loss jumps to 5.0 and stays there;
- the same with those positions started as copies of positions 0-63 (Longformer's start for positions its
  base model never had, Beltagy et al. 2020, section 5; ``Recipe.stage_positions="copy"``): 2,539 steps,
  **29.1%** (perplexity 57.9); the 128-token loss falls from 5.1 to 4.5 within the last stage.

So runs over 20 minutes take the third (`Budget.short_length`). For two hours, the same on the same books,
tokenizer and held-out tokens (2026-11-28, the machine otherwise idle): 9,718 steps in 112.9 minutes (the
plan keeps a reserve for the final evaluation), **42.2%** (perplexity 20.3), against 29.1% at 30 minutes; at
the end of its 64-token stage it stood at 28.6%. On the Intel Xeon of the later sessions (AVX-512, AMX; 0.24 s
a 64-token step, 0.55 s a 128-token one), the same command with its own 5,156-token tokenizer (2026-11-28,
`experiments/pretrain_then_finetune.py --pretrain-minutes 120 --output runs/ptf-120`): 21,023 steps in 110.5
minutes, **46.6%** (perplexity 14.8) on the same held-out tokens; fine-tuned (3 seeds, the experiment's
step budgets), SST-2 dev accuracy 78.5 and CoNLL-2003 dev F1 78.6, against 74.9 and 72.6 from the 30-minute
model and 71.8 and 57.4 from random initialisation. **bert-small** (4 layers of 512, the size this tier
had before it was measured), the same command with ``--preset bert-small`` on the same books, tokenizer and
held-out tokens (2026-11-28, a 2-core AMD EPYC with AVX2, nothing else running): 1.16 s a 64-token step and
2.6 s a 128-token one, so 5,380 steps in 119.2 minutes, **14.9%** (perplexity 304): its loss sat on the MLM
plateau (5.6-5.9 from step 400 to the end) for the whole two hours. bert-mini plans 16,142 steps there (0.36
and 0.76 s a step) and leaves the plateau within its first 1,300 (the runs above). So two hours is a bert-mini
too. The wider model was run at this tier's learning rate (1e-3) only; a lower one might leave the plateau,
but with a third of the steps. For this compute (22M tokens) the smaller model with more steps is also what
compute-optimal scaling (Hoffmann et al. 2022: about 20 tokens a parameter) points to.
`experiments/pretrain_then_finetune.py` measures what each budget buys downstream.

A `Budget` holds the sizes for runs up to ``minutes``; `for_budget` turns any paper's recipe into its budget
version, keeping the paper's objective and data format (BERT keeps NSP, ALBERT SOP and its architecture,
SpanBERT SBO, ELECTRA replaced-token detection): the size and optimisation change, not the idea. The
architecture changes (pre-LN) are `MODEL_CHANGES`, applied to the chosen preset. ``attnlab pretrain
--paper`` runs the paper's recipe instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attnlab.pretraining.recipes import LengthStage, Recipe

TRAIN_MASK_RATE = 0.4  # Wettig et al. 2023; evaluation stays at 15% (run.EVAL_MASK_RATE)
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
    Budget(minutes=math.inf, preset="bert-mini", max_length=128, batch_size=32, lr=1e-3, vocab_size=8192,
           short_length=64),
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
