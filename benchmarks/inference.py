"""CPU inference: attnlab (eager, torch.compile, int8) against HF transformers and ONNX Runtime (fp32, int8),
same weights, one run (issue 14).

    python benchmarks/inference.py                   # bert-base and bert-mini, 1 and 2 threads
    python benchmarks/inference.py --models bert-mini --threads 1 --repeats 5 --no-compile   # quick look

For each model (random weights: speed does not depend on them; every engine holds the same ones), thread
count and shape -- B=1 T=128 (latency) and B=32 T=128 (throughput) -- the engines run interleaved, one
forward each per round, so background load hits them alike; the table gives the median over ``--repeats``
rounds after ``--warmup`` rounds, tokens/s for the throughput shape, and each engine's ratio to ONNX Runtime
fp32 and int8 (< 1: faster than ONNX Runtime). Engines:

- ``attnlab``: `attnlab.models.Encoder`, eager, ``torch.inference_mode`` (each layer through PyTorch's fused
  encoder-layer kernel where it applies, `attnlab.nn.fused_layer`);
- ``attnlab modules``: the same model with that path off (each sub-module called), to show what it gains;
- ``attnlab compile``: the same under ``torch.compile`` (inductor; compiled before timing);
- ``attnlab int8``: `attnlab.inference.quantize` (every linear layer int8, activations quantized per call);
- ``HF``: transformers ``BertModel`` (SDPA attention) with the attnlab weights (`attnlab.io.to_hf`);
- ``ORT fp32`` / ``ORT int8``: `attnlab.inference.export_onnx` of the same model on ONNX Runtime, and
  ``onnxruntime.quantization.quantize_dynamic`` of that graph; intra-op spinning off (it would steal the next
  engine's cores), ``intra_op_num_threads`` = the thread count. PyTorch's engines run with the peer setting,
  ``OMP_WAIT_POLICY=PASSIVE`` (set by the script unless the environment sets it).

All engines are checked against attnlab eager before timing (fp32 engines: max abs difference of the last
hidden state; int8: relative error). The attention mask is all ones (full-length sequences). The machine's
load (``os.getloadavg``) is printed before and after: timings on a shared machine compare only as ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script's name (tokenizers.py)
# would shadow the library transformers imports. Benchmarks import nothing from each other.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

# ONNX Runtime runs with intra-op spinning off; the peer setting for PyTorch's OpenMP threads is the
# passive wait policy (GNU OpenMP spins at every barrier by default). On a shared 2-core machine spinning
# costs torch 7-30x at B=1 with 2 threads (measured: bert-mini 497 ms spinning, 11.5 ms passive, ORT 10-15
# ms). libgomp reads it when torch loads it: set before the import; OMP_WAIT_POLICY=ACTIVE overrides.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from attnlab.io import to_hf  # noqa: E402
from attnlab.models import Encoder, get_preset  # noqa: E402

SHAPES = ((1, 128), (32, 128))
ENGINES = ("attnlab", "attnlab modules", "attnlab compile", "attnlab int8", "HF", "ORT fp32", "ORT int8")
FP32_ENGINES = ("attnlab", "attnlab modules", "attnlab compile")  # attnlab's float32 paths


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="bert-base-uncased,bert-mini", help="comma-separated attnlab presets")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per shape (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds per shape first")
    p.add_argument(
        "--max-seconds", type=float, default=40.0,
        help="per shape and thread count: fewer rounds (at least 3) when one round of all engines is slower",
    )  # fmt: skip
    p.add_argument("--no-compile", action="store_true", help="leave out attnlab compile (compiling is slow)")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    return args


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def build_hf(ours: Encoder) -> torch.nn.Module:
    import transformers

    hf_config, state = to_hf(ours, family="bert")
    hf_config = {k: v for k, v in hf_config.items() if k not in ("architectures", "dtype")}
    config = transformers.AutoConfig.for_model(**hf_config)
    theirs = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise RuntimeError(f"HF BertModel did not take the weights: missing {missing}, extra {unexpected}")
    return theirs


class Engines:
    """Every engine of one model, as ``name -> (batch -> last hidden state)`` callables."""

    def __init__(self, preset: str, workdir: Path, compile_: bool) -> None:
        from attnlab.inference import quantize
        from attnlab.inference.onnx_export import export_onnx

        torch.manual_seed(0)
        self.model = Encoder(get_preset(preset, hidden_dropout=0.0, attention_dropout=0.0)).eval()
        self.hf = build_hf(self.model)
        self.int8 = quantize(self.model)
        self.compiled = torch.compile(self.model, dynamic=False) if compile_ else None
        self.onnx_dir = workdir / preset
        start = time.perf_counter()
        export_onnx(self.model, self.onnx_dir, int8=True)
        self.export_s = time.perf_counter() - start
        self.sessions: dict[int, dict[str, object]] = {}

    def ort(self, threads: int) -> dict[str, object]:
        from attnlab.inference.onnx_runner import OnnxRunner

        if threads not in self.sessions:  # a session's thread pool is fixed when it is created
            self.sessions[threads] = {
                "ORT fp32": OnnxRunner(self.onnx_dir, threads=threads),
                "ORT int8": OnnxRunner(self.onnx_dir, threads=threads, int8=True),
            }
        return self.sessions[threads]

    def modules(self, batch: dict[str, torch.Tensor]) -> Tensor:
        """attnlab eager with the fused encoder-layer path off."""
        from attnlab.nn.fused_layer import fused_layers

        with fused_layers(False):
            return self.model(**batch).last_hidden_state

    def callables(self, threads: int, batch: dict[str, torch.Tensor]) -> dict[str, Callable[[], Tensor]]:
        ort = self.ort(threads)
        compiled = self.compiled  # an OptimizedModule: no truth value (len() raises)
        fns = {
            "attnlab": lambda: self.model(**batch).last_hidden_state,
            "attnlab modules": lambda: self.modules(batch),
            "attnlab compile": None if compiled is None else (lambda: compiled(**batch).last_hidden_state),
            "attnlab int8": lambda: self.int8(**batch).last_hidden_state,
            "HF": lambda: self.hf(**batch).last_hidden_state,
            "ORT fp32": lambda: ort["ORT fp32"](**batch).last_hidden_state,
            "ORT int8": lambda: ort["ORT int8"](**batch).last_hidden_state,
        }
        return {k: v for k, v in fns.items() if v is not None}


def check(fns: dict[str, Callable[[], torch.Tensor]]) -> dict[str, str]:
    """Each engine's output against attnlab eager: max abs difference (fp32) or relative error (int8)."""
    ref = fns["attnlab"]()
    notes = {}
    for name, fn in fns.items():
        out = fn().float()
        if "int8" in name:
            notes[name] = f"rel err {((out - ref).norm() / ref.norm()).item():.3f}"
        else:
            diff = (out - ref).abs().max().item()
            if diff > 1e-3:
                raise RuntimeError(f"{name}: last hidden state differs from attnlab's by {diff:.2e}")
            notes[name] = f"max|diff| {diff:.1e}"
    return notes


