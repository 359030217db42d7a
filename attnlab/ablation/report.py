"""A table's outputs: TABLE.md (the paper's columns beside the measured ones with their spread, and every
pairwise ordering with its verdict), TABLE.json (the same, for machines) and TABLE.png (the paper's values
beside the measured ones with error bars); and the summary page over several tables."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab.ablation.lab import TableResult
from attnlab.ablation.settings import SIZES
from attnlab.ablation.stats import AGREES, DISAGREES, NOT_MEASURED, NOT_SEPARATED
from attnlab.ablation.table import PROBES
from attnlab.atomic import atomic_path, atomic_write, write_json_atomic


def _fmt(summary: Any) -> str:
    if summary is None or summary.n == 0:
        return "-"
    if summary.n == 1:
        return f"{summary.mean:.2f} (1)"
    return f"{summary.mean:.2f} ± {summary.std:.2f} ({summary.n})"


def unmoved_probes(result: TableResult) -> dict[str, float]:
    """Judged probes whose every value, over all rows and seeds, is the same (e.g. BLEU 0 everywhere):
    their orderings are "not separated" because the probe measured nothing, not because the rows tie."""
    out = {}
    for probe in result.table.columns:
        values = [v for (_, p), s in result.summaries.items() if p == probe for v in s.values]
        if len(values) >= 2 and len(set(values)) == 1:
            out[probe] = values[0]
    return out


def table_json(result: TableResult) -> dict[str, Any]:
    t = result.table
    return {
        "table": t.name, "title": t.title, "paper": t.paper, "source": t.source, "note": t.note,
        "command": result.command, "seconds": round(result.seconds, 1),
        "run_seconds": round(result.run_seconds, 1), "run_minutes": result.run_minutes,
        "runs_trained": result.trained, "runs_reused": result.reused, "failed": result.failed,
        "probes": {p: {"label": PROBES[p].label, "paper_column": t.columns.get(p)} for p in t.probes},
        "rows": [
            {"name": r.name, "run": r.run.to_dict(), "readout": r.readout, "paper": dict(r.paper),
             "measured": {p: result.summaries[r.name, p].to_dict() for p in t.probes}}
            for r in t.rows
        ],
        "orderings": [o.to_dict() for o in result.orderings],
        "agreement": result.agreement.to_dict(),
        "unmoved_probes": unmoved_probes(result),
        "size": result.size, "sizes": SIZES[result.size].describe(), "hardware": result.hardware,
        "table_file": result.table_file,
    }  # fmt: skip


def table_markdown(result: TableResult, png_name: str | None = None) -> str:
    t, a = result.table, result.agreement
    judged = set(t.columns.values())
    columns = sorted(dict.fromkeys(c for r in t.rows for c in r.paper), key=lambda c: c not in judged)
    origin = ", ".join(part for part in (t.paper, t.source) if part)
    whose = (
        f"the table `{t.name}` of `{result.table_file}`"
        if result.table_file
        else f"the lab's table `{t.name}`"
    )
    lines = [f"# {t.title}", "", f"{origin}; {whose}.", ""]
    if result.command:
        lines += ["Command:", "", f"    {result.command}", ""]
    lines += [
        f"The table's runs took {result.run_seconds / 60:.1f} min here ({result.run_minutes:.2f} min "
        f"a pre-training run); this invocation {result.seconds / 60:.1f} min ({result.trained} runs trained, "
        f"{result.reused} reused).", "",
        f"Sizes: the lab's {result.size} sizes ({SIZES[result.size].describe()}), before each row's "
        f"own changes" + (f", on {result.hardware}." if result.hardware else "."), "",
        "Probes (fixed before any result): " + "; ".join(
            PROBES[p].label + (f" for the paper's {t.columns[p]}" if p in t.columns else " (printed only)")
            for p in t.probes) + ".", "",
    ]  # fmt: skip
    header = ["row", *(f"paper {c}" for c in columns), *(PROBES[p].label for p in t.probes)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in t.rows:
        paper = [f"{r.paper[c]:g}" if c in r.paper else "-" for c in columns]
        measured = [_fmt(result.summaries.get((r.name, p))) for p in t.probes]
        lines.append("| " + " | ".join([r.name, *paper, *measured]) + " |")
    lines += ["", "Measured: mean ± sample standard deviation (seeds).", ""]
    if png_name:
        lines += [f"![{t.name}]({png_name})", ""]
    lines += [
        f"Orderings: {a.total} in the paper, {a.counted} separated beyond twice their standard error, "
        f"{a.agreed} of those in the paper's direction"
        + (f" ({100 * a.agreement:.0f}%)." if a.counted else "."), "",
        "| probe (paper column) | paper: better > worse | paper diff | measured diff ± SE | verdict |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for o in result.orderings:
        measured = "-" if math.isnan(o.measured_diff) else f"{o.measured_diff:+.2f} ± {o.se:.2f}"
        lines.append(f"| {o.probe} ({o.column}) | {o.better} > {o.worse} | {o.paper_diff:+g} | {measured} | "
                     f"{o.verdict} |")  # fmt: skip
    for probe, value in unmoved_probes(result).items():
        lines += [
            "",
            f"{PROBES[probe].label} did not move: every run scored {value:.2f}, so its orderings "
            "measure nothing (the rows do not tie; the miniature did not learn what the probe reads).",
        ]
    if t.note:
        lines += ["", f"Where the miniature may disagree: {t.note}"]
    if result.failed:
        lines += ["", "Runs that failed (left out of their cells; a cell with no seed left is not measured):"]
        lines += [""]
        lines += [f"- `{key}`: {error}" for key, error in sorted(result.failed.items())]
    lines += ["", _gpu_column(result), ""]
    return "\n".join(lines)


def _gpu_column(result: TableResult) -> str:
    """Where the table's GPU column is: a run at the GPU sizes into a folder of its own, set beside this
    one by ``attnlab ablate --compare``."""
    if result.size == "cuda":
        return ("This is the table's GPU column: `attnlab ablate --compare CPU_DOCS GPU_DOCS` sets its "
                "verdicts beside a CPU run's.")  # fmt: skip
    table = shlex.quote(result.table_file) if result.table_file else result.table.name
    return (f"GPU column: not yet run (`attnlab ablate {table} --device cuda --output "
            f"runs/ablations-cuda --docs docs/ablations/cuda`, then `attnlab ablate --compare docs/ablations "
            f"docs/ablations/cuda`).")  # fmt: skip


def table_png(result: TableResult, path: Path) -> None:
    """One panel per judged probe: the paper's values (left axis) beside the measured means with their
    standard deviations (right axis), row by row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = result.table
    judged = list(t.columns.items()) or [(p, "") for p in t.probes]
    fig = Figure(figsize=(4.2 * len(judged), 3.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(judged), squeeze=False)
    x = list(range(len(t.rows)))
    for ax, (probe, column) in zip(axes[0], judged):
        paper = [r.paper.get(column, math.nan) for r in t.rows]
        ax.plot(x, paper, "s--", color="tab:gray", label=f"paper: {column}")
        ax.set_ylabel(f"paper: {column}", color="tab:gray")
        twin = ax.twinx()
        sums = [result.summaries.get((r.name, probe)) for r in t.rows]
        means = [s.mean if s and s.n else math.nan for s in sums]
        errs = [s.std if s and s.n > 1 else 0.0 for s in sums]
        twin.errorbar(x, means, yerr=errs, fmt="o", color="tab:blue", capsize=4)
        twin.set_ylabel(f"measured: {PROBES[probe].label}", color="tab:blue")
        ax.set_xticks(x)
        ax.set_xticklabels([r.name for r in t.rows], rotation=30, ha="right", fontsize=8)
        ax.set_title(PROBES[probe].label, fontsize=9)
    origin = " ".join(part for part in (t.paper.split(",")[0], t.source) if part)
    fig.suptitle(f"{origin}: paper (grey) and measured (blue, ± std)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def write_table(result: TableResult, folder: Path) -> list[Path]:
    """NAME.md, NAME.json and NAME.png in ``folder``."""
    name = result.table.name
    folder.mkdir(parents=True, exist_ok=True)
    png = folder / f"{name}.png"
    table_png(result, png)
    write_json_atomic(table_json(result), folder / f"{name}.json", indent=1)
    with atomic_write(folder / f"{name}.md") as f:
        f.write(table_markdown(result, png.name))
    return [folder / f"{name}.md", folder / f"{name}.json", png]


BEGIN, END = "<!-- ablation results: written by attnlab ablate --docs -->", "<!-- end of ablation results -->"


def summary_markdown(tables: Sequence[dict[str, Any]], folder_name: str) -> str:
    """The results block of the page collecting the tables (each a TABLE.json), with the overall
    agreement."""
    verdicts = (AGREES, DISAGREES, NOT_SEPARATED, NOT_MEASURED)
    lines = ["| table | orderings | separated | agree | disagree | not separated | not measured |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    every: list[str] = []
    for t in tables:
        found = [o["verdict"] for o in t["orderings"]]
        every += found
        count = {v: found.count(v) for v in verdicts}
        separated = count[AGREES] + count[DISAGREES]
        lines.append(
            f"| [{t['title']}]({folder_name}/{t['table']}.md) | {len(found)} | {separated} | "
            f"{count[AGREES]} | {count[DISAGREES]} | {count[NOT_SEPARATED]} | {count[NOT_MEASURED]} |"
        )
    agreed, counted = every.count(AGREES), every.count(AGREES) + every.count(DISAGREES)
    share = f"{100 * agreed / counted:.0f}%" if counted else "-"
    coverage = f"{100 * counted / len(every):.0f}%" if every else "-"
    lines += ["", f"Overall: {len(every)} orderings, {counted} separated beyond noise ({coverage}), "
                  f"{agreed} of those in the paper's direction ({share})."]  # fmt: skip
    return "\n".join(lines)


def update_summary(page: Path, folder: Path) -> None:
    """Rewrite the results block of ``page`` (between its markers; appended when it has none) from every
    TABLE.json in ``folder``."""
    tables = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    block = f"{BEGIN}\n{summary_markdown(tables, folder.name)}\n{END}"
    text = page.read_text(encoding="utf-8") if page.is_file() else "# Ablations\n\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with atomic_write(page) as f:
        f.write(text)
