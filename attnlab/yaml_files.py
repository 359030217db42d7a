"""YAML read as data: `yaml.safe_load` (plain mappings, lists, strings and numbers; no tag builds an object,
nothing in the file runs), with the numbers YAML 1.1 leaves as strings taken as numbers, and an error that
names the file and line. The reader of ``--config`` files and of the ablation lab's table files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def numbers(value: Any) -> Any:
    """YAML 1.1 reads ``1e-3`` (no dot) as a string; take such strings as the numbers they spell."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        return float(value)
    if isinstance(value, list):
        return [numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    return value


def parse_yaml(text: str) -> Any:
    """``text`` as YAML data; raises `yaml.YAMLError` where it is not YAML."""
    return numbers(yaml.safe_load(text))


def read_yaml(path: str | Path) -> Any:
    """The data of the YAML file ``path``; ValueError naming the file (and the line) where it is not YAML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(error, "problem", None) or error
        raise ValueError(f"{path}:{line} invalid YAML: {problem}") from None
