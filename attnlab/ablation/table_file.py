"""A table of one's own, read from a YAML (or JSON) file: the fields of `Table`, `Row` and `RunConfig`, each
checked when the file is read, so that a mistake names the file and the field before anything trains.
Reading parses data (`attnlab.yaml_files`, json); nothing in the file runs.

    name: mask-only                        # the outputs' names: OUTPUT/mask-only.md, .json, .png
    title: "BERT Table 8: 80/10/10 against MASK only"  # optional, as are paper, source and note
    probes: [mlm_accuracy, conll_finetune]  # attnlab.ablation.table.PROBES
    columns: {conll_finetune: NER}          # optional: a probe judged against a column of the rows' numbers
    rows:
      - name: 80/10/10
        run: {recipe: bert}
        paper: {NER: 95.4}                  # optional: the number the row reaches in the paper
      - name: 100/0/0
        run: {recipe: bert, recipe_overrides: {masking: {mask_prob: 1.0, random_prob: 0.0}}}
        paper: {NER: 94.9}

``run`` holds `RunConfig`'s fields (kind, recipe, recipe_overrides, model_overrides, distill,
budget_share); a row may add ``readout: bilstm``. A row whose run equals another table's row is the same
run: the cache under OUTPUT/runs trains it once.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from attnlab.ablation.plan import check_run
from attnlab.ablation.settings import LabSettings
from attnlab.ablation.table import Row, RunConfig, Table
from attnlab.ablation.tables import TABLES
from attnlab.yaml_files import read_yaml

SUFFIXES = (".yaml", ".yml", ".json")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # the outputs' file names: OUTPUT/NAME.md, .json, .png
TABLE_FIELDS = {"name": str, "title": str, "paper": str, "source": str, "note": str, "probes": list,
                "columns": dict, "rows": list}  # fmt: skip
ROW_FIELDS = {"name": str, "run": dict, "paper": dict, "readout": str}
RUN_FIELDS = {"kind": str, "recipe": str, "recipe_overrides": dict, "model_overrides": dict, "distill": dict,
              "budget_share": (int, float)}  # fmt: skip
# the RunConfig fields each kind of run reads (a distillation's teacher is the lab's, `plan.TEACHER`)
RUN_FIELDS_OF = {"pretrain": {"kind", "recipe", "recipe_overrides", "model_overrides", "budget_share"},
                 "distill": {"kind", "distill", "budget_share"},
                 "translate": {"kind", "model_overrides", "budget_share"}}  # fmt: skip
KIND_NAMES = {str: "a string", list: "a list", dict: "a mapping of fields", (int, float): "a number"}
YAML_WORDS = " (YAML reads an unquoted yes, no, on, off, true or false as that; quote it)"


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
    _check_name(data["name"], path)
    for i, probe in enumerate(data["probes"]):
        if not isinstance(probe, str):
            raise TableFileError(f"{path}: probes[{i}]: expected a probe's name, got {probe!r}{_hint(probe)}")
    for probe, column in data.get("columns", {}).items():
        if not isinstance(column, str):
            raise TableFileError(f"{path}: columns.{probe}: expected a column's name, got {column!r}"
                                 f"{_hint(column)}")  # fmt: skip
    rows = tuple(_row(row, path, i, settings) for i, row in enumerate(data["rows"]))
    try:
        return Table(
            name=data["name"], title=data.get("title", data["name"]), paper=data.get("paper", ""),
            source=data.get("source", path.name), rows=rows, probes=tuple(data["probes"]),
            columns=data.get("columns", {}), note=data.get("note", ""),
        )  # fmt: skip
    except ValueError as error:
        raise TableFileError(f"{path}: {error}") from None


def _row(data: Any, path: Path, i: int, settings: LabSettings) -> Row:
    """Row ``i``, checked field by field, its run built at the lab's sizes."""
    where = f"rows[{i}]"
    _check_fields(data, ROW_FIELDS, path, f"{where}.", required=("name",))
    run = data.get("run", {})
    _check_fields(run, RUN_FIELDS, path, f"{where}.run.", required=())
    kind = run.get("kind", "pretrain")
    ignored = sorted(set(run) - RUN_FIELDS_OF.get(kind, set(run)))
    if ignored:
        raise TableFileError(f"{path}: {where}.run.{ignored[0]}: a {kind} run does not read it; its fields: "
                             f"{', '.join(sorted(RUN_FIELDS_OF[kind]))}")  # fmt: skip
    for column, value in data.get("paper", {}).items():
        if not isinstance(column, str):
            raise TableFileError(f"{path}: {where}.paper: a column's name must be a string, got "
                                 f"{column!r}{_hint(column)}")  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TableFileError(f"{path}: {where}.paper.{column}: expected a finite number, got {value!r}"
                                 f"{_hint(value)}")  # fmt: skip
    where = f"{where} ({data['name']})"
    try:
        config = RunConfig(**run)
        check_run(config, settings)
    except (ValueError, TypeError) as error:
        raise TableFileError(f"{path}: {where}.run: {error}") from None
    try:
        return Row(data["name"], config, data.get("paper", {}), data.get("readout", "linear"))
    except ValueError as error:
        raise TableFileError(f"{path}: {where}: {error}") from None


def _parse(path: Path) -> dict[str, Any]:
    if not is_table_file(path.name):
        raise TableFileError(f"{path}: expected a .yaml, .yml or .json table file")
    if not path.is_file():
        raise TableFileError(f"{path}: no such table file")
    try:
        if path.suffix.lower() != ".json":
            data = read_yaml(path)
        else:
            data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_once_each)
    except json.JSONDecodeError as error:
        raise TableFileError(f"{path}: line {error.lineno}: not valid JSON: {error.msg}") from None
    except (ValueError, OSError) as error:  # read_yaml names the file and line
        raise TableFileError(str(error) if str(path) in str(error) else f"{path}: {error}") from None
    if not isinstance(data, dict):
        raise TableFileError(f"{path}: expected a table (a mapping of fields), got {type(data).__name__}")
    return data


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys stand once each (json keeps the last of a key given twice, silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice in one object")
        out[key] = value
    return out


def _check_name(name: str, path: Path) -> None:
    if not NAME.match(name):
        raise TableFileError(f"{path}: name: {name!r}: expected letters, digits, '.', '_' or '-' (it names "
                             "the output files), starting with a letter or digit")  # fmt: skip
    if name in TABLES:
        raise TableFileError(f"{path}: name: {name!r} is one of the lab's tables; choose another, so that "
                             "its outputs do not replace that table's")  # fmt: skip


def _check_fields(
    data: Any, fields: dict[str, Any], path: Path, where: str, required: tuple[str, ...]
) -> None:
    if not isinstance(data, dict):
        raise TableFileError(f"{path}: {where.rstrip('.') or 'the file'}: expected a mapping of fields, "
                             f"got {data!r}")  # fmt: skip
    unknown = sorted(str(k) for k in set(data) - set(fields))
    if unknown:
        raise TableFileError(f"{path}: {where}{unknown[0]}: unknown field; valid: {', '.join(fields)}")
    for name in required:
        if name not in data:
            raise TableFileError(f"{path}: {where}{name}: missing")
    for name, value in data.items():
        kind = fields[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise TableFileError(f"{path}: {where}{name}: expected {KIND_NAMES[kind]}, got {value!r}"
                                 f"{_hint(value)}")  # fmt: skip


def _hint(value: Any) -> str:
    return YAML_WORDS if isinstance(value, bool) else ""
