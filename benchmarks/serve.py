"""``attnlab serve`` under load: latency with one client, dynamic batching against batch size 1 with 16
concurrent clients, 10,000 requests without an error, and resident memory before and after them.

    .venv/bin/python benchmarks/serve.py                       # bert-mini fill-mask (the README's table)
    .venv/bin/python benchmarks/serve.py --requests 2000 --rounds 2 --soak 2000   # a quicker look
    .venv/bin/python benchmarks/serve.py --model runs/mlm/model               # a trained model instead
    .venv/bin/python benchmarks/serve.py --int8                               # both servers int8
    .venv/bin/python benchmarks/serve.py --generation [--quick]   # a GPT generating (serve_generation.py)

Two real servers (``attnlab serve`` subprocesses on 127.0.0.1 only) hold the same model: one with dynamic
batching (the defaults: ``--max-batch-size 64 --max-wait-ms 5``) and one with ``--max-batch-size 1`` (every
request its own forward pass: the peer). The load generator is a bounded asyncio client in this process (a
fixed number of requests; HTTP/1.1 keep-alive connections written with asyncio streams, so the client costs
little CPU beside the servers). Throughput rounds alternate between the two servers so background load hits
both alike; the table gives the median round and the ratio.

Default model: the ``bert-mini`` preset (4 layers, 256 wide, 11.2M parameters) as a masked LM with random
weights and the bert-base-uncased WordPiece vocabulary (30,522 tokens) from ``../shared/data/tokenizers``
(a generated vocabulary of the same size when that is absent): latency depends on the shapes, not on what
the weights learned. Requests are fill-mask on 64 sentences of 6 to 25 words with one [MASK] each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_VOCAB = ROOT.parent / "shared" / "data" / "tokenizers" / "bert-base-uncased" / "vocab.txt"
WORDS = (
    "the a city river people time year school music world house water light night paper king game story "
    "country family language war power field road music film church party state market team book"
).split()


def build_model(directory: Path) -> Path:
    import torch

    from attnlab.models import EncoderForPreTraining, get_preset
    from attnlab.tasks.finetune import save_model_dir
    from attnlab.tokenizers import bert_wordpiece

    if SHARED_VOCAB.is_file():
        tokens = SHARED_VOCAB.read_text(encoding="utf-8").splitlines()
    else:
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
        tokens += [f"w{i}" for i in range(30522 - len(tokens))]
    vocab = {t: i for i, t in enumerate(tokens)}
    torch.manual_seed(0)
    config = get_preset("bert-mini", vocab_size=len(vocab))
    return save_model_dir(
        EncoderForPreTraining.from_config(config), bert_wordpiece(vocab), directory / "bert-mini"
    )


def sentences(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 25))]
        words[rng.randrange(len(words))] = "[MASK]"
        out.append(json.dumps({"text": " ".join(words) + ".", "top_k": 5}).encode())
    return out


# ------------------------------------------------------------------------------------------ the client


class Connection:
    """One keep-alive HTTP/1.1 connection: POST a JSON body, read the status and the body."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(port: int, bodies: list[bytes], total: int, clients: int) -> dict:
    """``total`` requests from ``clients`` concurrent connections; latencies, errors and wall time."""
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(total))

    async def client(c: int) -> None:
        conn = Connection(port)
        try:
            for i in counter:
                t = time.perf_counter()
                try:
                    status, body = await conn.post("/v1/fill-mask", bodies[(i * 7 + c) % len(bodies)])
                except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    conn.close()
                    conn = Connection(port)
                    continue
                latencies.append(time.perf_counter() - t)
                if status != 200:
                    errors.append(f"HTTP {status}: {body[:200]!r}")
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    wall = time.perf_counter() - start
    return {"latencies": latencies, "errors": errors, "wall": wall, "rps": len(latencies) / wall}


def run_load(*args) -> dict:
    return asyncio.run(load(*args))


# ----------------------------------------------------------------------------------------- the servers


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(model: Path, port: int, threads: int, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "attnlab", "serve", str(model), "--port", str(port)]
    cmd += ["--threads", str(threads), *extra]  # --cpu-gemm: attnlab serve's default unless given
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)


