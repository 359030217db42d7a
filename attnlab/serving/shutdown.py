"""Stopping a batcher's loop at shutdown: what `DynamicBatcher.drain` and `ContinuousBatcher.stop` share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any


async def stop_loop(
    task: asyncio.Task | None, pending: Callable[[], Iterable[Any]], error: BaseException
) -> None:
    """Cancel the loop's ``task`` and wait for it to end, then fail with ``error`` every job (an object
    with a ``future``) that ``pending()`` lists unanswered once it has ended, so that no client waits for a
    loop that is gone."""
    if task is not None:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    for job in pending():
        if not job.future.done():
            job.future.set_exception(error)
