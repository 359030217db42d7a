"""A table's runs: each row and seed expanded into the run that trains its model (with the runs it needs,
such as a distillation's teacher) and one run per probe, each a `RunSpec` with the function that does it.

Budgets: every run's minutes are part of its configuration. Without ``--minutes`` each run takes the
lab's standard budget (`LabSize`), the same in every table, so that a row two tables share is one run.
With ``--minutes M`` the table's M minutes are divided over its runs in proportion to their weights
(pre-training 1 x the row's budget share, fine-tuning probes their `Probe.weight`), after a fixed allowance
for each run's preparation and evaluation; frozen-feature probes take no share. The division is kept
(OUTPUT/plans/TABLE.json), so that the same command after a kill continues the same runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.ablation import execute, probes
from attnlab.ablation.classifiers import readout_key
from attnlab.ablation.execute import LabData, Log
from attnlab.ablation.runs import RunSpec, RunStore
from attnlab.ablation.settings import LabSettings
from attnlab.ablation.table import PROBES, Row, RunConfig, Table
from attnlab.ablation.tables import TABLES
from attnlab.atomic import write_json_atomic
from attnlab.pretraining.budget import MODEL_CHANGES, budget_for, for_budget
from attnlab.pretraining.distillation import DistillationConfig
from attnlab.pretraining.model import check_model_overrides
from attnlab.pretraining.recipes import Recipe, get_recipe
from attnlab.translation.config import Seq2SeqConfig
from attnlab.translation.config import preset as translation_preset

# seconds a run spends outside its time budget (data, evaluation, saving; probes: loading and features)
OVERHEAD_SECONDS = {"pretrain": 25.0, "distill": 30.0, "translate": 45.0, "finetune": 20.0, "features": 12.0}
READOUT_SECONDS = {"linear": 0.0, "bilstm": 30.0}  # a frozen-feature probe's classifier, beyond the above
MIN_RUN_MINUTES = 0.05  # a weight-1 run's minutes when --minutes cannot hold the runs' fixed allowance
TEACHER = RunConfig(recipe="bert")  # DistilBERT's teacher: BERT's recipe, the baseline row of BERT's tables


@dataclass
class PlannedRun:
    """A run and what does it; ``execute(folder)`` returns its result (a JSON-ready dict)."""

    spec: RunSpec
    weight: float
    execute: Callable[[Path], dict[str, Any]] = field(repr=False)
    seconds: float = 0.0  # its fixed allowance outside the time budget (OVERHEAD_SECONDS by default)

    def __post_init__(self) -> None:
        self.seconds = self.seconds or OVERHEAD_SECONDS[self.spec.kind]


@dataclass
class TablePlan:
    """The runs of a table in the order they are run (needs first), and which run holds each cell."""

    table: Table
    runs: list[PlannedRun]
    model_runs: dict[tuple[str, int], RunSpec]  # (row, seed) -> the run that trains the row's model
    cells: dict[tuple[str, str, int], RunSpec]  # (row, probe, seed) -> the run that holds the probe's value
    run_minutes: float  # a weight-1 run's minutes

    def estimated_minutes(self, store: RunStore) -> float:
        """Minutes the runs not yet done should take on the machine the standard budgets were set for."""
        pending = [r for r in self.runs if not store.done(r.spec)]
        return sum(r.weight * self.run_minutes + r.seconds / 60 for r in pending)


def pretrain_recipe(run: RunConfig, settings: LabSettings) -> tuple[Recipe, str, dict[str, Any]]:
    """The row's recipe at the lab's sizes (`attnlab.pretraining.budget`, as `attnlab pretrain` without
    --paper), then the row's overrides; the preset and the model overrides (pre-LN, then the row's)."""
    recipe = get_recipe(run.recipe)
    budget = budget_for(settings.size.budget_minutes, recipe.objective, recurrent=recipe.segment_recurrence)
    recipe = for_budget(recipe, budget, max_steps=1000).override(**dict(run.recipe_overrides))
    changes = {} if recipe.objective == "clm" else dict(MODEL_CHANGES)
    return recipe, budget.preset, {**changes, **run.model_overrides}


def check_run(run: RunConfig, settings: LabSettings) -> None:
    """Build, without training, what ``run`` configures at the lab's sizes: an unknown recipe, field or
    value raises ValueError naming it (a table read from a file is checked so before anything trains)."""
    for field_name, value in _numbers_in(run.to_dict()):  # a run's key holds finite numbers only
        if not math.isfinite(value):
            raise ValueError(f"{field_name}: expected a finite number, got {value}")
    if run.kind == "translate":
        overrides = {**settings.size.translate_overrides, **run.model_overrides}
        _known_fields("model", Seq2SeqConfig, overrides)
        translation_preset(settings.size.translate_preset, **overrides)
        return
    if run.kind == "distill":
        loss = {k: v for k, v in run.distill.items() if k != "random_init"}
        _known_fields("distill", DistillationConfig, loss, also=("random_init",))
        if not isinstance(run.distill.get("random_init", False), bool):
            raise ValueError(
                f"distill.random_init: expected true or false, got {run.distill['random_init']!r}"
            )
        DistillationConfig(**loss)
        run = TEACHER
    recipe, preset, overrides = pretrain_recipe(run, settings)
    check_model_overrides(recipe, preset, overrides)


def _numbers_in(value: Any, where: str = "") -> list[tuple[str, float]]:
    """(dotted field name, number) of every float in a run's configuration."""
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers_in(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, (list, tuple)):
        return [n for i, v in enumerate(value) for n in _numbers_in(v, f"{where}[{i}]")]
    return [(where, value)] if isinstance(value, float) else []


