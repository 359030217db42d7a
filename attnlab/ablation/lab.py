"""Running a table: plan its runs, do those not yet done (each cached by its configuration and seed),
read every cell, and judge the paper's orderings against the measured rows beyond their noise."""

from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.ablation.execute import LabData, Log
from attnlab.ablation.plan import Planner, TablePlan
from attnlab.ablation.runs import RunSpec, RunStore
from attnlab.ablation.settings import LabSettings, hardware
from attnlab.ablation.stats import Agreement, Ordering, Summary, agreement, order
from attnlab.ablation.table import PROBES, Table
from attnlab.pretraining.budget import budget_for


@dataclass
class TableResult:
    """A table's measurements: per row and probe the values over seeds, and the judged orderings."""

    table: Table
    summaries: dict[tuple[str, str], Summary]
    orderings: list[Ordering]
    agreement: Agreement
    run_minutes: float
    trained: int  # runs done by this invocation
    reused: int  # runs found done
    failed: dict[str, str] = field(default_factory=dict)  # run key -> error
    seconds: float = 0.0  # this invocation's
    command: str = ""
    run_seconds: float = 0.0  # the table's runs' own wall time, whichever invocation did them
    size: str = "cpu"  # the LabSize the runs trained at (settings.SIZES)
    hardware: str = ""  # the machine this invocation ran on, in words
    table_file: str = ""  # the file a table of one's own was read from (attnlab.ablation.table_file)


def lab_data(settings: LabSettings, log: Log = print) -> LabData:
    vocab = budget_for(settings.size.budget_minutes, "mlm").vocab_size
    return LabData(settings, vocab, log)


def plan_table(table: Table, settings: LabSettings, log: Log = print) -> tuple[TablePlan, RunStore]:
    store = RunStore(settings.output / "runs")
    return Planner(settings, lab_data(settings, log), store, log).plan(table), store


@dataclass
class TableEstimate:
    """A table's runs before it runs: how many it plans, how many are done, and what the rest should take."""

    table: str
    runs: int
    done: int  # found done under OUTPUT/runs
    shared: int  # to be done by an earlier table of the same invocation (a row two tables share)
    pending: dict[str, int]  # kind -> runs to do
    blocked: int  # runs whose needed run failed: `run_table` skips them
    minutes: float  # of the runs to do, on the machine the standard budgets were set for
    allowance: float  # the part of ``minutes`` outside the runs' time budgets (their fixed allowance)
    run_minutes: float  # a weight-1 pre-training run's


