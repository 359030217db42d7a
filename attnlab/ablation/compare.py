"""Two runs of the lab side by side: for each table written to both folders (their TABLE.json files), the
orderings each run separated and the ones that agree with the paper, and how many of the table's orderings
got the same verdict in both. A run repeated with nothing changed shows how often noise alone changes a
verdict; against it, a change (another corpus, more seeds, a GPU's sizes) can be judged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.ablation.stats import AGREES, DISAGREES


@dataclass(frozen=True)
class TableComparison:
    """One table's orderings under two runs, ``a`` and ``b``, matched by (probe, better, worse)."""

    table: str
    orderings: int
    separated_a: int
    agreed_a: int
    separated_b: int
    agreed_b: int
    same_verdict: int


def _total(rows: list[TableComparison]) -> TableComparison:
    counts = ("orderings", "separated_a", "agreed_a", "separated_b", "agreed_b", "same_verdict")
    return TableComparison("all", *(sum(getattr(r, c) for r in rows) for c in counts))


def _verdicts(path: Path) -> dict[tuple[str, str, str], str]:
    """(probe, better, worse) -> verdict from a lab's TABLE.json; a clear error for any other file."""
    try:
        data: Any = json.loads(path.read_text())
        return {(o["probe"], o["better"], o["worse"]): o["verdict"] for o in data["orderings"]}
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: not a table written by attnlab ablate (expected JSON with 'orderings', each with "
            f"'probe', 'better', 'worse' and 'verdict'): {error!r}"
        ) from None


def compare_table(name: str, a: Path, b: Path) -> TableComparison:
    """``name``'s orderings in the folders ``a`` and ``b``; the same table must hold the same orderings."""
    va, vb = _verdicts(a / f"{name}.json"), _verdicts(b / f"{name}.json")
    if va.keys() != vb.keys():
        raise ValueError(
            f"{name}: {a} and {b} judge different orderings (was the table's definition changed?)"
        )
    counted = (AGREES, DISAGREES)
    return TableComparison(
        table=name,
        orderings=len(va),
        separated_a=sum(v in counted for v in va.values()),
        agreed_a=sum(v == AGREES for v in va.values()),
        separated_b=sum(v in counted for v in vb.values()),
        agreed_b=sum(v == AGREES for v in vb.values()),
        same_verdict=sum(va[k] == vb[k] for k in va),
    )


def compare_folders(a: Path, b: Path) -> list[TableComparison]:
    """Every table with a TABLE.json in both folders, by name; an error if they share none."""
    names = sorted({p.stem for p in a.glob("*.json")} & {p.stem for p in b.glob("*.json")})
    if not names:
        raise FileNotFoundError(f"{a} and {b}: no table written to both (TABLE.json from attnlab ablate)")
    return [compare_table(name, a, b) for name in names]


def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.0f}%)" if whole else ""


def comparison_markdown(rows: list[TableComparison], a: str, b: str) -> str:
    """The comparison as a Markdown table, with a line summing every table."""
    lines = [
        f"| table | {a}: separated / orderings | agree | {b}: separated / orderings | agree | same verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in [*rows, _total(rows)]:
        name = "all" if r.table == "all" else f"`{r.table}`"
        lines.append(
            f"| {name} | {r.separated_a} / {r.orderings}{_share(r.separated_a, r.orderings)} "
            f"| {r.agreed_a}{_share(r.agreed_a, r.separated_a)} "
            f"| {r.separated_b} / {r.orderings}{_share(r.separated_b, r.orderings)} "
            f"| {r.agreed_b}{_share(r.agreed_b, r.separated_b)} "
            f"| {r.same_verdict} of {r.orderings}{_share(r.same_verdict, r.orderings)} |"
        )
    return "\n".join(lines)
