"""An ablation table as data: rows that are configurations of the existing recipes, the probes that score
them, and the paper's numbers with the paper and table named.

A `Row`'s `RunConfig` says which run trains its model (a pre-training recipe with overrides, a
distillation, a translation model) and how it differs from its neighbours; no row has code of its own.
`Table.expected_orderings` derives from the paper's numbers every pair of rows the paper ranks, for each
probe that stands in for one of the paper's columns; `attnlab.ablation.stats` then judges each against the
measured rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

RUN_KINDS = ("pretrain", "distill", "translate")
READOUTS = ("linear", "bilstm")  # what a row's frozen-feature probes train (attnlab.ablation.classifiers)


def frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A read-only mapping, so that a table's definition cannot change after it is made."""
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Probe:
    """A score of a trained row, fixed per table before any result is seen."""

    name: str
    label: str  # what the output tables print
    source: str  # "pretrain" (the run's own held-out figure), "features" (a frozen-feature probe),
    #              "finetune" (a fine-tuning run), "translate" (BLEU of a translation run)
    metric: str  # the key read from the probe's result
    higher_is_better: bool = True
    weight: float = 0.0  # share of a pre-training run's budget it costs (fine-tuning); 0: a fixed small cost


PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        Probe("mlm_accuracy", "held-out MLM accuracy", "pretrain", "mlm_accuracy"),
        Probe(
            "mlm_perplexity", "held-out MLM perplexity", "pretrain", "mlm_perplexity", higher_is_better=False
        ),
        Probe("sst2_features", "SST-2 frozen-feature accuracy", "features", "accuracy"),
        Probe("conll_features", "CoNLL-2003 frozen-feature F1", "features", "f1"),
        Probe("nsp_features", "NSP frozen-feature accuracy", "features", "accuracy"),
        Probe("sop_features", "SOP frozen-feature accuracy", "features", "accuracy"),
        Probe("sst2_finetune", "SST-2 fine-tuned accuracy", "finetune", "accuracy", weight=0.25),
        Probe("conll_finetune", "CoNLL-2003 fine-tuned F1", "finetune", "f1", weight=0.25),
        Probe("squad_finetune", "SQuAD v1.1 fine-tuned F1", "finetune", "f1", weight=0.5),
        Probe("bleu", "Multi30k val BLEU (greedy)", "translate", "bleu"),
        Probe(
            "translate_perplexity",
            "Multi30k val perplexity",
            "translate",
            "perplexity",
            higher_is_better=False,
        ),
    )
}


