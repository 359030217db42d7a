"""YAML read as data: PyYAML's safe loader (plain mappings, lists, strings and numbers; no tag builds an
object, nothing in the file runs), reading an unquoted ``1e-3`` as the number YAML 1.2 reads (YAML 1.1 leaves
it a string; a quoted one stays a string), refusing a key given twice, and naming the file and line of a
mistake. The reader of ``--config`` files and of the ablation lab's table files."""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

# a number with an exponent and no dot, which YAML 1.1's float pattern misses (it wants "1.0e-3")
_EXPONENT = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$")


class DataLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with the exponent numbers above, and a key given twice an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *anchor" merges a mapping; keys written beside it override its own
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the safe loader's own error names it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {key!r} twice",
                    key_node.start_mark,
                )  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


DataLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789."))


_NUMBER = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")


def numbers(value: Any) -> Any:
    """``value`` with every string that spells a number taken as that number (``--config`` files, where a
    quoted ``"1e-3"`` has always meant the learning rate); a table file keeps quoted strings."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        return float(value)
    if isinstance(value, list):
        return [numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    return value


def parse_yaml(text: str) -> Any:
    """``text`` as YAML data; raises `yaml.YAMLError` where it is not YAML."""
    return yaml.load(text, Loader=DataLoader)  # noqa: S506 (DataLoader is a SafeLoader)


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
