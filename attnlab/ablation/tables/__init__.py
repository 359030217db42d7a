"""The lab's tables, each a data module named after its paper; `TABLES` by the name `attnlab ablate`
takes."""

from __future__ import annotations

from attnlab.ablation.table import Table
from attnlab.ablation.tables import albert, bert, distilbert, electra_spanbert, roberta, transformer

TABLES: dict[str, Table] = {
    t.name: t
    for module in (bert, roberta, albert, distilbert, transformer, electra_spanbert)
    for t in module.TABLES
}


def get_table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"unknown table {name!r}; valid: {', '.join(TABLES)} (or all)") from None


__all__ = ["TABLES", "get_table"]
