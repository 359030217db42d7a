"""A table of one's own, read from a YAML (or JSON) file: the fields of `Table`, `Row` and `RunConfig`, each
checked when the file is read, so that a mistake names the file and the field before anything trains.
Reading parses data (`attnlab.yaml_files`, json); nothing in the file runs.

    name: masking-rate                    # the outputs' names: OUTPUT/masking-rate.md, .json, .png
    title: "Masking rate: 15% against 40%"  # optional, as are paper, source and note
    probes: [mlm_accuracy, sst2_features]   # attnlab.ablation.table.PROBES
    columns: {sst2_features: SST-2}         # optional: a probe judged against a column of the rows' numbers
    rows:
      - name: 15%
        run: {recipe: bert, recipe_overrides: {masking: {rate: 0.15}}}
        paper: {SST-2: 92.4}                # optional: the number a row is expected to reach
      - name: 40%
        run: {recipe: bert}
        paper: {SST-2: 92.9}

``run`` holds `RunConfig`'s fields (kind, recipe, recipe_overrides, model_overrides, distill,
budget_share); a row may add ``readout: bilstm``. A row whose run equals another table's row is the same
run: the cache under OUTPUT/runs trains it once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnlab.ablation.plan import check_run
from attnlab.ablation.settings import LabSettings
from attnlab.ablation.table import Row, RunConfig, Table
from attnlab.ablation.tables import TABLES
from attnlab.yaml_files import read_yaml

SUFFIXES = (".yaml", ".yml", ".json")
TABLE_FIELDS = {"name": str, "title": str, "paper": str, "source": str, "note": str, "probes": list,
                "columns": dict, "rows": list}  # fmt: skip
ROW_FIELDS = {"name": str, "run": dict, "paper": dict, "readout": str}
RUN_FIELDS = {"kind": str, "recipe": str, "recipe_overrides": dict, "model_overrides": dict, "distill": dict,
              "budget_share": (int, float)}  # fmt: skip


class TableFileError(ValueError):
    """A table file that cannot be read as a table; the message names the file and the field."""


def is_table_file(name: str) -> bool:
    """Whether `attnlab ablate NAME` names a table file rather than one of the lab's tables."""
    return name.lower().endswith(SUFFIXES)


def load_table(path: str | Path, settings: LabSettings) -> Table:
    """The table ``path`` defines, each row's run built (not trained) at ``settings``' sizes."""
    path = Path(path)
    data = _parse(path)
    _check_fields(data, TABLE_FIELDS, path, "", required=("name", "probes", "rows"))
    rows = data["rows"]
    for i, row in enumerate(rows):
        _check_fields(row, ROW_FIELDS, path, f"rows[{i}].", required=("name",))
        _check_fields(row.get("run", {}), RUN_FIELDS, path, f"rows[{i}].run.", required=())
        for column, value in row.get("paper", {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TableFileError(f"{path}: rows[{i}].paper.{column}: expected a number, got {value!r}")
    for i, probe in enumerate(data["probes"]):
        if not isinstance(probe, str):
            raise TableFileError(f"{path}: probes[{i}]: expected a probe's name, got {probe!r}")
    if data["name"] in TABLES:
        raise TableFileError(f"{path}: name: {data['name']!r} is one of the lab's tables; choose another, "
                             "so that its outputs do not replace that table's")  # fmt: skip
    try:
        table = Table(
            name=data["name"], title=data.get("title", data["name"]), paper=data.get("paper", ""),
            source=data.get("source", path.name), rows=tuple(_row(r) for r in rows),
            probes=tuple(data["probes"]), columns=data.get("columns", {}), note=data.get("note", ""),
        )  # fmt: skip
    except ValueError as error:
        raise TableFileError(f"{path}: {error}") from None
    for i, row in enumerate(table.rows):
        try:
            check_run(row.run, settings)
        except (ValueError, TypeError) as error:
            raise TableFileError(f"{path}: rows[{i}] ({row.name}).run: {error}") from None
    return table


def _parse(path: Path) -> dict[str, Any]:
    if not is_table_file(path.name):
        raise TableFileError(f"{path}: expected a .yaml, .yml or .json table file")
    if not path.is_file():
        raise TableFileError(f"{path}: no such table file")
    try:
        if path.suffix.lower() != ".json":
            data = read_yaml(path)
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise TableFileError(f"{path}: line {error.lineno}: not valid JSON: {error.msg}") from None
    except (ValueError, OSError) as error:  # read_yaml names the file and line
        raise TableFileError(str(error) if str(path) in str(error) else f"{path}: {error}") from None
    if not isinstance(data, dict):
        raise TableFileError(f"{path}: expected a table (a mapping of fields), got {type(data).__name__}")
    return data


def _check_fields(
    data: Any, fields: dict[str, Any], path: Path, where: str, required: tuple[str, ...]
) -> None:
    if not isinstance(data, dict):
        raise TableFileError(f"{path}: {where.rstrip('.') or 'the file'}: expected a table of fields, "
                             f"got {data!r}")  # fmt: skip
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise TableFileError(f"{path}: {where}{unknown[0]}: unknown field; valid: {', '.join(fields)}")
    for name in required:
        if name not in data:
            raise TableFileError(f"{path}: {where}{name}: missing")
    for name, value in data.items():
        kind = fields[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            expected = "a number" if kind == (int, float) else f"a {_KINDS[kind]}"
            raise TableFileError(f"{path}: {where}{name}: expected {expected}, got {value!r}")


_KINDS = {str: "string", list: "list", dict: "table of fields"}


def _row(data: dict[str, Any]) -> Row:
    return Row(data["name"], RunConfig(**data.get("run", {})), data.get("paper", {}),
               data.get("readout", "linear"))  # fmt: skip
