"""``attnlab serve`` generating under load (``benchmarks/serve.py --generation``): continuous batching with
16 concurrent streaming clients against the same requests served one at a time.

    .venv/bin/python benchmarks/serve.py --generation              # 2,000 requests (the docs' table)
    .venv/bin/python benchmarks/serve.py --generation --quick      # 200 requests, a quicker look
    .venv/bin/python benchmarks/serve.py --generation --model runs/gpt/model   # a trained GPT instead

One real server (an ``attnlab serve`` subprocess on 127.0.0.1, its defaults: continuous batching) holds the
model. The load generator is an asyncio client in this process (HTTP/1.1 keep-alive connections written with
asyncio streams; each request ``/v1/generate`` with ``"stream": true``, 128 new tokens, greedy, its
server-sent events read as they come). Measured:

- one at a time: ``--sequential`` requests from one client (each decodes alone: the peer);
- under load: ``--requests`` requests from ``--clients`` concurrent clients, each sending its next request
  when its last one ended (so new requests keep joining a running batch); the clients start
  ``--stagger-ms`` apart (150: about a request's time over 16), so that requests arrive as a stream, as
  from users, rather than all at once (16 simultaneous arrivals wait for 16 prefills: their first tokens
  come after the sum of those, whatever the batching; ``--stagger-ms 0`` measures that);
- total generated tokens per second of both, and their ratio; time to first token (the request sent to its
  first text event) p50/p99; errors (any status but 200, a broken stream, an ``event: error``);
- every answer's tokens against `attnlab.generation.generate` run in this process on the prompt alone
  (greedy: the same tokens whatever else was in the batch).

Default model: the ``gpt-bpe-small`` preset (6 layers x 384, 256 positions, 8,192-token byte-level BPE
trained here on the first 300,000 characters of ``../shared/data/tinyshakespeare`` (or
``$ATTNLAB_DATA``); random weights, seeded:
the speed depends on the shapes, not on what the weights learned). Prompts: 48 slices of Tiny Shakespeare of
8 to 100 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import serve  # the server helpers of benchmarks/serve.py (this file's directory is on the path)

from attnlab.cpu import cpu_model

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ATTNLAB_DATA", ROOT.parent / "shared" / "data"))  # as the tests find it
SHAKESPEARE = DATA / "tinyshakespeare" / "input.txt"
NEW_TOKENS = 128


def build_model(directory: Path) -> Path:
    """gpt-bpe-small with random weights and a BPE trained on Tiny Shakespeare (see the module docstring)."""
    import torch

    from attnlab.io import save
    from attnlab.models.gpt import build_gpt
    from attnlab.models.gpt_presets import get_gpt_preset
    from attnlab.pretraining.causal_lm import train_causal_tokenizer
    from attnlab.tokenizers.files import save_tokenizer_json

    text = SHAKESPEARE.read_text(encoding="utf-8")[:300_000]
    tok = train_causal_tokenizer("byte_level_bpe", lambda: [[text]], 8192, None)
    torch.manual_seed(0)
    config = get_gpt_preset("gpt-bpe-small", vocab_size=tok.get_vocab_size(), eos_token_id=0, bos_token_id=0)
    d = directory / "gpt-bpe-small"
    save(build_gpt(config), d)
    save_tokenizer_json(tok, d / "tokenizer.json")
    return d


def prompts(directory: Path, n: int = 48, seed: int = 0) -> list[str]:
    """``n`` slices of Tiny Shakespeare, 8 to 100 tokens long by the model's tokenizer."""
    from attnlab.tokenizers import load_tokenizer

    tok = load_tokenizer(directory)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    rng, out = random.Random(seed), []
    while len(out) < n:
        start = rng.randrange(len(text) - 2000)
        ids = tok.encode(text[start : start + 1000], add_special_tokens=False).ids[: rng.randint(8, 100)]
        out.append(tok.decode(ids))
    return out


def expected_tokens(directory: Path, texts: list[str]) -> dict[str, list[int]]:
    """What `generate` gives each prompt alone, greedy, in this process (the served model's fast paths)."""
    import torch

    from attnlab.accel import optimize
    from attnlab.generation import generate
    from attnlab.io import load
    from attnlab.tokenizers import load_tokenizer

    model, tok = optimize(load(directory, expect="gpt2").eval()), load_tokenizer(directory)
    out = {}
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        out[t] = generate(model, torch.tensor([ids]), max_new_tokens=NEW_TOKENS).sequences[0]
    return out


# ------------------------------------------------------------------------------------------ the client


