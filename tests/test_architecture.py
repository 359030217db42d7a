"""The package's shape, checked over its source: what `docs/architecture.md` promises a reader.

- no import cycle between modules, imports placed inside functions included (grimp reads every import);
- the layers of `pyproject.toml`'s import-linter contract hold (`lint-imports`, also run by `make lint`);
- models, their blocks and the trainer import nothing from `attnlab.accel` (speed-ups come from outside);
- functions of at most 100 lines, files of at most 600 unless `ONE_IDEA` names them with the reason;
- the tests import attnlab itself plainly: `pytest.importorskip` is for optional third-party packages only.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attnlab"
MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 600
# Files over MAX_FILE_LINES that hold one idea a reader looks for by that name (docs/architecture.md says so).
ONE_IDEA: dict[str, str] = {
    "attnlab/train/trainer.py": "the training loop: steps, evaluation, checkpoints, resume, time budget",
}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("attnlab", include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_the_layers_contract_holds() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is a test dependency (pip install -e '.[test]')"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:]


def test_models_blocks_and_trainer_import_nothing_from_accel() -> None:
    offenders = []
    for sub in ("models", "nn", "train"):
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                if any(n == "attnlab.accel" or n.startswith("attnlab.accel.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_functions_are_short() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_files_are_short_or_one_idea() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources()
        if (n := p.read_text().count("\n")) > MAX_FILE_LINES and str(p.relative_to(ROOT)) not in ONE_IDEA
    }
    assert long == {}


def test_one_idea_files_are_still_long_and_named_in_the_map() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for name in ONE_IDEA:
        lines = (ROOT / name).read_text().count("\n")
        assert lines > MAX_FILE_LINES, f"{name} is short now: drop it from ONE_IDEA"
        assert Path(name).stem in architecture, name


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("*.py")), ids=lambda p: p.name)
def test_no_importorskip_of_attnlab(path: Path) -> None:
    assert not re.search(r"importorskip\(\s*[\"']attnlab", path.read_text())
