"""Dynamic batching: requests that arrive within a short window run as one padded batch.

One asyncio queue holds the prepared requests (`attnlab.serving.service.Prepared`); one collector task on the
event loop takes the oldest request and adds the ones behind it with the same batch key (endpoint and
options) until

- the batch would cost more than ``max_batch_tokens`` padded tokens (batch size x longest request; a single
  request longer than that still runs, alone),
- it holds ``max_batch_size`` requests, or
- ``max_wait_ms`` have passed since the oldest request arrived (a request that waited while the model ran
  the previous batch is not kept waiting again), or
- no other request is on its way: ``incoming()`` (the server's count of requests it has accepted that have
  not reached the queue) is 0, so a lone client's request runs at once instead of waiting out the window,

then hands the batch to one model thread; requests arriving meanwhile queue up for the next batch. Requests
with another key, or too long to join, wait in order and come first in the next batch (shorter ones behind
them may join this one). A full queue is refused at once (`QueueFull`: HTTP 503 with Retry-After); a
request whose client gave up (timeout) before its batch ran is skipped.

Generation requests a `attnlab.serving.continuous.ContinuousBatcher` takes (``continuous``, set for a GPT)
are handed to it instead: they join its running decode batch rather than wait for a batch of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from attnlab.serving.futures import settle, stop_loop
from attnlab.serving.metrics import Metrics


class QueueFull(Exception):
    """The batch queue holds ``max_queue`` requests already."""


@dataclass
class Job:
    prepared: Any  # attnlab.serving.service.Prepared: key, tokens, request
    future: asyncio.Future
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class BatchLimits:
    max_batch_tokens: int = 4096  # padded tokens per batch (size x longest)
    max_wait_ms: float = 5.0  # how long the oldest request may wait for others to join it
    max_batch_size: int = 64
    max_queue: int = 256  # requests waiting; more are refused with 503

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_batch_size", "max_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")


class DynamicBatcher:
    """``await batcher.submit(prepared)`` -> the request's result (or its exception raised)."""

    def __init__(
        self,
        run_batch: Callable[[tuple, Sequence[Any]], list[Any]],
        limits: BatchLimits,
        metrics: Metrics | None = None,
        incoming: Callable[[], int] | None = None,
    ) -> None:
        self.run_batch = run_batch
        self.incoming = incoming  # None: always wait out the window
        self.limits = limits
        self.metrics = metrics or Metrics()
        self.queue: asyncio.Queue[Job] | None = None
        self.held: deque[Job] = deque()  # taken from the queue, waiting for a batch of their key
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="attnlab-model")
        self.task: asyncio.Task | None = None
        self.running = 0  # requests in the batch on the model thread now
        self.collecting: list[Job] = []  # the batch being gathered (its window not yet over)
        self.continuous: Any = None  # a ContinuousBatcher: generation requests go to its running batch

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.queue = asyncio.Queue(self.limits.max_queue)
        self.task = asyncio.get_running_loop().create_task(self._loop(), name="attnlab-batcher")
        if self.continuous is not None:
            self.continuous.start()

    def depth(self) -> int:
        """Requests waiting (queued, held, in the batch being gathered, or waiting to join the continuous
        batch), not those that run."""
        waiting = len(self.continuous.waiting) if self.continuous is not None else 0
        return (self.queue.qsize() if self.queue else 0) + len(self.held) + len(self.collecting) + waiting

    def generating(self) -> int:
        """Requests in the continuous batch now."""
        return len(self.continuous.active) if self.continuous is not None else 0

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until every accepted request has been answered (graceful shutdown), then stop."""
        end = time.monotonic() + timeout
        while (self.depth() or self.running or self.generating()) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        if self.continuous is not None:
            await self.continuous.stop()
        await stop_loop(
            self.task,
            lambda: [*self.collecting, *self.held, *self._queued()],
            QueueFull("the server is shutting down"),
        )
        self.executor.shutdown(wait=True)

    def _queued(self) -> list[Job]:
        jobs = []
        while self.queue is not None and not self.queue.empty():
            jobs.append(self.queue.get_nowait())
        return jobs

    # --------------------------------------------------------------------------------------------- submit

    async def submit(self, prepared: Any) -> Any:
        if self.queue is None:
            raise RuntimeError("the batcher is not started")
        if self.continuous is not None and self.continuous.takes(prepared):
            if self.depth() >= self.limits.max_queue:
                raise QueueFull(f"{self.depth()} requests are waiting (--max-queue {self.limits.max_queue})")
            return await self.continuous.submit(prepared)
        job = Job(prepared, asyncio.get_running_loop().create_future())
        if self.depth() >= self.limits.max_queue:
            raise QueueFull(f"{self.depth()} requests are waiting (--max-queue {self.limits.max_queue})")
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull(
                f"{self.depth()} requests are waiting (--max-queue {self.limits.max_queue})"
            ) from None
        self.metrics.queue_depth(self.depth())
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            job.future.cancel()  # the client went away or timed out: skip it if it has not run yet
            raise

    # ---------------------------------------------------------------------------------------------- loop

    async def _next(self, timeout: float | None) -> Job | None:
        assert self.queue is not None
        if timeout is None:
            return await self.queue.get()
        if not self.queue.empty():
            return self.queue.get_nowait()
        if timeout <= 0:
            return None
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def collect(self) -> list[Job]:
        """The next batch (see the module docstring)."""
        lim = self.limits
        first = None
        while first is None:
            first = self.held.popleft() if self.held else await self._next(None)
            if first.future.done():  # cancelled while waiting
                first = None
        batch, longest = [first], first.prepared.tokens
        self.collecting = batch
        key = first.prepared.key
        deadline = first.arrived + lim.max_wait_ms / 1000
        passed: list[Job] = []  # other keys, kept in order for later batches
        candidates = deque(self.held)
        self.held.clear()
        while len(batch) < lim.max_batch_size:
            if not candidates and self.queue.empty() and self.incoming is not None and self.incoming() <= 0:
                break  # nothing else is on its way: do not wait out the window
            job = candidates.popleft() if candidates else await self._next(deadline - time.perf_counter())
            if job is None:
                break
            if job.future.done():
                continue
            width = max(longest, job.prepared.tokens)
            if job.prepared.key != key or (len(batch) + 1) * width > lim.max_batch_tokens:
                passed.append(job)  # first in line for the next batch
                continue
            batch.append(job)
            longest = width
        self.held.extend([*passed, *candidates])
        self.collecting = []
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.collect()
            key = batch[0].prepared.key
            self.running = len(batch)
            self.metrics.queue_depth(self.depth())
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(
                    self.executor, self.run_batch, key, [j.prepared for j in batch]
                )
            except Exception as error:  # noqa: BLE001 - the model thread itself failed
                results = [error] * len(batch)
            finally:
                self.running = 0
            tokens = len(batch) * max(j.prepared.tokens for j in batch)
            self.metrics.batch(str(key[0]), len(batch), tokens, time.perf_counter() - started)
            settle(zip(batch, results))