def wait_ready(proc: subprocess.Popen, port: int, timeout: float = 180) -> None:
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server on port {port} was not ready in {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()  # SIGTERM: graceful shutdown
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min; {os.cpu_count()} CPUs)"


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (nearest rank; NaN for none)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> int:
    from attnlab.serving.server import free_port

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="a masked-LM model directory (default: random bert-mini)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per server")
    ap.add_argument("--latency-requests", type=int, default=500, help="sequential requests, one client")
    ap.add_argument("--requests", type=int, default=2000, help="requests per throughput round")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds per server, alternated")
    ap.add_argument("--soak", type=int, default=10_000, help="requests for the error and memory check")
    ap.add_argument("--cpu-gemm", choices=["default", "onednn"], help="passed to attnlab serve")
    ap.add_argument("--int8", action="store_true", help="passed to attnlab serve: both servers int8")
    ap.add_argument("--warmup", type=int, default=1000, help="requests from all clients before measuring")
    args = ap.parse_args()

    print(f"load before: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_model(Path(tmp))
        bodies = sentences(64)
        ports = {"dynamic": free_port(), "batch size 1": free_port()}
        gemm = (["--cpu-gemm", args.cpu_gemm] if args.cpu_gemm else []) + (["--int8"] if args.int8 else [])
        extra = {"dynamic": gemm, "batch size 1": [*gemm, "--max-batch-size", "1"]}
        procs = {name: start_server(model, ports[name], args.threads, extra[name]) for name in ports}
        try:
            for name, proc in procs.items():
                wait_ready(proc, ports[name])
            for name in ports:  # warm-up: the batch shapes the runs will see
                run_load(ports[name], bodies, args.warmup, args.clients)
                run_load(ports[name], bodies, 50, 1)
            rss_warm = rss_mib(procs["dynamic"].pid)

            lat = {name: [] for name in ports}
            for _ in range(5):  # one client, interleaved in five chunks
                for name in ports:
                    got = run_load(ports[name], bodies, args.latency_requests // 5, 1)
                    assert not got["errors"], got["errors"][:3]
                    lat[name] += got["latencies"]

            rps = {name: [] for name in ports}
            for _ in range(args.rounds):
                for name in ports:
                    got = run_load(ports[name], bodies, args.requests, args.clients)
                    assert not got["errors"], got["errors"][:3]
                    rps[name].append(got["rps"])

            soak = run_load(ports["dynamic"], bodies, args.soak, args.clients)
            rss_after = rss_mib(procs["dynamic"].pid)
            metrics = _batch_sizes(ports["dynamic"])
        finally:
            for proc in procs.values():
                stop(proc)

    what = model if args.model else "bert-mini (random weights, 30,522-token WordPiece)"
    print(f"model: {what}; torch threads per server: {args.threads}; --cpu-gemm {args.cpu_gemm or 'default'}")
    print("requests: fill-mask, top_k 5")
    print(f"load after:  {load_average()}")
    print()
    rows = [("measure", "dynamic batching", "batch size 1", "ratio", "target")]
    p50 = {n: 1000 * pct(v, 50) for n, v in lat.items()}
    p99 = {n: 1000 * pct(v, 99) for n, v in lat.items()}
    rows.append(("p50 latency, 1 client (ms)", f"{p50['dynamic']:.1f}", f"{p50['batch size 1']:.1f}",
                 f"{p50['dynamic'] / p50['batch size 1']:.2f}", "< 50 ms"))  # fmt: skip
    rows.append(("p99 latency, 1 client (ms)", f"{p99['dynamic']:.1f}", f"{p99['batch size 1']:.1f}",
                 f"{p99['dynamic'] / p99['batch size 1']:.2f}", "< 200 ms"))  # fmt: skip
    med = {n: statistics.median(v) for n, v in rps.items()}
    dyn, one = med["dynamic"], med["batch size 1"]
    rows.append(
        (
            f"throughput, {args.clients} clients (req/s)",
            f"{dyn:.0f}",
            f"{one:.0f}",
            f"{dyn / one:.2f}",
            ">= 2x",
        )
    )
    rows.append(
        (f"{args.soak:,} requests, {args.clients} clients: errors", str(len(soak["errors"])), "", "", "0")
    )
    soak_ms = f"{1000 * pct(soak['latencies'], 50):.1f} / {1000 * pct(soak['latencies'], 99):.1f}"
    rows.append(("  their p50 / p99 latency (ms)", soak_ms, "", "", ""))
    rows.append(("resident memory after warm-up (MiB)", f"{rss_warm:.1f}", "", "", ""))
    rows.append((f"resident memory after the {args.soak:,} (MiB)", f"{rss_after:.1f}", "",
                 f"{rss_after / rss_warm:.3f}", "within 5%"))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print()
    print(f"throughput rounds (req/s): dynamic {[round(x) for x in rps['dynamic']]}, "
          f"batch size 1 {[round(x) for x in rps['batch size 1']]}")  # fmt: skip
    print(f"dynamic server's batches: {metrics}")
    if soak["errors"]:
        print("first errors:", soak["errors"][:5])
    return 0


def batch_sizes(port: int, endpoint: str) -> tuple[float, float]:
    """(batches, mean rows per batch) of ``endpoint`` on the server at ``port``, from its /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        for key in ("attnlab_batch_size_sum", "attnlab_batch_size_count"):
            if line.startswith(key + f'{{endpoint="{endpoint}"}}'):
                values[key] = float(line.split()[-1])
    n = values.get("attnlab_batch_size_count", 0)
    return n, values.get("attnlab_batch_size_sum", 0) / max(n, 1)


def _batch_sizes(port: int) -> str:
    """Mean requests per batch on the dynamic server."""
    n, mean = batch_sizes(port, "fill-mask")
    return f"{n:.0f} batches, {mean:.2f} requests per batch on average"


if __name__ == "__main__":
    if "--generation" in sys.argv[1:]:  # continuous batching under load, in its own module
        import serve_generation

        sys.exit(serve_generation.main([a for a in sys.argv[1:] if a != "--generation"]))
    sys.exit(main())
