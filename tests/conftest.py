"""Suite-wide settings.

- Property tests are derandomised by default, so that CI is reproducible: a run fails only on what
  the code changed, not on the day's random draw. Explore with fresh random examples by hand:
  ``pytest --hypothesis-profile=explore`` (or ``--hypothesis-seed=N`` to replay one draw).
- No process started by a test outlives the pytest run: a child left running (a DDP rank stuck in
  a collective, say) keeps the output pipe of whoever ran pytest open, so CI would wait for it long
  after pytest had reported.
- ``attnlab predict`` and ``serve`` tune glibc's allocator for the whole process
  (`attnlab.inference.keep_freed_memory`); the suite calls them in-process, so it sets
  ``ATTNLAB_MALLOC=default`` and keeps the allocator as every other test found it.
  `tests/inference/test_inference_allocator.py` checks the tuning in child processes without it.
- The tests mirror the package (``tests/nn/``, ``tests/models/``, ...); their shared helpers
  (``shared_data``, ``encoder_layers``, ...) live here, and every folder is on the import path, so a test
  imports a helper or another test module by its name from any folder.
- A Python without the project installed (``pytest`` from outside ``.venv``) stops at once with one line
  saying what is missing and the command to use, instead of 76 collection errors.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
for _folder in sorted(os.scandir(TESTS), key=lambda e: e.name, reverse=True):
    if _folder.is_dir() and _folder.name not in ("fixtures", "__pycache__") and _folder.path not in sys.path:
        sys.path.insert(0, _folder.path)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

_MISSING = [m for m in ("torch", "attnlab", "hypothesis") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.exit(
        f"{sys.executable} has no {', '.join(_MISSING)}: the tests run in the project's venv. Use "
        "`make test` (creates .venv and installs attnlab with its test extras), then "
        "`.venv/bin/python -m pytest -m slow` or `-m browser`.",
        returncode=4,
    )

from hypothesis import settings  # noqa: E402

os.environ.setdefault("ATTNLAB_MALLOC", "default")

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")


def pytest_sessionfinish(session, exitstatus) -> None:
    for child in multiprocessing.active_children():
        child.kill()
        child.join(timeout=10)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models: on a shared 2-core machine two spinning threads per
    process are many times slower for small matrices (restored after the module). A module takes it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
