"""Encoder forward latency and throughput: attnlab vs HF transformers ``BertModel`` (SDPA), same weights.

    python benchmarks/encoder_inference.py                        # bert-base, B in {1, 8}, T in {128, 512}
    python benchmarks/encoder_inference.py --batch-sizes 1 --seq-lens 32 --repeats 3 --preset bert-tiny
    python benchmarks/encoder_inference.py --profile              # torch.profiler tables for one shape

For each dtype (float32 on CPU; bfloat16 too when CUDA is available), batch size B and sequence length T,
both models run ``--warmup`` forwards and then ``--repeats`` timed forwards under ``torch.inference_mode``,
alternating attnlab and HF so that load on the machine hits both alike. The table reports the median
latency, tokens/s (B * T / median) and the ratio attnlab/HF of the medians (< 1: attnlab is faster),
plus the max abs difference of the two last hidden states as a check that the weights are identical.
The attention mask is all ones (no padding), as a batch of full-length sequences.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script's name (e.g.
# tokenizers.py) would shadow the library of that name that transformers imports. Benchmarks import
# nothing from each other, so the folder is taken off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402

from attnlab.accel import optimize, set_cpu_gemm  # noqa: E402
from attnlab.io import to_hf  # noqa: E402
from attnlab.models import Encoder, get_preset  # noqa: E402


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="bert-base-uncased", help="attnlab preset of a BERT-layout encoder")
    p.add_argument("--batch-sizes", type=_int_list, default=[1, 8], help="comma-separated, default 1,8")
    p.add_argument("--seq-lens", type=_int_list, default=[128, 512], help="comma-separated, default 128,512")
    p.add_argument("--repeats", type=int, default=10, help="timed forwards per model and shape (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed forwards per model and shape first")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument(
        "--cpu-gemm",
        choices=("auto", "onednn", "default"),
        default="auto",
        help="attnlab's float32 CPU matmuls: auto (its default: oneDNN with AVX-512, else F.linear), oneDNN, "
        "or F.linear as HF uses",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument(
        "--dtypes", default=None, help="comma-separated (default: float32 on CPU; float32,bfloat16 on CUDA)"
    )
    p.add_argument(
        "--profile", action="store_true", help="print torch.profiler op tables for the first shape"
    )
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    return args


def build_models(preset: str, device: torch.device, dtype: torch.dtype) -> tuple[Encoder, torch.nn.Module]:
    """An attnlab Encoder and a HF BertModel (SDPA attention) holding the same weights."""
    import transformers

    torch.manual_seed(0)
    ours = optimize(Encoder(get_preset(preset, hidden_dropout=0.0, attention_dropout=0.0)).eval())
    hf_config, state = to_hf(ours, family="bert")
    hf_config = {k: v for k, v in hf_config.items() if k not in ("architectures", "dtype")}
    config = transformers.AutoConfig.for_model(**hf_config)
    theirs = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise RuntimeError(
            f"HF BertModel did not take the attnlab weights: missing {missing}, unexpected {unexpected}"
        )
    if type(theirs).__name__ != "BertModel" or theirs.config._attn_implementation != "sdpa":
        raise RuntimeError(f"expected a BertModel with SDPA, got {type(theirs).__name__}")
    return ours.to(device=device, dtype=dtype), theirs.to(device=device, dtype=dtype)


def _timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    def run(fn: Callable[[], object]) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return run


def bench_shape(ours, theirs, batch: int, seq: int, args, device: torch.device) -> dict[str, float]:
    vocab = ours.config.vocab_size
    gen = torch.Generator().manual_seed(batch * 1000 + seq)
    ids = torch.randint(1000 if vocab > 2000 else 1, vocab, (batch, seq), generator=gen).to(device)
    mask = torch.ones_like(ids)
    segments = torch.zeros_like(ids)
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
    run_ours = lambda: ours(**inputs).last_hidden_state  # noqa: E731
    run_theirs = lambda: theirs(**inputs).last_hidden_state  # noqa: E731
    timer = _timer(device)
    with torch.inference_mode():
        diff = (run_ours().float() - run_theirs().float()).abs().max().item()
        for _ in range(args.warmup):
            run_ours()
            run_theirs()
        t_ours, t_theirs = [], []
        for _ in range(args.repeats):  # alternate so that background load hits both alike
            t_ours.append(timer(run_ours))
            t_theirs.append(timer(run_theirs))
    m_ours, m_theirs = statistics.median(t_ours), statistics.median(t_theirs)
    return {
        "ours_ms": 1000 * m_ours,
        "hf_ms": 1000 * m_theirs,
        "ours_tps": batch * seq / m_ours,
        "hf_tps": batch * seq / m_theirs,
        "ratio": m_ours / m_theirs,
        "diff": diff,
    }


def profile_shape(ours, theirs, batch: int, seq: int, device: torch.device) -> None:
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(1, ours.config.vocab_size, (batch, seq), device=device)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    for name, model in (("attnlab", ours), ("HF", theirs)):
        with torch.inference_mode():
            model(**inputs)
            with profile(activities=activities) as prof:
                for _ in range(3):
                    model(**inputs)
        print(f"\n== {name}: B={batch} T={seq}, 3 forwards ==")
        print(prof.key_averages().table(sort_by=sort, row_limit=15))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import transformers
    except ImportError:
        print("this benchmark compares against HF transformers: pip install 'attnlab[test]'", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    set_cpu_gemm(args.cpu_gemm)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.dtypes:
        dtype_names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    else:
        dtype_names = ["float32", "bfloat16"] if device.type == "cuda" else ["float32"]
    valid = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    unknown = [d for d in dtype_names if d not in valid]
    if unknown:
        print(f"unknown dtype(s) {', '.join(unknown)}; valid: {', '.join(valid)}", file=sys.stderr)
        return 2
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu, {torch.get_num_threads()} threads"
    )
    print(
        f"# {args.preset} encoder forward, {where}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}; median of {args.repeats} after {args.warmup} warm-up; "
        "ratio = attnlab/HF"
    )
    header = (
        f"{'dtype':<9} {'B':>3} {'T':>5} {'attnlab ms':>11} {'HF ms':>9} {'attnlab tok/s':>14} "
        f"{'HF tok/s':>10} {'ratio':>6} {'max|diff|':>10}"
    )
    print(header)
    print("-" * len(header))
    for dtype_name in dtype_names:
        ours, theirs = build_models(args.preset, device, valid[dtype_name])
        max_len = ours.config.max_sequence_length
        for batch in args.batch_sizes:
            for seq in args.seq_lens:
                if seq > max_len:
                    print(f"{dtype_name:<9} {batch:>3} {seq:>5}  skipped: longer than {max_len} positions")
                    continue
                r = bench_shape(ours, theirs, batch, seq, args, device)
                print(
                    f"{dtype_name:<9} {batch:>3} {seq:>5} {r['ours_ms']:>11.2f} {r['hf_ms']:>9.2f} "
                    f"{r['ours_tps']:>14,.0f} {r['hf_tps']:>10,.0f} {r['ratio']:>6.2f} {r['diff']:>10.1e}",
                    flush=True,
                )
        if args.profile:
            profile_shape(ours, theirs, args.batch_sizes[0], min(args.seq_lens[0], max_len), device)
            args.profile = False
        del ours, theirs
    return 0


if __name__ == "__main__":
    sys.exit(main())
