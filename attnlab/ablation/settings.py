"""The lab's settings: where its runs and data live, the seeds, the device, and the sizes it trains at.

The same defaults apply to every table: three seeds (each pre-training seed also seeds its fine-tuning and
probes), and the standard budgets below, chosen before any table's result was seen so that each table's
default fits an hour on 2 CPU cores. A `LabSize` per device: on a CPU the 20-minute tier of
`attnlab.pretraining.budget` (bert-tiny, 32 tokens, a 2,048-token WordPiece) and for translation a 2-layer
Transformer of width 128 on batches of 1,024 tokens; on a GPU the tier above it (bert-mini, 64 then 128
tokens, 8,192 tokens) and the 3-layer ``transformer-cpu`` preset on 4,096-token batches, with the standard
budgets unchanged.

The CPU's translation size was chosen again, on the base row's training loss, after the first one never
left its start in a run's minutes (docs/ablations.md says how and with which figures).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnlab.ablation.table import frozen
from attnlab.cpu import cpu_model
from attnlab.pretraining.budget import budget_for

DEFAULT_SEEDS = (0, 1, 2)


TRANSLATION_FIELDS = ("translate_preset", "translate_overrides", "translate_max_tokens", "bleu_sentences")


@dataclass(frozen=True)
class LabSize:
    """The model sizes and standard per-run budgets of the lab on one kind of device."""

    name: str
    budget_minutes: float  # picks the attnlab.pretraining.budget tier (its preset, length, batch, lr)
    pretrain_minutes: float  # a pre-training (distillation, translation) run's standard budget
    translate_preset: str
    translate_overrides: Mapping[str, Any] = field(default_factory=frozen)
    translate_max_tokens: int = 4096  # tokens a translation batch holds (source and target)
    feature_examples: int = 2000  # training examples of a frozen-feature probe (pairs: all examples)
    finetune_examples: int = 8000  # training examples of a fine-tuning probe
    finetune_lr: float = 1e-3  # chosen on held-out training examples in experiments/pretrain_then_finetune.py
    bleu_sentences: int = 1014  # Multi30k val sentences decoded (greedy) for BLEU

    def __post_init__(self) -> None:
        object.__setattr__(self, "translate_overrides", frozen(self.translate_overrides))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "budget_minutes": self.budget_minutes,
                "translate_preset": self.translate_preset,
                "translate_overrides": dict(self.translate_overrides),
                "translate_max_tokens": self.translate_max_tokens,
                "feature_examples": self.feature_examples, "finetune_examples": self.finetune_examples,
                "finetune_lr": self.finetune_lr, "bleu_sentences": self.bleu_sentences}  # fmt: skip

    def describe(self) -> str:
        """The sizes in words, for the tables' outputs."""
        b = budget_for(self.budget_minutes, "mlm")
        changes = ", ".join(f"{k}={v}" for k, v in self.translate_overrides.items())
        return (f"{b.preset}, {b.max_length} tokens, a WordPiece of {b.vocab_size:,} tokens; translation "
                f"{self.translate_preset}{f' ({changes})' if changes else ''} on "
                f"{self.translate_max_tokens:,}-token batches")  # fmt: skip

    def encoder_fields(self) -> dict[str, Any]:
        """What decides an encoder's runs (pre-training, distillation, probes): all but the translation's,
        so that a change to the translation sizes leaves those runs' keys as they were."""
        return {k: v for k, v in self.to_dict().items() if k not in TRANSLATION_FIELDS}

    def translation_fields(self) -> dict[str, Any]:
        """What decides a translation run, besides its row's overrides and minutes."""
        return {"name": self.name, **{k: v for k, v in self.to_dict().items() if k in TRANSLATION_FIELDS}}


SIZES: dict[str, LabSize] = {
    "cpu": LabSize("cpu", budget_minutes=20.0, pretrain_minutes=1.7, translate_preset="transformer-cpu",
                   translate_overrides={"num_layers": 2, "d_model": 128, "d_ff": 512},
                   translate_max_tokens=1024),
    "cuda": LabSize("cuda", budget_minutes=120.0, pretrain_minutes=1.7,
                    translate_preset="transformer-cpu"),
}  # fmt: skip


def size_for(device: str) -> LabSize:
    """The lab's sizes for ``device`` ("cpu", "cuda", "cuda:N", "auto": CUDA when available)."""
    kind = device.split(":")[0]
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind not in SIZES:
        raise ValueError(f"--device: expected cpu, cuda, cuda:N or auto, got {device!r}")
    return SIZES[kind]


def hardware(device: str) -> str:
    """The machine that ``device`` names, in words: the GPU's name, or the CPU's model and cores."""
    if size_for(device).name == "cuda":
        index = int(device.split(":")[1]) if ":" in device else 0
        return torch.cuda.get_device_name(index)
    return f"{cpu_model()} ({os.cpu_count()} cores)"


@dataclass(frozen=True)
class LabSettings:
    """One ``attnlab ablate`` invocation's settings (everything but the table)."""

    output: Path
    data_dir: Path  # the shared data: glue/SST-2, conll2003, multi30k
    corpus: tuple[str, ...] = ()  # pre-training corpus files; empty: the built-in stdlib docstrings
    corpus_format: str = "sentences"
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    device: str = "cpu"
    minutes: float | None = None  # the table's budget; None: the standard per-run budgets
    size: LabSize = SIZES["cpu"]
    scale: float = 1.0  # multiplies every standard budget (the tests' tiny runs)
