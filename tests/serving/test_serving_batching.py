"""The dynamic batcher on its own (no model): which requests share a batch, in what order, and when."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from attnlab.serving.batching import BatchLimits, DynamicBatcher, QueueFull


def job(key: str, tokens: int, name: str) -> SimpleNamespace:
    return SimpleNamespace(key=(key,), tokens=tokens, name=name)


def run(
    limits: BatchLimits, jobs: list, stagger_s: float = 0.0, incoming=None
) -> tuple[list[list[str]], list]:
    """Submit ``jobs`` (all at once, or ``stagger_s`` apart); returns the batches run and the answers."""
    batches: list[list[str]] = []

    def run_batch(key, batch):
        batches.append([p.name for p in batch])
        time.sleep(0.01)
        return [p.name.upper() for p in batch]

    async def main():
        batcher = DynamicBatcher(run_batch, limits, incoming=incoming)
        batcher.start()
        tasks = []
        for j in jobs:
            tasks.append(asyncio.ensure_future(batcher.submit(j)))
            await asyncio.sleep(stagger_s)
        answers = await asyncio.gather(*tasks, return_exceptions=True)
        await batcher.drain(5)
        return answers

    return batches, asyncio.run(main())


def test_same_key_requests_share_a_batch_and_other_keys_wait_in_order():
    jobs = [job("a", 4, "a1"), job("b", 4, "b1"), job("a", 4, "a2"), job("a", 4, "a3"), job("b", 4, "b2")]
    batches, answers = run(BatchLimits(max_wait_ms=50), jobs)
    assert batches == [["a1", "a2", "a3"], ["b1", "b2"]]
    assert answers == ["A1", "B1", "A2", "A3", "B2"]


def test_padded_tokens_and_batch_size_bound_a_batch():
    jobs = [job("a", 10, f"x{i}") for i in range(5)]
    batches, _ = run(BatchLimits(max_batch_tokens=30, max_wait_ms=50), jobs)  # 3 x 10 fit, 4 x 10 do not
    assert batches == [["x0", "x1", "x2"], ["x3", "x4"]]
    long = [job("a", 5, "s"), job("a", 20, "l"), job("a", 5, "t")]  # 2 x 20 = 40 > 30: "l" waits
    batches, _ = run(BatchLimits(max_batch_tokens=30, max_wait_ms=50), long)
    assert batches == [["s", "t"], ["l"]]
    batches, _ = run(BatchLimits(max_batch_tokens=10, max_wait_ms=50), [job("a", 50, "huge")])
    assert batches == [["huge"]]  # longer than the bound: runs alone
    batches, _ = run(BatchLimits(max_batch_size=1, max_wait_ms=50), jobs[:3])
    assert batches == [["x0"], ["x1"], ["x2"]]


def test_the_window_is_counted_from_the_oldest_request():
    jobs = [job("a", 1, f"x{i}") for i in range(4)]
    batches, _ = run(BatchLimits(max_wait_ms=0), jobs, stagger_s=0.03)  # no window: one by one
    assert batches == [["x0"], ["x1"], ["x2"], ["x3"]]
    batches, _ = run(BatchLimits(max_wait_ms=500), jobs, stagger_s=0.03)
    assert batches == [["x0", "x1", "x2", "x3"]]


def test_a_lone_request_does_not_wait_out_the_window():
    """With nothing else on its way (the server's count of accepted requests not yet queued is 0) the oldest
    request runs at once; while others are on their way it waits for them, up to the window."""
    jobs = [job("a", 1, f"x{i}") for i in range(3)]
    started = time.perf_counter()
    batches, _ = run(BatchLimits(max_wait_ms=2000), jobs, stagger_s=0.05, incoming=lambda: 0)
    assert batches == [["x0"], ["x1"], ["x2"]] and time.perf_counter() - started < 1.5
    batches, _ = run(BatchLimits(max_wait_ms=500), jobs, stagger_s=0.05, incoming=lambda: 1)
    assert batches == [["x0", "x1", "x2"]]


def test_a_full_queue_refuses_and_a_failing_request_fails_alone():
    def run_batch(key, batch):
        time.sleep(0.05)
        return [ValueError(p.name) if p.name == "bad" else p.name for p in batch]

    async def main():
        batcher = DynamicBatcher(run_batch, BatchLimits(max_queue=2, max_wait_ms=0))
        batcher.start()
        tasks = [asyncio.ensure_future(batcher.submit(job("a", 1, n))) for n in ("ok", "bad")]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await batcher.submit(job("a", 1, "third"))
        answers = await asyncio.gather(*tasks, return_exceptions=True)
        await batcher.drain(5)
        return answers

    ok, bad = asyncio.run(main())
    assert ok == "ok" and isinstance(bad, ValueError)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        BatchLimits(max_batch_tokens=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatchLimits(max_wait_ms=-1)