def _known_fields(name: str, cls: type, values: dict[str, Any], also: tuple[str, ...] = ()) -> None:
    valid = sorted({f.name for f in dataclasses.fields(cls)} | set(also))
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(
            f"{name}: unknown {cls.__name__} field(s) {', '.join(unknown)}; valid: {', '.join(valid)}"
        )


class Planner:
    """Builds a table's `TablePlan`; runs shared between rows (a teacher, a row repeated) are planned once."""

    def __init__(
        self, settings: LabSettings, data: LabData, store: RunStore, log: Log = print, *, keep: bool = True
    ) -> None:
        """``keep=False``: plan without writing OUTPUT/plans (`attnlab ablate --plan`)."""
        self.settings, self.data, self.store, self.log, self.keep = settings, data, store, log, keep
        self.unit = settings.size.pretrain_minutes * settings.scale
        self._planned: dict[str, PlannedRun] = {}

    def plan(self, table: Table) -> TablePlan:
        if self.settings.minutes is not None:
            self.unit = self._budget_unit(table)
        self._planned = {}
        model_runs, cells = {}, {}
        for seed in self.settings.seeds:
            for row in table.rows:
                model = self._model_run(row.run, seed)
                model_runs[row.name, seed] = model.spec
                for probe in table.probes:
                    cells[row.name, probe, seed] = self._probe_run(probe, row, model, seed).spec
        return TablePlan(table, list(self._planned.values()), model_runs, cells, self.unit)

    def _budget_unit(self, table: Table) -> float:
        """A weight-1 run's minutes under ``--minutes``: kept in OUTPUT/plans/TABLE.json when first divided,
        so that the same command after a kill finds the runs it started (their minutes are in their keys)."""
        record = self.settings.output / "plans" / f"{table.name}.json"
        key = {"minutes": self.settings.minutes, "seeds": list(self.settings.seeds),
               "size": self.settings.size.to_dict(), "scale": self.settings.scale}  # fmt: skip
        if table.name not in TABLES:  # a table of one's own: its file may change between invocations
            key["table"] = [[row.run.to_dict(), row.readout] for row in table.rows] + [list(table.probes)]
        try:
            saved = json.loads(record.read_text(encoding="utf-8"))
            if saved.get("key") == key:
                return float(saved["unit"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # none yet, or damaged: divide again
        unit = self._divided_unit(table)
        if not self.keep:
            return unit
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic({"key": key, "unit": unit}, record, indent=1)
        return unit

    def _divided_unit(self, table: Table) -> float:
        """--minutes over the table's runs, after each one's fixed allowance, in proportion to the weights.
        Every run counts: at minutes of its own none of them is a run another table trained."""
        self.unit = self.settings.size.pretrain_minutes * self.settings.scale
        self._planned = {}
        for seed in self.settings.seeds:
            for row in table.rows:
                model = self._model_run(row.run, seed)
                for probe in table.probes:
                    self._probe_run(probe, row, model, seed)
        runs = list(self._planned.values())
        fixed = sum(r.seconds for r in runs) / 60
        weights = sum(r.weight for r in runs) or 1.0
        return max(MIN_RUN_MINUTES, (self.settings.minutes - fixed) / weights)

    def _add(
        self, spec: RunSpec, weight: float, execute: Callable[[Path], dict[str, Any]], seconds: float = 0.0
    ) -> PlannedRun:
        if spec.key not in self._planned:
            self._planned[spec.key] = PlannedRun(spec, weight, execute, seconds)
        return self._planned[spec.key]

    def _common(self) -> dict[str, Any]:
        return {"data": self.data.key, "size": self.settings.size.encoder_fields()}

    def _model_run(self, run: RunConfig, seed: int) -> PlannedRun:
        minutes = round(self.unit * run.budget_share, 4)
        device, log = self.settings.device, self.log
        if run.kind == "translate":
            size = self.settings.size
            overrides = {**size.translate_overrides, **run.model_overrides}
            config = {"size": size.translation_fields(), "overrides": overrides, "minutes": minutes}
            spec = RunSpec("translate", config, seed)
            return self._add(spec, run.budget_share, lambda folder: execute.run_translate(
                folder, self.settings.data_dir, size.translate_preset, overrides, size.translate_max_tokens,
                minutes, seed, size.bleu_sentences, device, log))  # fmt: skip
        if run.kind == "distill":
            teacher = self._model_run(dataclasses.replace(TEACHER, budget_share=run.budget_share), seed)
            recipe, _, _ = pretrain_recipe(TEACHER, self.settings)
            length = max(s.max_length for s in recipe.stages)
            config = {**self._common(), "teacher": teacher.spec.key, "distill": dict(run.distill),
                      "max_length": length, "batch_size": recipe.batch_size, "lr": recipe.lr,
                      "minutes": minutes}  # fmt: skip
            spec = RunSpec("distill", config, seed, needs=(teacher.spec,))
            return self._add(spec, run.budget_share, lambda folder: execute.run_distill(
                folder, self.data, self._model_dir(teacher.spec), run.distill, length, recipe.batch_size,
                recipe.lr, minutes, seed, device, log))  # fmt: skip
        recipe, preset, model_overrides = pretrain_recipe(run, self.settings)
        config = {**self._common(), "recipe": recipe.to_dict(), "preset": preset,
                  "model_overrides": model_overrides, "minutes": minutes}  # fmt: skip
        spec = RunSpec("pretrain", config, seed)
        return self._add(spec, run.budget_share, lambda folder: execute.run_pretrain(
            folder, self.data, recipe, preset, model_overrides, minutes, seed, device, log))  # fmt: skip

    def _model_dir(self, spec: RunSpec) -> Path:
        result = self.store.result(spec)
        if result is None:
            raise RuntimeError(f"run {spec.key} ({spec.kind}) is needed but not done")
        return self.store.folder(spec) / result["model_dir"]

    def _probe_run(self, name: str, row: Row, model: PlannedRun, seed: int) -> PlannedRun:
        probe, size, device = PROBES[name], self.settings.size, self.settings.device
        if probe.source in ("pretrain", "translate"):
            return model  # the model run's own figure
        base = {"probe": name, "model": model.spec.key, "size": size.encoder_fields()}
        length, readout = self._length(row.run), row.readout
        if probe.source == "features":
            config = {**base, "examples": size.feature_examples, "max_length": length}
            if readout != "linear":  # the linear readout's runs keep the keys they had before readouts
                config["readout"] = readout_key(readout)
            spec = RunSpec("features", config, seed, needs=(model.spec,))
            seconds = OVERHEAD_SECONDS["features"] + READOUT_SECONDS[readout]
            work = lambda folder: self._features(name, model.spec, length, seed, readout)  # noqa: E731
            return self._add(spec, 0.0, work, seconds)
        minutes = round(self.unit * probe.weight, 4)
        config = {**base, "minutes": minutes, "lr": size.finetune_lr, "examples": size.finetune_examples}
        spec = RunSpec("finetune", config, seed, needs=(model.spec,))
        return self._add(spec, probe.weight, lambda folder: execute.run_finetune(
            folder, name, self._model_dir(model.spec), self.settings.data_dir, size.finetune_lr,
            size.finetune_examples, minutes, seed, device))  # fmt: skip

    def _length(self, run: RunConfig) -> int:
        """Tokens a probe feeds the model: the longest its pre-training trained."""
        run = TEACHER if run.kind == "distill" else run
        if run.kind == "translate":
            return 0
        recipe, _, _ = pretrain_recipe(run, self.settings)
        return max(s.max_length for s in recipe.stages)

    def _features(self, name: str, model: RunSpec, length: int, seed: int, readout: str) -> dict[str, Any]:
        model_dir, size, device = self._model_dir(model), self.settings.size, self.settings.device
        options = dict(examples=size.feature_examples, max_length=length, seed=seed, device=device,
                       readout=readout)  # fmt: skip
        data_dir = self.settings.data_dir
        if name == "sst2_features":
            return {"metrics": probes.sst2_features(model_dir, data_dir, **options)}
        if name == "conll_features":
            return {"metrics": probes.conll_features(model_dir, data_dir, **options)}
        _, _, heldout = self.data.load()
        task = name.split("_")[0]
        return {"metrics": probes.pair_features(model_dir, heldout, task, **options)}
