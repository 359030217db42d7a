"""Suite-wide settings.

- Property tests are derandomised by default, so that CI is reproducible: a run fails only on what
  the code changed, not on the day's random draw. Explore with fresh random examples by hand:
  ``pytest --hypothesis-profile=explore`` (or ``--hypothesis-seed=N`` to replay one draw).
- No process started by a test outlives the test session: a child left running (a DDP rank stuck in
  a collective, say) keeps the output pipe of whoever ran pytest open, so CI would wait for it long
  after pytest had reported.
"""

from __future__ import annotations

import multiprocessing

from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")


def pytest_sessionfinish(session, exitstatus) -> None:
    for child in multiprocessing.active_children():
        child.kill()
        child.join(timeout=10)
