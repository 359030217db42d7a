"""Pre-training throughput: attnlab vs HF transformers ``BertForPreTraining``, and data preparation speed.

    python benchmarks/pretraining.py                          # bert-mini and bert-base at T=128; prep 20 MB
    python benchmarks/pretraining.py --presets bert-mini --steps 5 --prep-mb 2      # a quick sanity run
    python benchmarks/pretraining.py --skip-prep                      # training throughput only
    python benchmarks/pretraining.py --skip-train --prep-mb 50 --workers 2          # preparation only

Training: for each preset, an attnlab ``EncoderForPreTraining`` (MLM + NSP, dropout as configured) and HF's
``BertForPreTraining`` (SDPA attention) built from the same config and holding the same weights
(``attnlab.io.to_hf``); attnlab runs twice: as ``attnlab pretrain`` trains it (``MaskedLMPreTrainer``: MLM
logits only at the predicted positions, as Google's BERT code gathers them) and as the plain module ("full",
logits everywhere, as HF computes them). Each is trained with ``torch.optim.AdamW`` on the same random
batches (15% of the positions with MLM labels, NSP labels) at batch ``--batch-size`` and length
``--seq-len``. A step is forward + backward + optimizer step; after ``--warmup`` steps, ``--steps`` timed
steps alternate between the models so that background load hits them alike. Reported: median step time,
training tokens/s (B * T / median), and the ratio attnlab/HF of tokens/s (goal on CPU: >= 1.2). Precision:
float32 on CPU; bfloat16 autocast on CUDA, where the table adds the model FLOPs utilisation (MFU: 6 N + 12 L
H T FLOPs per token, Kaplan et al. 2020 / Chowdhery et al. 2022, over the GPU's dense bf16 peak,
``--peak-tflops``).

Preparation: a WordPiece vocabulary (``--vocab-size``) is trained on the first MB of ``--data`` (not timed),
then the first ``--prep-mb`` MB of the books are prepared into shards in a fresh process with ``--workers``
tokenising processes, once with attnlab's tokenizer and once with HF ``tokenizers`` loaded from the same
``tokenizer.json`` (to separate the pipeline's cost from the tokenizer's). Reported: tokens/s and the peak
RSS of the preparing process and of its largest worker (goals: >= 1M tokens/s on 2 cores, <= 2 GB).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script (tokenizers.py) would
# shadow the library of that name that transformers imports.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402

from attnlab.accel import optimize, set_cpu_gemm  # noqa: E402
from attnlab.io import to_hf  # noqa: E402
from attnlab.models import EncoderForPreTraining, count_parameters, get_preset  # noqa: E402
from attnlab.pretraining import MaskedLMPreTrainer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "books" / "en"
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="bert-mini,bert-base-uncased", help="comma-separated attnlab presets")
    p.add_argument("--batch-size", type=int, default=None, help="default: 32 on CPU, 64 on CUDA")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="timed steps per model (median reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument(
        "--cpu-gemm",
        choices=("auto", "onednn", "default"),
        default="auto",
        help="attnlab's float32 CPU matmuls: auto (its default: oneDNN with AVX-512, else F.linear), oneDNN, "
        "or F.linear as HF uses",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (BERT: 0.1)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak for MFU")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-prep", action="store_true")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="folder of .txt books for the preparation run")
    p.add_argument("--prep-mb", type=float, default=20.0, help="MB of books prepared")
    p.add_argument("--workers", type=int, default=None, help="tokenising processes (default: all cores)")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--prep-child", help=argparse.SUPPRESS)  # internal: run one preparation in this process
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------- training


def build_pair(preset: str, dropout: float, device: torch.device):
    """attnlab EncoderForPreTraining (MLM + NSP) and HF BertForPreTraining with the same weights."""
    import transformers

    torch.manual_seed(0)
    config = get_preset(preset, hidden_dropout=dropout, attention_dropout=dropout)
    ours = optimize(EncoderForPreTraining.from_config(config, pair_head=True), "training")  # --cpu-gemm
    hf_config, state = to_hf(ours, family="bert")
    hf_config = {k: v for k, v in hf_config.items() if k not in ("architectures", "dtype")}
    theirs = transformers.BertForPreTraining(transformers.BertConfig(**hf_config, attn_implementation="sdpa"))
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    tied = ("position_ids", "token_type_ids", "decoder.weight", "decoder.bias")  # buffers, tied to others
    missing = [k for k in missing if not k.endswith(tied)]
    if missing or unexpected:
        raise RuntimeError(f"weights did not map: missing {missing[:5]}, unexpected {unexpected[:5]}")
    theirs.tie_weights()
    return ours.to(device).train(), theirs.to(device).train(), config


def make_batches(n: int, b: int, t: int, vocab: int, device: torch.device, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (b, t), generator=g)
        labels = torch.where(torch.rand(b, t, generator=g) < 0.15, ids, torch.full_like(ids, -100))
        types = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()
        nsp = torch.randint(0, 2, (b,), generator=g)
        batches.append(
            {
                "input_ids": ids.to(device),
                "token_type_ids": types.to(device),
                "attention_mask": torch.ones(b, t, dtype=torch.long, device=device),
                "labels": labels.to(device),
                "nsp": nsp.to(device),
            }
        )
    return batches


def ours_step(model, batch):
    return model(
        batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"],
        labels=batch["labels"], pair_labels=batch["nsp"],
    ).loss  # fmt: skip


def hf_step(model, batch):
    return model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"], labels=batch["labels"], next_sentence_label=batch["nsp"],
    ).loss  # fmt: skip


def time_training(args, preset: str, device: torch.device) -> dict:
    ours, theirs, config = build_pair(preset, args.dropout, device)
    b = args.batch_size or (64 if device.type == "cuda" else 32)
    t = args.seq_len
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else None
    gathered = MaskedLMPreTrainer(copy.deepcopy(ours))  # what `attnlab pretrain` trains
    runs = {
        "attnlab": (gathered, ours_step, torch.optim.AdamW(gathered.parameters(), lr=1e-4, eps=1e-6)),
        "full": (ours, ours_step, torch.optim.AdamW(ours.parameters(), lr=1e-4, eps=1e-6)),
        "HF": (theirs, hf_step, torch.optim.AdamW(theirs.parameters(), lr=1e-4, eps=1e-6)),
    }
    batches = make_batches(args.warmup + args.steps, b, t, config.vocab_size, device)
    # the same weights: the same loss with dropout off (a check before timing)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        a, h = float(ours_step(ours, batches[0])), float(hf_step(theirs, batches[0]))
        g = float(ours_step(MaskedLMPreTrainer(ours), batches[0]))
        parity = max(abs(a - h), abs(g - h))
        assert math.isfinite(a) and a > 1.0, a  # a real loss, not a degenerate one
    ours.train(), theirs.train()
    times: dict[str, list[float]] = {k: [] for k in runs}
    losses: dict[str, float] = {}
    for i, batch in enumerate(batches):
        for name, (model, step, opt) in runs.items():
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if autocast is not None:
                with autocast:
                    loss = step(model, batch)
            else:
                loss = step(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)
            if i == 0:
                losses[name] = float(loss.detach())
    n_params = count_parameters(ours)
    flops_per_token = 6 * n_params + 12 * config.num_layers * config.hidden_size * t
    row = {"preset": preset, "B": b, "T": t, "params": n_params, "first_loss": losses, "parity": parity}
    for name in runs:
        med = statistics.median(times[name])
        row[f"{name}_ms"] = 1000 * med
        row[f"{name}_tok_s"] = b * t / med
        if cuda:
            peak = args.peak_tflops or next(
                (v for k, v in PEAK_BF16_TFLOPS.items() if k in torch.cuda.get_device_name()), None
            )
            row[f"{name}_mfu"] = (b * t / med) * flops_per_token / (peak * 1e12) if peak else None
    row["ratio"] = row["attnlab_tok_s"] / row["HF_tok_s"]
    row["ratio_full"] = row["full_tok_s"] / row["HF_tok_s"]
    return row


def print_training(rows: list[dict], device: torch.device) -> None:
    cuda = device.type == "cuda"
    head = f"{'preset':<20} {'B':>3} {'T':>4} {'attnlab ms':>10} {'HF ms':>8} {'attnlab tok/s':>13}"
    head += f" {'full tok/s':>10} {'HF tok/s':>9} {'ratio':>6} {'full/HF':>7}"
    head += f" {'MFU attnlab':>11} {'MFU HF':>7}" if cuda else ""
    print(head)
    for r in rows:
        line = (
            f"{r['preset']:<20} {r['B']:>3} {r['T']:>4} {r['attnlab_ms']:>10.1f} {r['HF_ms']:>8.1f} "
            f"{r['attnlab_tok_s']:>13,.0f} {r['full_tok_s']:>10,.0f} {r['HF_tok_s']:>9,.0f} "
            f"{r['ratio']:>6.2f} {r['ratio_full']:>7.2f}"
        )
        if cuda:
            fmt = lambda v: f"{100 * v:.1f}%" if v is not None else "n/a"  # noqa: E731
            line += f" {fmt(r['attnlab_mfu']):>11} {fmt(r['HF_mfu']):>7}"
        print(line)
    worst = max(r["parity"] for r in rows)
    print("attnlab = MaskedLMPreTrainer (what `attnlab pretrain` trains: MLM logits only where predicted, as")
    print("Google's run_pretraining.py); full = EncoderForPreTraining (logits at every position, as HF);")
    print(f"ratio = attnlab tokens/s / HF tokens/s (goal on CPU: >= 1.20); same weights: max |loss diff| "
          f"without dropout {worst:.2e}")  # fmt: skip


# ----------------------------------------------------------------------------------------- preparation


def _book_docs(data: Path, max_bytes: int):
    """Documents of the first ``max_bytes`` bytes of the books (whole paragraphs; sorted files)."""
    from attnlab.data import read_documents

    used = 0
    for doc in read_documents([str(data)], "text", split=False):
        yield doc
        used += sum(len(p) for p in doc)
        if used >= max_bytes:
            return


def prep_child(spec: dict) -> None:
    """One preparation in this (fresh) process; prints the report as JSON."""
    from attnlab.data import prepare_shards

    if spec["tokenizer"] == "hf":
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(spec["tokenizer_json"])
    else:
        from attnlab.tokenizers import Tokenizer

        tok = Tokenizer.from_file(spec["tokenizer_json"])
    report = prepare_shards(
        _book_docs(Path(spec["data"]), spec["bytes"]),
        tok,
        spec["out"],
        workers=spec["workers"],
        overwrite=True,
    )
    keys = ("tokens", "seconds", "tokens_per_second", "peak_rss_mb", "peak_rss_children_mb")
    result = {k: getattr(report, k) for k in keys}
    # Linux carries ru_maxrss across fork + exec, so the report's figure can be the parent benchmark's size;
    # VmHWM belongs to this process's own address space.
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                result["peak_rss_mb"] = int(line.split()[1]) / 1024
    print(json.dumps(result))


def run_prep(args) -> list[dict]:
    from attnlab.tokenizers.trainers import train_tokenizer

    data = Path(args.data)
    if not data.is_dir():
        print(f"preparation skipped: {data} is not a directory (see --data)")
        return []
    workers = args.workers or os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sample = ("\n".join(doc) for doc in _book_docs(data, 1 << 20))
        tok = train_tokenizer("wordpiece", sample, args.vocab_size, show_progress=False, min_frequency=10)
        tok_json = str(Path(tmp) / "tokenizer.json")
        tok.save(tok_json)
        print(
            f"WordPiece of {tok.get_vocab_size():,} tokens trained on 1 MB in {time.perf_counter() - t0:.1f}s"
        )
        for kind in ("attnlab", "hf"):
            spec = {
                "tokenizer": kind, "tokenizer_json": tok_json, "data": str(data),
                "out": str(Path(tmp) / kind),
                "bytes": int(args.prep_mb * (1 << 20)), "workers": workers,
            }  # fmt: skip
            proc = subprocess.run(
                [sys.executable, __file__, "--prep-child", json.dumps(spec)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                print(f"preparation with {kind} failed:\n{proc.stderr[-2000:]}")
                continue
            rows.append({"tokenizer": kind, **json.loads(proc.stdout.strip().splitlines()[-1])})
    print(f"\npreparation of {args.prep_mb:g} MB of {data} with {workers} workers")
    print(
        f"{'tokenizer':<10} {'tokens':>12} {'seconds':>8} {'tokens/s':>11} {'peak RSS MB':>11} "
        f"{'worker MB':>9}"
    )
    for r in rows:
        print(
            f"{r['tokenizer']:<10} {r['tokens']:>12,} {r['seconds']:>8.1f} {r['tokens_per_second']:>11,.0f} "
            f"{r['peak_rss_mb']:>11.0f} {r['peak_rss_children_mb']:>9.0f}"
        )
    print("goals: >= 1,000,000 tokens/s on 2 cores; peak RSS <= 2048 MB")
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.prep_child:
        prep_child(json.loads(args.prep_child))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    set_cpu_gemm(args.cpu_gemm)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not args.skip_prep:  # first, while this process is small (its children inherit its peak RSS)
        run_prep(args)
    if not args.skip_train:
        import transformers

        print(
            f"training throughput on {device} ({torch.get_num_threads()} threads), "
            f"torch {torch.__version__}, transformers {transformers.__version__}, "
            f"{'bf16 autocast' if device.type == 'cuda' else 'fp32'}, "
            f"dropout {args.dropout}, {args.steps} timed steps after {args.warmup}"
        )
        rows = [time_training(args, p.strip(), device) for p in args.presets.split(",") if p.strip()]
        print_training(rows, device)


if __name__ == "__main__":
    main()
