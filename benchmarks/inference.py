"""CPU inference: attnlab (eager, torch.compile, int8) against HF transformers and ONNX Runtime (fp32, int8),
same weights, one run.

    python benchmarks/inference.py                   # bert-base and bert-mini, 1 and 2 threads
    python benchmarks/inference.py --models bert-mini --threads 1 --repeats 5 --no-compile   # quick look

For each model (random weights: speed does not depend on them; every engine holds the same ones), thread
count and shape -- B=1 T=128 (latency) and B=32 T=128 (throughput) -- the engines run interleaved, one
forward each per round, so background load hits them alike; the table gives the median over ``--repeats``
rounds after ``--warmup`` rounds, tokens/s for the throughput shape, and each engine's ratio to ONNX Runtime
fp32 and int8 (< 1: faster than ONNX Runtime). Engines:

- ``attnlab``: `attnlab.models.Encoder`, eager, ``torch.inference_mode`` (each layer as one function on
  attnlab's product kernel on CPUs not made by Intel, else through PyTorch's fused encoder-layer kernel,
  where they apply: `attnlab.accel.fused_layer.fast_encoder_layer`);
- ``attnlab modules``: the same model with that path off (each sub-module called), to show what it gains;
- ``attnlab compile``: the same under ``torch.compile`` (inductor; compiled before timing);
- ``attnlab int8``: `attnlab.inference.quantize` (every linear layer int8, activations quantized per call;
  the engine `attnlab.inference.quantize.auto_engine` picks: oneDNN's int8 GEMM with attnlab's quantization
  where the CPU has VNNI, else attnlab's kernel, `attnlab.accel.int8_gemm`, in its AVX2 build;
  ``ATTNLAB_INT8_VNNI=off`` times the AVX2 build);
- ``attnlab int8 kernel`` / ``attnlab int8 onednn`` / ``attnlab int8 int_mm``: the same on one engine
  (``quantize(engine=...)``): attnlab's kernel alone, oneDNN's int8 GEMM (`attnlab.accel.onednn_int8`), or
  PyTorch's ``torch._int_mm``, its peer;
- ``HF``: transformers ``BertModel`` (SDPA attention) with the attnlab weights (`attnlab.io.to_hf`);
- ``ORT fp32`` / ``ORT int8``: `attnlab.inference.export_onnx` of the same model on ONNX Runtime, and
  ``onnxruntime.quantization.quantize_dynamic`` of that graph; intra-op spinning off (it would steal the next
  engine's cores), ``intra_op_num_threads`` = the thread count. PyTorch's engines run with the peer setting,
  ``OMP_WAIT_POLICY=PASSIVE`` (set by the script unless the environment sets it).

``--isolated`` (the default) runs each engine in a process of its own, with its library's own defaults, as
a service would run it: PyTorch's OpenMP threads with GNU OpenMP's default wait (they spin a moment at each
barrier), ONNX Runtime with intra-op spinning on (its default), attnlab's engines with
`attnlab.inference.keep_freed_memory` (glibc keeps freed blocks for the next forward, as ONNX Runtime's arena
does; `attnlab serve` and `attnlab predict` set it). The processes take turns: in each round
every engine runs one untimed forward and then ``--block`` timed ones while the others wait idle on a pipe,
after a pause (``--pause-ms``) in which the previous engine's threads stop spinning, so no engine's
spinning threads share the cores with another's work. ``--in-process`` runs the engines
interleaved in this one process instead, one forward each per round, where spinning threads would steal
the next engine's cores: there ONNX Runtime's spinning is off and PyTorch runs with the peer setting,
``OMP_WAIT_POLICY=PASSIVE``; at batch size 1 with 2 threads the passive wait costs PyTorch more than
ONNX Runtime (2026-11-28, Intel Xeon, bert-mini: 11.3 against 7.2 ms, attnlab no faster than with one
thread), so that mode understates a service's latency.

All engines are checked against attnlab eager before timing (fp32 engines: max abs difference of the last
hidden state; int8: relative error). The attention mask is all ones (full-length sequences). The machine's
load (``os.getloadavg``) is printed before and after: timings on a shared machine compare only as ratios.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script's name (tokenizers.py)
# would shadow the library transformers imports. Benchmarks import nothing from each other.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

# --in-process: ONNX Runtime runs with intra-op spinning off; the peer setting for PyTorch's OpenMP threads is
# the passive wait policy (GNU OpenMP spins at every barrier by default). With engines interleaved in one
# process on a 2-core machine, spinning costs torch 7-30x at B=1 with 2 threads (measured: bert-mini 497 ms
# spinning, 11.5 ms passive, ORT 10-15 ms). libgomp reads it when torch loads it: set before the import;
# OMP_WAIT_POLICY=ACTIVE overrides. The isolated workers (the default mode) get the environment as the user
# left it, without this.
USER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")
if os.environ.get(WORKER_ENV := "ATTNLAB_BENCH_WORKER") is None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from attnlab.accel import optimize  # noqa: E402
from attnlab.io import to_hf  # noqa: E402
from attnlab.models import Encoder, get_preset  # noqa: E402

SHAPES = ((1, 128), (32, 128))
INT8_ENGINES = {"attnlab int8": None, "attnlab int8 kernel": "attnlab", "attnlab int8 onednn": "onednn",
                "attnlab int8 int_mm": "int_mm"}  # fmt: skip  # name -> quantize's engine
ENGINES = ("attnlab", "attnlab modules", "attnlab compile", *INT8_ENGINES, "HF", "ORT fp32", "ORT int8")
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
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--isolated",
        dest="isolated",
        action="store_true",
        default=True,
        help="each engine in its own process, its library's defaults, taking turns (default)",
    )
    mode.add_argument(
        "--in-process",
        dest="isolated",
        action="store_false",
        help="engines interleaved in this process; spinning off for all (the earlier table)",
    )
    p.add_argument("--block", type=int, default=5, help="--isolated: timed forwards per engine and round")
    p.add_argument("--pause-ms", type=float, default=200.0,
                   help="--isolated: idle time before each turn, for the previous engine's threads to stop "
                   "spinning (ONNX Runtime's spin after a run)")  # fmt: skip
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset of the engines")
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown or not {"attnlab", "ORT fp32", "ORT int8"} <= set(args.engines):
        p.error(f"--engines: {unknown or args.engines} -- choose from {', '.join(ENGINES)}; "
                "attnlab, ORT fp32 and ORT int8 are always needed")  # fmt: skip
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    return args


def parse_worker_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one engine of benchmarks/inference.py --isolated (internal)")
    p.add_argument("--worker", required=True, choices=ENGINES)
    p.add_argument("--worker-preset", required=True)
    p.add_argument("--worker-dir", required=True)
    p.add_argument("--worker-threads", type=int, required=True)
    return p.parse_args()


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
    """The engines of one model, as ``name -> (batch -> last hidden state)`` callables; each engine's model
    (HF, int8, compiled, ONNX Runtime sessions) is built when first asked for, so an isolated worker builds
    only its own."""

    def __init__(self, preset: str, workdir: Path, compile_: bool, spinning: bool = False) -> None:
        torch.manual_seed(0)
        self.model = Encoder(get_preset(preset, hidden_dropout=0.0, attention_dropout=0.0)).eval()
        self.onnx_dir = workdir / preset
        self.weights = workdir / f"{preset}.safetensors"
        if self.weights.exists():  # a worker: the parent's weights (the same seed builds the same, but check)
            from safetensors.torch import load_file

            self.model.load_state_dict(load_file(self.weights))
            optimize(self.model)  # attnlab's CPU fast paths (attnlab.accel), as `predict` and `serve` run it
        self.compile_ = compile_
        self.spinning = spinning  # ONNX Runtime's intra-op spinning (its default is on)
        self.sessions: dict[int, dict[str, object]] = {}
        self.export_s = 0.0

    def export(self) -> None:
        """The ONNX directory (fp32 and int8) and the weights file the workers load."""
        from safetensors.torch import save_file

        from attnlab.inference.onnx_export import export_onnx

        start = time.perf_counter()
        export_onnx(self.model, self.onnx_dir, int8=True)
        self.export_s = time.perf_counter() - start
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, self.weights)
        # exported plain (the export records the architecture by exact class), then attnlab's CPU fast paths
        optimize(self.model)

    @functools.cached_property
    def hf(self) -> torch.nn.Module:
        return build_hf(self.model)

    @functools.cached_property
    def int8_models(self) -> dict[str, torch.nn.Module]:
        """The int8 models built so far, by engine (None: `auto_engine`'s)."""
        return {}

    def int8(self, engine: str | None) -> torch.nn.Module:
        from attnlab.inference import quantize

        if engine not in self.int8_models:
            self.int8_models[engine] = quantize(self.model, engine=engine)
        return self.int8_models[engine]

    @functools.cached_property
    def compiled(self) -> Callable | None:
        return torch.compile(self.model, dynamic=False) if self.compile_ else None

    def ort(self, threads: int, name: str) -> object:
        from attnlab.inference.onnx_runner import OnnxRunner

        sessions = self.sessions.setdefault(threads, {})  # an InferenceSession's threads are set at creation
        if name not in sessions:
            sessions[name] = OnnxRunner(self.onnx_dir, threads=threads, spinning=self.spinning,
                                        int8=name == "ORT int8")  # fmt: skip
        return sessions[name]

    def modules(self, batch: dict[str, torch.Tensor]) -> Tensor:
        """attnlab eager with the fused encoder-layer path off."""
        from attnlab.accel.fused_layer import fused_layers

        with fused_layers(False):
            return self.model(**batch).last_hidden_state

    def callable(self, name: str, threads: int, batch: dict[str, Tensor]) -> Callable[[], Tensor] | None:
        """Engine ``name``'s forward of ``batch``; None for ``attnlab compile`` without compiling."""
        if name == "attnlab":
            return lambda: self.model(**batch).last_hidden_state
        if name == "attnlab modules":
            return lambda: self.modules(batch)
        if name == "attnlab compile":
            compiled = self.compiled  # an OptimizedModule: no truth value (len() raises)
            return None if compiled is None else (lambda: compiled(**batch).last_hidden_state)
        if name in INT8_ENGINES:
            int8 = self.int8(INT8_ENGINES[name])
            return lambda: int8(**batch).last_hidden_state
        if name == "HF":
            hf = self.hf
            return lambda: hf(**batch).last_hidden_state
        session = self.ort(threads, name)
        return lambda: session(**batch).last_hidden_state

    def callables(self, names: list[str], threads: int, batch: dict[str, Tensor]) -> dict[str, Callable]:
        fns = {name: self.callable(name, threads, batch) for name in names}
        return {k: v for k, v in fns.items() if v is not None}


def make_batch(model: Encoder, b: int, t: int) -> dict[str, torch.Tensor]:
    """The same random (B, T) batch in every process."""
    g = torch.Generator().manual_seed(b * 1000 + t)
    ids = torch.randint(1000, model.config.vocab_size, (b, t), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}


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


TIMES = "@@times "  # a worker's answer line (anything else it prints is passed over)


class Worker:
    """One engine in a process of its own (this script with ``--worker``), answering timing requests on a
    pipe: ``{"b", "t", "n"}`` -> one untimed forward, then ``n`` timed ones, their seconds as one line."""

    def __init__(self, name: str, preset: str, workdir: Path, threads: int) -> None:
        env = dict(os.environ, **{WORKER_ENV: "1"})
        env.pop("OMP_WAIT_POLICY", None)  # the library's default, unless the user chose one
        if USER_WAIT_POLICY is not None:
            env["OMP_WAIT_POLICY"] = USER_WAIT_POLICY
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--worker-preset", preset,
               "--worker-dir", str(workdir), "--worker-threads", str(threads)]  # fmt: skip
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, b: int, t: int, n: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"b": b, "t": t, "n": n}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(TIMES):
                return json.loads(line[len(TIMES) :])
        raise RuntimeError(f"the {self.name} worker exited (code {self.proc.wait()}); its error is above")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def worker_main(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.worker_threads)
    if args.worker.startswith("attnlab"):  # what `attnlab serve` and `attnlab predict` set at start
        from attnlab.inference import keep_freed_memory

        keep_freed_memory()
    engines = Engines(args.worker_preset, Path(args.worker_dir), compile_=args.worker == "attnlab compile",
                      spinning=True)  # fmt: skip
    with torch.inference_mode():
        for line in sys.stdin:
            req = json.loads(line)
            batch = make_batch(engines.model, req["b"], req["t"])
            fn = engines.callable(args.worker, args.worker_threads, batch)
            assert fn is not None
            fn()  # untimed: the first after another engine's turn
            times = []
            for _ in range(req["n"]):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            print(TIMES + json.dumps(times), flush=True)
    return 0


