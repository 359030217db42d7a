"""Generation requests of a GPT served by continuous batching (`attnlab.generation.continuous`).

`ContinuousBatcher` takes the ``/v1/generate`` requests with ``num_beams`` 1 (greedy or sampling; streamed
or not; and so every choice of ``/v1/completions``, ``/v1/chat/completions`` and the Hugging Face
``text-generation`` route, which go through ``/v1/generate``'s path): `DynamicBatcher.submit` hands them
over. One asyncio task runs the decoding loop; each turn of it is one call on the model thread (the one the
dynamic batcher uses, so a beam search or a ``logprobs`` scoring runs between two steps, never beside one)
that

- takes out the rows whose clients left (a cancelled request frees its row at once),
- prefills the requests that arrived since the last step (their first token is streamed at once) and adds
  them to the running batch, up to ``max_batch_size`` rows (the others wait for rows to leave),
- runs one step of every row, each with its own temperature, top-k, top-p, seed, stop strings and
  ``max_new_tokens``,

and the rows that ended get their answers (`ModelService.generate`'s: text cut at a stop string, the token
ids, ``finished``, warnings) without waiting for the others. Greedy answers are those of ``attnlab
generate`` for the same prompt, whatever else is in the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from attnlab.generation import GenerationConfig
from attnlab.generation.continuous import ContinuousDecoder, Row
from attnlab.generation.text_stream import IncrementalText, TextStream, cut_at_stop
from attnlab.serving.futures import settle, stop_loop
from attnlab.serving.metrics import Metrics


@dataclass(eq=False)
class Job:
    prepared: Any  # attnlab.serving.service.Prepared of a /v1/generate request
    future: asyncio.Future
    row: Row | None = None
    decode: Any = field(default=None, repr=False)  # token ids -> text, without EOS


class ContinuousBatcher:
    """``await continuous.submit(prepared)`` -> what `ModelService.generate` answers for the request."""

    def __init__(self, service: Any, executor: Executor, max_batch_size: int, max_queue: int,
                 metrics: Metrics | None = None) -> None:  # fmt: skip
        self.service = service
        self.executor = executor
        self.max_batch_size, self.max_queue = max_batch_size, max_queue
        self.metrics = metrics or Metrics()
        self.decoder = ContinuousDecoder(service.model)
        self.waiting: deque[Job] = deque()
        self.outbox: list[tuple[Job, dict]] = []  # (job, event): the streamed pieces of a turn
        self.active: list[Job] = []
        self.wake: asyncio.Event | None = None
        self.task: asyncio.Task | None = None

    @staticmethod
    def takes(prepared: Any) -> bool:
        return prepared.key[0] == "generate" and prepared.request.num_beams == 1

    def start(self) -> None:
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._loop(), name="attnlab-continuous")

    def busy(self) -> int:
        """Requests accepted and not answered yet (waiting or in the batch)."""
        return len(self.waiting) + len(self.active)

    async def submit(self, prepared: Any) -> dict:
        if self.task is None or self.wake is None:
            raise RuntimeError("the continuous batcher is not started")
        job = Job(prepared, asyncio.get_running_loop().create_future())
        self.waiting.append(job)
        self.wake.set()
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            job.future.cancel()  # the client went away or timed out: its row leaves at the next turn
            raise

    async def stop(self) -> None:
        await stop_loop(
            self.task, lambda: [*self.waiting, *self.active], RuntimeError("the server is shutting down")
        )

    # ---------------------------------------------------------------------------------------------- loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.wake is not None
        while True:
            if not self.waiting and not self.active:
                self.wake.clear()
                await self.wake.wait()
                continue
            room = self.max_batch_size - len(self.active)
            joining = []
            while self.waiting and len(joining) < room:
                job = self.waiting.popleft()
                if not job.future.done():
                    joining.append(job)
            started = time.perf_counter()
            try:
                ended = await loop.run_in_executor(self.executor, self._turn, joining)
            except Exception as error:  # noqa: BLE001 - the model thread failed: every row fails
                ended = [(job, error) for job in [*self.active, *joining]]
                self.decoder = ContinuousDecoder(self.service.model)
                self.active = []
            rows = len(self.decoder.rows)
            self.metrics.batch(
                "generate", rows, rows * (self.decoder.length() + 1), time.perf_counter() - started
            )
            self._send()
            settle(ended)

    def _send(self) -> None:
        """The turn's pieces of text, sent on from the loop at once; a job whose ``emit`` raises (its client
        left) fails with that error, and its row leaves at the next turn."""
        outbox, self.outbox = self.outbox, []
        for job, event in outbox:
            try:
                job.prepared.emit(event)
            except Exception as error:  # noqa: BLE001 - this request fails alone
                if not job.future.done():
                    job.future.set_exception(error)

    def _turn(self, joining: list[Job]) -> list[tuple[Job, Any]]:
        """On the model thread: rows of gone clients out, new requests in, one step; the ended jobs."""
        ended: list[tuple[Job, Any]] = []
        for job in [j for j in self.active if j.future.done()]:  # cancelled: the client left
            self.decoder.remove(job.row)
            self.active.remove(job)
        for job in joining:
            try:
                self._add(job)
            except Exception as error:  # noqa: BLE001 - this request fails alone
                ended.append((job, error))
                continue
            if job.row.done:
                ended.append((job, self._answer(job)))
            else:
                self.active.append(job)
        finished = set(self.decoder.step())
        for job in [j for j in self.active if j.row in finished]:
            self.active.remove(job)
            ended.append((job, self._answer(job)))
        return ended

    def _add(self, job: Job) -> None:
        """Prefill the job's prompt into the running batch (`ModelService.generate`'s settings)."""
        r, emit = job.prepared.request, job.prepared.emit
        tok, eos = self.service.tokenizer, self.service.model.config.eos_token_id
        cfg = GenerationConfig(
            max_new_tokens=r.max_new_tokens, do_sample=r.do_sample, temperature=r.temperature, top_k=r.top_k,
            top_p=r.top_p, repetition_penalty=r.repetition_penalty, seed=r.seed, truncate_prompt=r.truncate,
        )  # fmt: skip

        def decode(row: list[int]) -> str:
            return tok.decode([t for t in row if t != eos], skip_special_tokens=True)

        stops, text = list(r.stop), IncrementalText(decode)
        logprobs: list[float] | None = [] if job.prepared.logprobs else None

        def stop(ids: list[int]) -> bool:
            for token in ids[len(text.ids) :]:
                text.add(token)
            return any(s in text.text for s in stops)

        on_token = None
        if emit is not None:

            def send(token: int, piece: str) -> None:  # after the turn, from the loop (`_send`): one wake-up
                event = {"token": token, "text": piece}
                if logprobs is not None:
                    event["logprob"] = logprobs[-1]  # the piece's last token's
                self.outbox.append((job, event))

            stream = TextStream(decode, stops, send)
            on_token = stream.step
        job.decode = decode
        job.row = self.decoder.add(
            list(tok.encode(r.text, add_special_tokens=False).ids), cfg, on_token, stop, logprobs
        )

    def _answer(self, job: Job) -> Any:
        row = job.row
        if row.error is not None:
            return row.error
        return {
            "text": cut_at_stop(job.decode(row.generated), list(job.prepared.request.stop)),
            "tokens": row.generated,
            "finished": row.finished,
            "warnings": row.warnings,
        }
