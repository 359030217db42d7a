"""Helpers for the tests of the C++ kernels' loading (tests/accel/test_few_row_gemm.py, test_int8_gemm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def fresh(module: ModuleType, switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """For a fixture: ``module._load`` run anew, building into an empty cache directory (yields the directory
    the library is built into), the module's cached kernel cleared before and after."""
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