def time_shape_isolated(workers: list[Worker], b: int, t: int, args: argparse.Namespace) -> dict[str, float]:
    """Rounds of turns: each worker one untimed and ``--block`` timed forwards while the others wait."""
    for w in workers:
        for _ in range(args.warmup):
            time.sleep(args.pause_ms / 1000)
            w.run(b, t, 1)
    times: dict[str, list[float]] = {w.name: [] for w in workers}
    rounds = args.repeats
    r = 0
    while r < rounds:
        start_round = time.perf_counter()
        for w in workers:
            time.sleep(args.pause_ms / 1000)  # the last engine's threads stop spinning
            times[w.name] += w.run(b, t, args.block)
        if r == 0:  # one round's cost decides how many fit in --max-seconds
            per_round = time.perf_counter() - start_round
            rounds = max(3, min(args.repeats, int(args.max_seconds / max(per_round, 1e-9))))
        r += 1
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    if argv is None and "--worker" in sys.argv:
        return worker_main(parse_worker_args())
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
        f"{transformers.__version__}, onnxruntime {onnxruntime.__version__}; ratios: engine / ORT (< 1 = "
        "faster than ONNX Runtime); "
        + (
            f"each engine in its own process, turns of 1 + {args.block} forwards, median of the timed ones; "
            f"OMP_WAIT_POLICY={USER_WAIT_POLICY} (library default if None), ORT intra-op spinning on (its "
            "default), attnlab engines with keep_freed_memory (as attnlab serve and predict run)"
            if args.isolated
            else "engines interleaved in one process, median over rounds; OMP_WAIT_POLICY="
            f"{os.environ.get('OMP_WAIT_POLICY')}, ORT intra-op spinning off"
        )
    )
    print(f"# before: {load()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp, torch.inference_mode():
        for preset in args.models:
            with torch.inference_mode(False):
                engines = Engines(preset, Path(tmp), compile_=not args.no_compile)
                engines.export()
            print(f"# {preset}: ONNX export + int8 quantization {engines.export_s:.0f} s", flush=True)
            names = [n for n in args.engines if not (n == "attnlab compile" and args.no_compile)]
            for threads in args.threads:
                torch.set_num_threads(threads)
                workers = [Worker(n, preset, Path(tmp), threads) for n in names] if args.isolated else []
                try:
                    for b, t in SHAPES:
                        fns = engines.callables(names, threads, make_batch(engines.model, b, t))
                        notes = check(fns)  # also compiles (attnlab compile) for this shape
                        if args.isolated:
                            medians = time_shape_isolated(workers, b, t, args)
                        else:
                            medians = time_shape(fns, args)
                        for name in fns:
                            rows.append((preset, threads, b, t, name, medians[name], medians["ORT fp32"],
                                         medians["ORT int8"], notes[name]))  # fmt: skip
                        _print_block(rows[-len(fns) :])
                finally:
                    for w in workers:
                        w.close()
    print(f"# after: {load()}")
    _print_summary(rows)
    return 0


def _print_block(rows: list[tuple]) -> None:
    preset, threads, b, t = rows[0][:4]
    print(f"\n{preset}, {threads} thread(s), B={b} T={t}")
    print(f"  {'engine':<20} {'ms':>9} {'tokens/s':>10} {'/ORT fp32':>10} {'/ORT int8':>10}  check")
    for _, _, b, t, name, m, fp32, int8, note in rows:
        print(f"  {name:<20} {1000 * m:>9.1f} {b * t / m:>10.0f} {m / fp32:>10.2f} {m / int8:>10.2f}  {note}")
    sys.stdout.flush()


def _print_summary(rows: list[tuple]) -> None:
    """The goals: attnlab's best path <= ORT int8; attnlab fp32 (eager or compiled) <= ORT fp32."""
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
