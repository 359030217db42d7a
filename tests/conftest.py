"""Suite-wide safety net: no process started by a test outlives the test session.

A child left running (a DDP rank stuck in a collective, say) keeps the output pipe of whoever ran
pytest open, so CI would wait for it long after pytest had reported.
"""

from __future__ import annotations

import multiprocessing


def pytest_sessionfinish(session, exitstatus) -> None:
    for child in multiprocessing.active_children():
        child.kill()
        child.join(timeout=10)
