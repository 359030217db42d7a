"""Local (sliding-window) attention vs full attention: time and peak memory over sequence length.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_attention.py                 # the table (~2 min)
    .venv/bin/python benchmarks/local_attention.py --lengths 512,4096 --repeats 2     # a quick look

What it does: one attention call, forward + backward, on random float32 query/key/value (B = 1, N = 4 heads,
D = 64, so H = 256) at T = 512 .. 8,192, window W = 128 on each side (bidirectional; ``--causal``):

- ``local``: `attnlab.nn.local_attention.local_attention` ((W, 3W) tiles);
- ``full``: ``torch.nn.functional.scaled_dot_product_attention`` without a mask, PyTorch's fused CPU kernel
  (flash-style: it never holds the T x T scores, so its memory is linear too; its time is quadratic) -- the
  fastest full attention, the speed peer;
- ``band``: the same kernel given the dense T x T band mask (`band_mask`): what local attention equals,
  computed the naive way; quadratic memory (the memory peer).

Time: median of ``--repeats`` calls, the methods interleaved in each round so background load hits all
alike; ``full / local`` is the speed-up. Memory: peak resident-set growth of a fresh child process running
one forward + backward: the kernel's high-water mark (VmHWM, reset just before the call) minus the resident
set before it (inputs allocated): a measured peak of everything the call allocates, not an estimate. Beside
it, the analytic size of the largest tensor: local's scores ``N * T * (3W) * 4`` bytes, the band mask's
``T * T * 4``. The load average is printed with the table: on a shared machine the ratios are the figure to
read, the milliseconds move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnlab.nn.local_attention import band_mask, local_attention  # noqa: E402

HEADS, HEAD_DIM = 4, 64


def make_inputs(t: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, HEADS, t, HEAD_DIM, generator=g).requires_grad_() for _ in range(3))


def run(method: str, q, k, v, window: int, causal: bool) -> None:
    """One forward + backward of ``method``."""
    if method == "local":
        out = local_attention(q, k, v, window, causal=causal)
    elif method == "full":
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:  # band: dense SDPA with the T x T band mask
        mask = band_mask(q.size(2), window, causal)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.sum().backward()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_child(method: str, t: int, window: int, causal: bool, threads: int) -> None:
    """In a fresh process: print the peak RSS growth (bytes) of one forward + backward.

    The kernel's peak (VmHWM) is reset after the inputs exist (``echo 5 > /proc/self/clear_refs``), and the
    parent sets ``MALLOC_MMAP_THRESHOLD_`` so freed large buffers leave the resident set instead of being
    reused silently."""
    torch.set_num_threads(threads)
    q, k, v = make_inputs(t)
    warm = make_inputs(64)
    run(method, *warm, min(window, 16), causal)  # load kernels before the baseline
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    run(method, q, k, v, window, causal)
    print(json.dumps({"peak_bytes": (_status_kib("VmHWM") - before) * 1024}))


def measure_peak(method: str, t: int, window: int, causal: bool, threads: int) -> int:
    cmd = [sys.executable, __file__, "--child", method, "--lengths", str(t), "--window", str(window),
           "--threads", str(threads)] + (["--causal"] if causal else [])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ".", "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", default="512,1024,2048,4096,8192")
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-memory", action="store_true", help="time only")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.child:
        peak_child(args.child, lengths[0], args.window, args.causal, args.threads)
        return 0
    torch.set_num_threads(args.threads)
    print(f"local attention benchmark: B=1, N={HEADS}, D={HEAD_DIM}, W={args.window}, "
          f"{'causal' if args.causal else 'bidirectional'}, float32, forward + backward, "
          f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}")  # fmt: skip
    print("load average at start (1/5/15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    # equality first: the benchmark times the function the tests check
    q, k, v = make_inputs(300)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=band_mask(300, 16, args.causal))
    assert (local_attention(q, k, v, 16, args.causal) - ref).abs().max() < 1e-5
    header = (f"{'T':>6s} {'local ms':>9s} {'full ms':>9s} {'full/local':>10s} {'band ms':>9s}"
              + ("" if args.no_memory else f" {'local MiB':>10s} {'full MiB':>9s} {'band MiB':>9s}"
                 f" {'local scores MiB':>16s} {'band mask MiB':>13s}"))  # fmt: skip
    print(header)
    rows = []
    for t in lengths:
        q, k, v = make_inputs(t)
        methods = ("local", "full", "band")
        for m in methods:  # warm-up
            run(m, q, k, v, args.window, args.causal)
        times: dict[str, list[float]] = {m: [] for m in methods}
        for _ in range(args.repeats):
            for m in methods:
                q.grad = k.grad = v.grad = None
                start = time.perf_counter()
                run(m, q, k, v, args.window, args.causal)
                times[m].append(time.perf_counter() - start)
        med = {m: 1000 * statistics.median(ts) for m, ts in times.items()}
        speedup = med["full"] / med["local"]
        line = f"{t:6d} {med['local']:9.1f} {med['full']:9.1f} {speedup:10.2f} {med['band']:9.1f}"
        row = {"T": t, **{f"{m}_ms": med[m] for m in methods}}
        if not args.no_memory:
            mib = {m: measure_peak(m, t, args.window, args.causal, args.threads) / 2**20 for m in methods}
            scores = HEADS * t * 3 * args.window * 4 / 2**20
            mask = t * t * 4 / 2**20
            line += f" {mib['local']:10.1f} {mib['full']:9.1f} {mib['band']:9.1f} {scores:16.1f} {mask:13.1f}"
            row.update({f"{m}_peak_mib": mib[m] for m in methods})
        rows.append(row)
        print(line, flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if not args.no_memory and len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = last["local_peak_mib"] / max(first["local_peak_mib"], 1e-9)
        print(f"local peak memory x{growth:.1f} from T={first['T']} to T={last['T']} "
              f"(length x{last['T'] / first['T']:.0f}; linear = the same factor)")  # fmt: skip
    at = [r for r in rows if r["T"] == 4096]
    if at:
        ratio = at[0]["full_ms"] / at[0]["local_ms"]
        print(f"T=4096, W={args.window}: local is {ratio:.2f}x faster than full attention (target >= 3x: "
              f"{'PASS' if ratio >= 3 else 'FAIL'})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
