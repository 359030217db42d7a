"""The kernels' sources and headers ship in the wheel: a wheel built with ``python -m build`` and installed
into a directory of its own builds and uses both kernels from the installed files, outside the repository.

Not covered here: a fresh virtual environment that downloads torch (too slow for the suite); the installed
package runs on this environment's torch, with nothing of the repository on the path."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.accel import few_row_gemm, int8_gemm

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import attnlab
from attnlab.accel import few_row_gemm, int8_gemm

site = Path(sys.argv[1]).resolve()
assert Path(attnlab.__file__).resolve().is_relative_to(site), attnlab.__file__
assert few_row_gemm.SOURCE.resolve().is_relative_to(site) and few_row_gemm.SOURCE.with_name("ops.h").is_file()
assert few_row_gemm.available(), few_row_gemm.unavailable_reason()
assert int8_gemm.available(), int8_gemm.unavailable_reason()
gen = torch.Generator().manual_seed(0)
w, b = torch.randn(40, 24, generator=gen), torch.randn(40, generator=gen)
x = torch.randn(3, 24, generator=gen)
y = few_row_gemm.product_fn(torch.nn.Module(), w, b)(x)
assert torch.allclose(y, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
z = int8_gemm.product(x, int8_gemm.pack(w, b))
assert ((z - F.linear(x, w, b)).norm() / F.linear(x, w, b).norm()).item() < 0.03
print("built:", sorted(p.name.split("-")[0] for p in (Path(sys.argv[2]) / "kernels").iterdir()))
"""


@pytest.mark.slow  # a wheel built and installed, two kernels compiled (~1 minute)
def test_an_installed_wheel_builds_and_uses_the_kernels(tmp_path):
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (the test extras)")
    if not (few_row_gemm.available() and int8_gemm.available()):
        pytest.skip(f"no kernels here: {few_row_gemm.unavailable_reason() or int8_gemm.unavailable_reason()}")
    source = tmp_path / "src"  # a copy: the build writes build/ and *.egg-info beside pyproject.toml
    shutil.copytree(ROOT / "attnlab", source / "attnlab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run = {"capture_output": True, "text": True, "timeout": 600, "check": False}
    # no isolation: the build backend from this environment, nothing downloaded
    command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check"]
    built = subprocess.run([*command, "--outdir", str(tmp_path / "dist"), str(source)], **run)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("attnlab-*.whl")
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
                                str(site), str(wheel)], **run)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert {p.name for p in (site / "attnlab" / "accel" / "csrc").iterdir()} >= {
        "few_row_gemm.cpp", "int8_gemm.cpp", "blocking.h", "epilogue.h", "ops.h"
    }  # fmt: skip
    away = tmp_path / "elsewhere"  # cwd outside the repository: nothing of it on the path
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "ATTNLAB_CACHE": str(tmp_path / "cache")}
    env.pop("ATTNLAB_FEW_ROW_GEMM", None)
    env.pop("ATTNLAB_INT8_GEMM", None)
    command = [sys.executable, "-c", CHECK, str(site), str(tmp_path / "cache")]
    done = subprocess.run(command, cwd=away, env=env, **run)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "built: ['few_row_gemm', 'int8_gemm" in done.stdout, done.stdout
