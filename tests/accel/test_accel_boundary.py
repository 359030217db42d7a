"""attnlab.accel is applied from outside: the models, the trainer and nn/ import nothing from it (read from
the source, imports inside functions included), and the package ships every file its kernels include."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

import attnlab

PACKAGE = Path(attnlab.__file__).parent
PLAIN = ("models", "train", "nn")  # plain PyTorch: what a reader of the papers recognises


def imported_names(source: str, module: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything the source of ``module`` (a dotted name; ``pkg.__init__`` for a
    package) imports, anywhere in it: ``import a.b``, ``from a import b`` (as ``a`` and ``a.b``: b may be a
    module), relative imports resolved, and module names given as strings (``importlib.import_module``)."""
    package = module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("attnlab."):
                yield node.lineno, node.value


def test_imported_names_sees_every_form() -> None:
    source = (
        "import torch\nimport attnlab.accel.linear\n"
        "def f():\n    from .. import accel\n    from ..accel.swaps import optimize\n"
        "    from .config import X\n"
        "def g():\n    importlib.import_module('attnlab.accel')\n"
    )
    names = {name for _, name in imported_names(source, "attnlab.models.probe")}
    assert {"torch", "attnlab.accel.linear", "attnlab.accel", "attnlab.accel.swaps.optimize"} <= names
    assert "attnlab.models.config.X" in names
    names = {name for _, name in imported_names("from . import linear\n", "attnlab.accel.__init__")}
    assert "attnlab.accel.linear" in names


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


@pytest.mark.parametrize("package", PLAIN)
def test_plain_packages_import_nothing_from_accel(package: str) -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for line, name in imported_names(path.read_text(encoding="utf-8"), module_name(path))
        if name == "attnlab.accel" or name.startswith("attnlab.accel.")
    ]
    where = "\n".join(found)
    assert not found, f"attnlab.{package} imports attnlab.accel (apply it from outside):\n{where}"


def shipped_kernel_files() -> set[Path]:
    """The files of attnlab/accel that pyproject.toml's package-data ships."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["attnlab.accel"]
    return {p.resolve() for pattern in patterns for p in (PACKAGE / "accel").glob(pattern)}


def test_the_package_ships_every_kernel_source_and_every_file_it_includes() -> None:
    shipped = shipped_kernel_files()
    sources = sorted((PACKAGE / "accel" / "csrc").glob("*.cpp"))
    assert sources
    for source in sources:
        assert source.resolve() in shipped, f"pyproject.toml: attnlab.accel's package-data lacks {source}"
        text = source.read_text(encoding="utf-8")
        for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, flags=re.MULTILINE):
            assert (source.parent / name).resolve() in shipped, (
                f"{source.name} includes {name!r}, which pyproject.toml's attnlab.accel package-data misses"
            )
