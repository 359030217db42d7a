"""Where the tests find ``../shared/data`` (or ``$ATTNLAB_DATA``), and what happens when it is missing.

Tests that read real data call `require(path)` (or take the `needs(path)` mark). Where the data is absent they
skip and say which path is missing; with ``ATTNLAB_REQUIRE_DATA=1`` (CI sets it) they fail instead, so a run
that was meant to read the data cannot pass by skipping it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("ATTNLAB_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
REQUIRED = os.environ.get("ATTNLAB_REQUIRE_DATA") == "1"


def _missing(path: Path) -> str:
    return f"{path} is missing (the shared data; set ATTNLAB_DATA to its folder)"


def require(*paths: Path) -> None:
    """Skip the calling test where one of ``paths`` is missing, or fail under ``ATTNLAB_REQUIRE_DATA=1``."""
    for path in paths:
        if not Path(path).exists():
            if REQUIRED:
                pytest.fail(_missing(path) + "; ATTNLAB_REQUIRE_DATA=1 makes this a failure")
            pytest.skip(_missing(path))


def needs(path: Path) -> pytest.MarkDecorator:
    """A mark: the test runs only where ``path`` exists; under ``ATTNLAB_REQUIRE_DATA=1`` it always runs (and
    fails where the data is missing)."""
    missing = not Path(path).exists()
    if REQUIRED and missing:
        return pytest.mark.usefixtures()  # runs, and fails in require()
    return pytest.mark.skipif(missing, reason=_missing(path))