def time_shape(fns: dict[str, Callable[[], torch.Tensor]], args: argparse.Namespace) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    rounds = args.repeats
    for r in range(args.warmup + rounds):
        start_round = time.perf_counter()
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if r >= args.warmup:
                times[name].append(time.perf_counter() - start)
        if r == 0:  # one round's cost decides how many fit in --max-seconds
            per_round = time.perf_counter() - start_round
            rounds = max(3, min(args.repeats, int(args.max_seconds / max(per_round, 1e-9))))
        if r + 1 >= args.warmup + rounds:
            break
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import onnxruntime
        import transformers
    except ImportError as e:
        print(f"this benchmark needs transformers and onnxruntime: pip install 'attnlab[test]' ({e})",
              file=sys.stderr)  # fmt: skip
        return 2
    print(
        f"# CPU inference, encoder forward (last hidden state); torch {torch.__version__}, transformers "
        f"{transformers.__version__}, onnxruntime {onnxruntime.__version__}; median over rounds of the "
        "engines interleaved; ratios: engine / ORT (< 1 = faster than ONNX Runtime); OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY')}, ORT intra-op spinning off"
    )
    print(f"# before: {load()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp, torch.inference_mode():
        for preset in args.models:
            with torch.inference_mode(False):
                engines = Engines(preset, Path(tmp), compile_=not args.no_compile)
            print(f"# {preset}: ONNX export + int8 quantization {engines.export_s:.0f} s", flush=True)
            for threads in args.threads:
                torch.set_num_threads(threads)
                for b, t in SHAPES:
                    g = torch.Generator().manual_seed(b * 1000 + t)
                    ids = torch.randint(1000, engines.model.config.vocab_size, (b, t), generator=g)
                    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                             "token_type_ids": torch.zeros_like(ids)}  # fmt: skip
                    fns = engines.callables(threads, batch)
                    notes = check(fns)  # also compiles (attnlab compile) for this shape
                    medians = time_shape(fns, args)
                    for name in fns:
                        rows.append((preset, threads, b, t, name, medians[name], medians["ORT fp32"],
                                     medians["ORT int8"], notes[name]))  # fmt: skip
                    _print_block(rows[-len(fns) :])
    print(f"# after: {load()}")
    _print_summary(rows)
    return 0


def _print_block(rows: list[tuple]) -> None:
    preset, threads, b, t = rows[0][:4]
    print(f"\n{preset}, {threads} thread(s), B={b} T={t}")
    print(f"  {'engine':<16} {'ms':>9} {'tokens/s':>10} {'/ORT fp32':>10} {'/ORT int8':>10}  check")
    for _, _, b, t, name, m, fp32, int8, note in rows:
        print(f"  {name:<16} {1000 * m:>9.1f} {b * t / m:>10.0f} {m / fp32:>10.2f} {m / int8:>10.2f}  {note}")
    sys.stdout.flush()


def _print_summary(rows: list[tuple]) -> None:
    """The issue's goals: attnlab's best path <= ORT int8; attnlab fp32 (eager or compiled) <= ORT fp32."""
    print("\nsummary (ms; ratio to ORT):")
    print(f"  {'model':<18} {'thr':>3} {'B':>3} {'attnlab fp32':>13} {'ORT fp32':>9} {'ratio':>6}   "
          f"{'attnlab best':>13} {'ORT int8':>9} {'ratio':>6}")  # fmt: skip
    keys = sorted({r[:4] for r in rows}, key=lambda k: (k[0], k[1], k[2]))
    for key in keys:
        mine = {r[4]: r[5] for r in rows if r[:4] == key}
        fp32_name = min((n for n in FP32_ENGINES if n in mine), key=mine.get)
        best_name = min((n for n in mine if n.startswith("attnlab")), key=mine.get)
        preset, threads, b, _ = key
        print(
            f"  {preset:<18} {threads:>3} {b:>3} {1000 * mine[fp32_name]:>13.1f} "
            f"{1000 * mine['ORT fp32']:>9.1f} "
            f"{mine[fp32_name] / mine['ORT fp32']:>6.2f}   {1000 * mine[best_name]:>13.1f} "
            f"{1000 * mine['ORT int8']:>9.1f} {mine[best_name] / mine['ORT int8']:>6.2f}  "
            f"({fp32_name}; {best_name})"
        )


if __name__ == "__main__":
    sys.exit(main())
