"""Helpers for the tests of the C++ kernels' loading (tests/accel/test_few_row_gemm.py, test_int8_gemm.py).

A process registers a kernel's ops once (`attnlab.accel.kernel_build`): a test that builds a kernel anew (a
fresh cache, a changed source) loads it in a child process, `load_in_child`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fresh(module: ModuleType, switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """For a fixture: ``module._load`` run anew, building into an empty cache directory (yields the directory
    the kernels are built in), the module's cached kernel cleared before and after."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.delenv(switch, raising=False)
    module._kernel.cache_clear()
    yield tmp_path / "kernels"
    module._kernel.cache_clear()


def source_beside(module: ModuleType, directory: Path, text: str) -> Path:
    """A changed copy of ``module.SOURCE`` written into ``directory`` with the headers it includes."""
    for header in module.SOURCE.parent.glob("*.h"):
        (directory / header.name).write_bytes(header.read_bytes())
    path = directory / f"changed_{module.SOURCE.name}"
    path.write_text(text)
    return path


def load_in_child(module: str, cache: Path, setup: str = "", env: dict[str, str] | None = None) -> str:
    """``module._load()`` in a new Python process with ``ATTNLAB_CACHE=cache``, after the statements
    ``setup`` (``m`` is the module): ``"loaded"``, or the reason it gives."""
    script = f"import sys\nfrom pathlib import Path\nimport {module} as m\n{setup}\n"
    script += "got = m._load()\nprint('RESULT:' + ('loaded' if not isinstance(got, str) else got))\n"
    child_env = {**os.environ, "ATTNLAB_CACHE": str(cache), "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env,
                          timeout=300, check=False)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT:")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return lines[-1].removeprefix("RESULT:")
