"""The requests' futures of the batchers (`DynamicBatcher`, `ContinuousBatcher`): answered after a batch or
a step (`settle`), failed when the loop stops at shutdown (`stop_loop`)."""

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


def settle(answers: Iterable[tuple[Any, Any]]) -> None:
    """Give each (job, result) its result, or its error where the result is an exception; a job already
    done (its client left, it timed out) is skipped."""
    for job, result in answers:
        if job.future.done():
            continue
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)