class _ExpectingStore(RunStore):
    """OUTPUT/runs, with the runs that earlier tables of the same invocation will do counted as done."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.expected: set[str] = set()

    def done(self, spec: RunSpec) -> bool:
        return spec.key in self.expected or super().done(spec)


def estimate_tables(tables: list[Table], settings: LabSettings, log: Log = print) -> list[TableEstimate]:
    """Plan ``tables`` in the order `attnlab ablate` runs them, training and writing nothing."""
    on_disk = RunStore(settings.output / "runs")
    store = _ExpectingStore(on_disk.root)
    planner = Planner(settings, lab_data(settings, log), store, log, keep=False)
    out = []
    for table in tables:
        plan = planner.plan(table)
        done = sum(on_disk.done(r.spec) for r in plan.runs)
        skipped = _blocked(plan, on_disk)
        blocked = [r for r in plan.runs if r.spec.key in skipped and not store.done(r.spec)]
        pending = [r for r in plan.runs if r.spec.key not in skipped and not store.done(r.spec)]
        out.append(TableEstimate(
            table=table.name, runs=len(plan.runs), done=done,
            shared=len(plan.runs) - done - len(pending) - len(blocked),
            pending=dict(Counter(r.spec.kind for r in pending)), blocked=len(blocked),
            minutes=sum(r.weight * plan.run_minutes + r.seconds / 60 for r in pending),
            allowance=sum(r.seconds / 60 for r in pending), run_minutes=plan.run_minutes,
        ))  # fmt: skip
        store.expected.update(r.spec.key for r in pending)
    return out


def _blocked(plan: TablePlan, store: RunStore) -> set[str]:
    """The keys of the runs `run_table` will skip: a run they need (or a run that one needs) failed."""
    blocked: set[str] = set()
    for run in plan.runs:  # needs come first
        for need in run.spec.needs:
            result = store.result(need)
            if need.key in blocked or (result is not None and "model_dir" not in result):
                blocked.add(run.spec.key)
    return blocked


def run_table(
    table: Table, settings: LabSettings, log: Log = print, command: str = "", table_file: str = ""
) -> TableResult:
    """Do the table's runs not yet done (a failed run is recorded with its error and not retried), then
    measure and judge the table."""
    started = time.monotonic()
    plan, store = plan_table(table, settings, log)
    trained = reused = 0
    failed: dict[str, str] = {}
    log(f"{table.name}: {len(plan.runs)} runs, {plan.run_minutes:.2f} min a pre-training run; "
        f"about {plan.estimated_minutes(store):.0f} min for the runs not yet done")  # fmt: skip
    for i, run in enumerate(plan.runs, 1):
        if store.done(run.spec):
            reused += 1
            continue
        missing = [n.key for n in run.spec.needs if "model_dir" not in (store.result(n) or {})]
        if missing:
            failed[run.spec.key] = f"needs run(s) {', '.join(missing)}, which did not finish"
            continue
        folder = store.folder(run.spec)
        restart = run.spec.kind in ("features", "finetune")  # cheap: started again; training runs resume
        store.begin(run.spec, restart=restart)
        log(f"[{i}/{len(plan.runs)}] {run.spec.kind} {run.spec.key} seed {run.spec.seed}")
        t0 = time.monotonic()
        try:
            result = run.execute(folder)
        except Exception as error:  # recorded, so that a run that cannot work is not retried forever
            (folder / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            result = {"error": f"{type(error).__name__}: {error}"}
            failed[run.spec.key] = result["error"]
            log(f"  failed: {result['error']}")
        result["wall_seconds"] = time.monotonic() - t0
        store.finish(run.spec, result)
        trained += 1
    summaries = measure(plan, store, settings.seeds)
    orderings = judge(table, summaries)
    return TableResult(
        table, summaries, orderings, agreement(orderings), plan.run_minutes, trained, reused,
        failed | _errors(plan, store), time.monotonic() - started, command, _run_seconds(plan, store),
        settings.size.name, hardware(settings.device), table_file,
    )  # fmt: skip


def _run_seconds(plan: TablePlan, store: RunStore) -> float:
    results = (store.result(r.spec) or {} for r in plan.runs)
    return sum(float(r.get("wall_seconds") or 0.0) for r in results)


def _errors(plan: TablePlan, store: RunStore) -> dict[str, str]:
    out = {}
    for run in plan.runs:
        result = store.result(run.spec)
        if result is not None and "error" in result:
            out[run.spec.key] = result["error"]
    return out


def cell_value(result: dict[str, Any] | None, probe: str) -> float | None:
    if not result or "error" in result:
        return None
    value = result.get("metrics", {}).get(PROBES[probe].metric)
    return float(value) if isinstance(value, (int, float)) else None


def measure(plan: TablePlan, store: RunStore, seeds: tuple[int, ...]) -> dict[tuple[str, str], Summary]:
    """Each (row, probe)'s values over the seeds whose runs are done."""
    out = {}
    for row in plan.table.rows:
        for probe in plan.table.probes:
            values = [cell_value(store.result(plan.cells[row.name, probe, s]), probe) for s in seeds]
            out[row.name, probe] = Summary(tuple(v for v in values if v is not None))
    return out


def judge(table: Table, summaries: dict[tuple[str, str], Summary]) -> list[Ordering]:
    """Every ordering the paper makes in a judged column, against the measured rows."""
    return [
        order(e.probe, e.column, e.better, e.worse, e.diff, summaries.get((e.better, e.probe)),
              summaries.get((e.worse, e.probe)), higher_is_better=PROBES[e.probe].higher_is_better)
        for e in table.expected_orderings()
    ]  # fmt: skip