@dataclass(frozen=True)
class RunConfig:
    """The run that trains a row's model, as a configuration of shared code.

    ``kind`` "pretrain": ``recipe`` (attnlab.pretraining.recipes) at the lab's budget sizes, then
    ``recipe_overrides`` (Recipe.override: masking as a dict, instance_format, static_masking, ...) and
    ``model_overrides`` (EncoderConfig fields). "distill": a DistilBERT student of the lab's teacher
    (``recipe`` pre-trained as a row of its own) with ``distill`` (DistillationConfig fields and
    ``random_init``). "translate": the Transformer on Multi30k with ``model_overrides`` (Seq2SeqConfig
    fields). ``budget_share`` scales the run's time budget (BERT's Figure 5: fewer steps)."""

    kind: str = "pretrain"
    recipe: str = "bert"
    recipe_overrides: Mapping[str, Any] = field(default_factory=frozen)
    model_overrides: Mapping[str, Any] = field(default_factory=frozen)
    distill: Mapping[str, Any] = field(default_factory=frozen)
    budget_share: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in RUN_KINDS:
            raise ValueError(f"RunConfig.kind: expected one of {', '.join(RUN_KINDS)}, got {self.kind!r}")
        if not 0.0 < self.budget_share <= 1.0:
            raise ValueError(
                f"RunConfig.budget_share: expected a number in (0, 1], got {self.budget_share!r}"
            )
        for name in ("recipe_overrides", "model_overrides", "distill"):
            object.__setattr__(self, name, frozen(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "recipe": self.recipe, "recipe_overrides": dict(self.recipe_overrides),
            "model_overrides": dict(self.model_overrides), "distill": dict(self.distill),
            "budget_share": self.budget_share,
        }  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One line of a table: its name as the paper prints it, its run, the paper's numbers by column, and
    the classifier its frozen-feature probes train on the features (`attnlab.ablation.classifiers`:
    "linear", or "bilstm" for BERT Table 5's BiLSTM on top of the left-to-right model)."""

    name: str
    run: RunConfig
    paper: Mapping[str, float] = field(default_factory=frozen)
    readout: str = "linear"

    def __post_init__(self) -> None:
        object.__setattr__(self, "paper", frozen(self.paper))
        if self.readout not in READOUTS:
            raise ValueError(f"row {self.name!r}: readout: expected one of {', '.join(READOUTS)}, "
                             f"got {self.readout!r}")  # fmt: skip


@dataclass(frozen=True)
class ExpectedOrdering:
    """The paper ranks ``better`` above ``worse`` in ``column``; ``diff`` = paper[better] - paper[worse],
    negative for a column where lower is better (a perplexity); ``probe`` measures it."""

    probe: str
    column: str
    better: str
    worse: str
    diff: float


@dataclass(frozen=True)
class Table:
    """An ablation table: ``name`` (the CLI's), the paper and its table, rows, and ``columns``: for each
    probe the paper's column it stands in for (the orderings are judged there). ``probes`` lists every
    probe the table measures (those without a column are printed, not judged). ``note`` says what the
    miniature cannot reproduce and why, in one line."""

    name: str
    title: str
    paper: str  # authors, year, title
    source: str  # "Table 8", "Figure 5"
    rows: tuple[Row, ...]
    probes: tuple[str, ...]
    columns: Mapping[str, str] = field(default_factory=frozen)
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", frozen(self.columns))
        names = [r.name for r in self.rows]
        if len(set(names)) != len(names) or len(names) < 2:
            raise ValueError(f"table {self.name}: expected at least 2 rows with distinct names, got {names}")
        if not self.probes or len(set(self.probes)) != len(self.probes):
            raise ValueError(
                f"table {self.name}: expected at least one probe, each once; got {list(self.probes)}"
            )
        for probe in self.probes:
            if probe not in PROBES:
                raise ValueError(f"table {self.name}: unknown probe {probe!r}; valid: {', '.join(PROBES)}")
        for row in self.rows:  # a translation model is scored by BLEU and perplexity, an encoder by the rest
            wrong = [
                p for p in self.probes if (PROBES[p].source == "translate") != (row.run.kind == "translate")
            ]
            if wrong:
                raise ValueError(f"table {self.name}: row {row.name!r} ({row.run.kind}) cannot be scored by "
                                 f"{', '.join(wrong)}")  # fmt: skip
        # a readout other than linear changes only the frozen-feature probes: any other cell of its row
        # would be the same run as its linear twin's (a fine-tuning run, the model run's own figure)
        others = [p for p in self.probes if PROBES[p].source == "finetune"]
        others += [p for p in self.columns if p in PROBES and PROBES[p].source != "features"]
        for row in self.rows:
            if row.readout != "linear" and others:
                raise ValueError(
                    f"table {self.name}: row {row.name!r} reads out by {row.readout}, which only the "
                    f"frozen-feature probes have; judged or fine-tuning probes without one: "
                    f"{', '.join(dict.fromkeys(others))}"
                )
        for probe, column in self.columns.items():
            if probe not in self.probes:
                raise ValueError(f"table {self.name}: column {column!r} names probe {probe!r}, not measured")
            if not any(column in r.paper for r in self.rows):
                raise ValueError(f"table {self.name}: no row has the paper's column {column!r}")

    def row(self, name: str) -> Row:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"table {self.name}: no row {name!r}; rows: {', '.join(r.name for r in self.rows)}")

    def expected_orderings(self) -> list[ExpectedOrdering]:
        """Every pair of rows the paper ranks in a judged column (ties in the paper rank nothing)."""
        out = []
        for probe, column in self.columns.items():
            for a, b in itertools.combinations(self.rows, 2):
                if column not in a.paper or column not in b.paper or a.paper[column] == b.paper[column]:
                    continue
                # a perplexity column ranks the lower value better (Probe.higher_is_better)
                higher = (a, b) if a.paper[column] > b.paper[column] else (b, a)
                better, worse = higher if PROBES[probe].higher_is_better else higher[::-1]
                diff = better.paper[column] - worse.paper[column]  # < 0 where lower is better
                out.append(ExpectedOrdering(probe, column, better.name, worse.name, round(diff, 4)))
        return out