class StreamingConnection:
    """One keep-alive HTTP/1.1 connection: POST a streamed /v1/generate, read its events as they come."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def generate(self, body: bytes) -> tuple[float, dict]:
        """(seconds to the first text event, the ``done`` event's answer); raises on any error."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        sent = time.perf_counter()
        self.writer.write(
            b"POST /v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") != "chunked":
            raw = await self.reader.readexactly(int(headers.get("content-length", 0)))
            raise RuntimeError(f"HTTP {status}: {raw[:200]!r}")
        first, buffer, done = None, b"", None
        while True:  # chunks until the empty one
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                break
            buffer += chunk[:-2]
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if event.startswith(b"data: ") and first is None:
                    first = time.perf_counter() - sent
                elif event.startswith(b"event: done"):
                    done = json.loads(event.split(b"data: ", 1)[1])
                elif event.startswith(b"event: error"):
                    raise RuntimeError(f"error event: {event[:300]!r}")
        if status != 200 or done is None:
            raise RuntimeError(f"HTTP {status}, no done event")
        return (first if first is not None else time.perf_counter() - sent), done

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def load(port: int, texts: list[str], total: int, clients: int, stagger_s: float = 0.0) -> dict:
    """``total`` streamed generations from ``clients`` concurrent connections, client c starting
    ``c * stagger_s`` after the first (the wall time counts from the first)."""
    ttft: list[float] = []
    answers: list[tuple[str, list[int]]] = []
    errors: list[str] = []
    counter = iter(range(total))

    async def client(c: int) -> None:
        await asyncio.sleep(c * stagger_s)
        conn = StreamingConnection(port)
        try:
            for i in counter:
                text = texts[(i * 7 + c) % len(texts)]
                body = json.dumps({"text": text, "max_new_tokens": NEW_TOKENS, "stream": True}).encode()
                try:
                    first, done = await conn.generate(body)
                except (OSError, asyncio.IncompleteReadError, ValueError, RuntimeError) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    conn.close()
                    conn = StreamingConnection(port)
                    continue
                ttft.append(first)
                answers.append((text, done["tokens"]))
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    wall = time.perf_counter() - start
    tokens = sum(len(t) for _, t in answers)
    return {"ttft": ttft, "answers": answers, "errors": errors, "wall": wall, "tokens": tokens,
            "rate": tokens / wall}  # fmt: skip


def main(argv: list[str]) -> int:
    from attnlab.serving.server import free_port

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a GPT model directory (default: random gpt-bpe-small)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    ap.add_argument("--requests", type=int, default=2000, help="streamed generations under load")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--sequential", type=int, default=32, help="generations one at a time (the peer)")
    ap.add_argument(
        "--stagger-ms",
        type=float,
        default=150.0,
        help="client c starts c x this after the first: a stream of arrivals, not one burst",
    )
    ap.add_argument(
        "--peer-threads", type=int, default=None,
        help="torch threads of the server that answers one at a time (default: --threads); one row gains "
        "little from a second thread, so its best count may be lower than the batched server's",
    )  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="200 requests under load, 16 one at a time")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.sequential = 200, 16
    peer_threads = args.peer_threads or args.threads

    print(f"load before: {serve.load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        model = args.model or build_model(Path(tmp))
        texts = prompts(model)
        expected = expected_tokens(model, texts)
        print(f"model and the in-process answers ready in {time.perf_counter() - started:.0f} s")
        port = free_port()
        proc = serve.start_server(model, port, args.threads, [])
        try:
            serve.wait_ready(proc, port)
            asyncio.run(load(port, texts, 2 * args.clients, args.clients))  # warm-up
            if peer_threads == args.threads:
                alone = asyncio.run(load(port, texts, args.sequential, 1))
            busy = asyncio.run(load(port, texts, args.requests, args.clients, args.stagger_ms / 1000))
            steps = serve_steps(port)
        finally:
            serve.stop(proc)
        if peer_threads != args.threads:  # the peer on a server of its own, after the other has stopped
            port = free_port()
            proc = serve.start_server(model, port, peer_threads, [])
            try:
                serve.wait_ready(proc, port)
                asyncio.run(load(port, texts, 2, 1))  # warm-up
                alone = asyncio.run(load(port, texts, args.sequential, 1))
            finally:
                serve.stop(proc)

    wrong = [t for run in (alone, busy) for t, tokens in run["answers"] if tokens != expected[t]]
    what = args.model or "gpt-bpe-small (random weights, 8,192-token BPE)"
    print(f"model: {what}; {cpu_model()}, {os.cpu_count()} CPUs; torch threads of the server: {args.threads} "
          f"({peer_threads} for the one answering one at a time)")  # fmt: skip
    print(f"requests: /v1/generate streamed, greedy, {NEW_TOKENS} new tokens, prompts of 8 to 100 tokens; "
          f"the {args.clients} clients start {args.stagger_ms:g} ms apart")  # fmt: skip
    print(f"load after:  {serve.load_average()}")
    print()
    rows = [("measure", f"{args.clients} clients", "one at a time", "ratio", "target")]
    rows.append(("generated tokens/s", f"{busy['rate']:.0f}", f"{alone['rate']:.0f}",
                 f"{busy['rate'] / alone['rate']:.2f}", ">= 3x"))  # fmt: skip
    rows.append(("time to first token p50 (ms)", f"{1000 * serve.pct(busy['ttft'], 50):.0f}",
                 f"{1000 * serve.pct(alone['ttft'], 50):.0f}", "", "< 150 ms"))  # fmt: skip
    rows.append(("time to first token p99 (ms)", f"{1000 * serve.pct(busy['ttft'], 99):.0f}",
                 f"{1000 * serve.pct(alone['ttft'], 99):.0f}", "", ""))  # fmt: skip
    rows.append((f"errors in {args.requests:,} requests", str(len(busy["errors"])), str(len(alone["errors"])),
                 "", "0"))  # fmt: skip
    rows.append(("answers unlike generate alone", str(len(wrong)), "", "", "0"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print()
    print(f"under load: {busy['tokens']:,} tokens in {busy['wall']:.1f} s; one at a time: "
          f"{alone['tokens']:,} in {alone['wall']:.1f} s; decode steps: {steps}")  # fmt: skip
    if busy["errors"] or alone["errors"]:
        print("first errors:", (busy["errors"] + alone["errors"])[:5])
    return 0


def serve_steps(port: int) -> str:
    """The server's decode steps and their mean rows."""
    n, mean = serve.batch_sizes(port, "generate")
    return f"{n:,.0f}, {mean:.1f} rows on average"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
