"""float32 CPU matmul throughput: PyTorch's ``F.linear`` (MKL sgemm) vs attnlab's `linear` (oneDNN).

    .venv/bin/python benchmarks/gemm.py                 # BERT-base and Transformer-base shapes
    .venv/bin/python benchmarks/gemm.py --threads 1 --repeats 50
    .venv/bin/python benchmarks/gemm.py --threads 1 --small-rows     # decoding's few-row products

For each (M, K, N): the forward ``x (M, K) @ W^T (K, N)`` and the two backward products (``dy @ W`` and
``dy^T @ x``), GFLOPS of each library (median of ``--repeats`` after warm-up) and the ratio attnlab / PyTorch
(> 1: attnlab faster), plus the largest relative difference of the results. This is why
`attnlab.accel.onednn_linear` exists (see its module docstring); the model-level effect is in
encoder_inference.py and translation.py.

``--small-rows``: the products of one decoding step (1, 2, 4 and 8 rows, no gradient) in PyTorch's three
layouts: ``x @ W^T`` (``F.linear``), ``x @ W`` with W stored (K, N), and ``(W @ x^T)^T``, against attnlab's
few-row kernel (`attnlab.accel.few_row_gemm`, on its panel copy of W) and the ratio of the fastest PyTorch
layout's time to the kernel's (> 1: the kernel faster); microseconds per product, each weight read from
memory (the product cycles over copies of it totalling ``--stream-mb``, as a decoding step streams all of a
model's weights), the forms interleaved, median of ``--repeats`` rounds; plus the form `small_product` picks
and its time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # keep sibling scripts (tokenizers.py) from shadowing libraries

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnlab.accel import few_row_gemm  # noqa: E402
from attnlab.accel import linear as lin_mod  # noqa: E402
from attnlab.accel import onednn_linear as gemm  # noqa: E402

SHAPES = [  # (M, K, N, what)
    (128, 768, 768, "BERT-base attention projection, B=1 T=128"),
    (1024, 768, 3072, "BERT-base FFN up, B=8 T=128"),
    (1024, 3072, 768, "BERT-base FFN down, B=8 T=128"),
    (768, 512, 512, "Transformer-base projection, B=32 T=24"),
    (768, 512, 8000, "Transformer-base generator, V=8000"),
    (64, 512, 2048, "beam step: 16 sentences x 4 beams, FFN up"),
]


def median_seconds(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


SMALL_ROW_SHAPES = [  # (N, K, what): gpt-bpe-small (width 384, vocabulary 8,192) and gpt-char-tiny (128)
    (8192, 384, "GPT output layer"),
    (1536, 384, "feed-forward up"),
    (1152, 384, "stacked q, k, v"),
    (384, 384, "attention output"),
    (384, 1536, "feed-forward down"),
    (512, 128, "gpt-char-tiny feed-forward up (stays in cache)"),
    (3072, 768, "GPT-2 feed-forward up"),
]


def small_rows_table(repeats: int, stream_mb: float) -> None:
    """Microseconds per product of `SMALL_ROW_SHAPES` at 1, 2 and 8 rows, in each layout."""
    print(f"# decoding's few-row products, float32 CPU, {torch.get_num_threads()} thread(s), torch "
          f"{torch.__version__}; us per product, median of {repeats} interleaved rounds; weights cycled "
          f"over {stream_mb:g} MB unless the shape says it stays in cache")  # fmt: skip
    kernel = few_row_gemm.available()
    if not kernel:
        print(f"# the few-row kernel is not available here: {few_row_gemm.unavailable_reason()}")
    head = (f"{'N':>5} {'K':>5} {'rows':>4} {'x @ W^T':>9} {'x @ W':>9} {'(W x^T)^T':>10} {'kernel':>8} "
            f"{'best BLAS/kernel':>16} {'picked':>9}  shape")  # fmt: skip
    print(head)
    print("-" * len(head))
    g = torch.Generator().manual_seed(0)
    holder = torch.nn.Module()
    for n, k, what in SMALL_ROW_SHAPES:
        copies = 4 if "cache" in what else max(2, int(stream_mb * 1e6 / (n * k * 4)))
        weights = [torch.randn(n, k, generator=g) for _ in range(copies)]
        transposed = [w.t().contiguous() for w in weights]
        bias = torch.randn(n, generator=g)
        panels = [few_row_gemm.panels(holder, w, f"_p{i}") for i, w in enumerate(weights)] if kernel else []
        for rows in (1, 2, 4, 8):
            x = torch.randn(rows, k, generator=g)
            forms = {  # the tensors bound as defaults
                "x @ W^T": lambda x=x, ws=weights, b=bias: [F.linear(x, w, b) for w in ws],
                "x @ W": lambda x=x, wts=transposed, b=bias: [torch.addmm(b, x, wt) for wt in wts],
                "(W x^T)^T": lambda x=x, ws=weights, b=bias: [
                    torch.addmm(b[:, None], w, x.t()).t() for w in ws
                ],  # fmt: skip
                "kernel": lambda x=x, ps=panels, b=bias, n=n: [few_row_gemm.product(x, p, b, n) for p in ps],
                "picked": lambda x=x, ws=weights, b=bias: [
                    lin_mod.small_product(holder, x, w, b, f"_t{i}") for i, w in enumerate(ws)
                ],
            }
            times: dict[str, list[float]] = {name: [] for name in forms}
            with torch.no_grad():
                for name, fn in forms.items():
                    if name != "kernel" or kernel:
                        fn()
                for _ in range(repeats):
                    for name, fn in forms.items():
                        if name == "kernel" and not kernel:
                            continue
                        start = time.perf_counter()
                        fn()
                        times[name].append((time.perf_counter() - start) / copies * 1e6)
            us = {name: statistics.median(t) if t else float("nan") for name, t in times.items()}
            best = min(us["x @ W^T"], us["x @ W"], us["(W x^T)^T"])
            blas = f"{us['x @ W^T']:>9.0f} {us['x @ W']:>9.0f} {us['(W x^T)^T']:>10.0f}"
            print(f"{n:>5} {k:>5} {rows:>4} {blas} {us['kernel']:>8.0f} {best / us['kernel']:>16.2f} "
                  f"{us['picked']:>9.0f}  {what}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    p.add_argument("--small-rows", action="store_true", help="decoding's few-row products instead")
    p.add_argument("--stream-mb", type=float, default=80.0, help="--small-rows: MB of weights cycled over")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.small_rows:
        small_rows_table(args.repeats, args.stream_mb)
        return 0
    if gemm._OP is None:
        print("this PyTorch build has no oneDNN linear operator: attnlab uses F.linear, nothing to compare")
        return 0
    mm = gemm._mm
    print(f"# float32 CPU, {torch.get_num_threads()} threads, torch {torch.__version__}; GFLOPS, median of "
          f"{args.repeats}; ratio = attnlab (oneDNN) / PyTorch F.linear (MKL)")  # fmt: skip
    cols = ("M", "K", "N", "product", "PyTorch", "attnlab", "ratio", "rel diff")
    head = "{:>5} {:>5} {:>5}  {:<9} {:>8} {:>8} {:>6} {:>9}  shape".format(*cols)
    print(head)
    print("-" * len(head))
    g = torch.Generator().manual_seed(0)
    for m, k, n, what in SHAPES:
        x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
        dy = torch.randn(m, n, generator=g)
        cases = [  # (name, PyTorch's product, attnlab's, FLOPs); the tensors are bound as defaults
            ("forward", lambda x=x, w=w: F.linear(x, w), lambda x=x, w=w: mm(x, w, None)),
            ("dx=dy W", lambda dy=dy, w=w: dy @ w, lambda dy=dy, w=w: mm(dy, w.t(), None)),
            ("dW=dy'x", lambda dy=dy, x=x: dy.t() @ x, lambda dy=dy, x=x: mm(dy.t(), x.t(), None)),
        ]
        flops = 2 * m * k * n
        for name, ref_fn, ours_fn in cases:
            ref, ours = ref_fn(), ours_fn()
            rel = ((ours - ref).abs().max() / ref.abs().max()).item()
            t_ref, t_ours = median_seconds(ref_fn, args.repeats), median_seconds(ours_fn, args.repeats)
            print(f"{m:>5} {k:>5} {n:>5}  {name:<9} {flops / t_ref / 1e9:>8.0f} {flops / t_ours / 1e9:>8.0f} "
                  f"{t_ref / t_ours:>6.2f} {rel:>9.1e}  {what}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
