"""English -> German on Multi30k (task 1) with the Transformer of "Attention Is All You Need", on a CPU.

Notes (read first)
------------------
What it does: learns a joint BPE (attnlab's trainer, byte fallback) on train.en + train.de, trains a small
post-LN Transformer with the paper's recipe (Adam 0.9/0.98/1e-9, eq. (3) schedule, label smoothing 0.1,
dropout 0.1, token-count batches, shared and scaled embeddings, sinusoids) for ``--minutes`` of wall-clock
time, averages the last ``--average-last`` checkpoints, translates test_2016_flickr.en with beam search
(beam 4, alpha 0.6, max length = source + 50) and prints sacreBLEU on the detokenised output with its
signature. Everything lands in ``--output-dir`` (model/, hyp.test2016.de, result.json, log.jsonl).

Measured on the 2-core CPU (one torch thread; the other core busy with other work most of the time):

    .venv/bin/python experiments/translate_multi30k.py --minutes 55 --threads 1 \\
        --output-dir runs/multi30k-55min-onednn

    -> 3,420 updates (~17 epochs) in 55.2 minutes with BPE learning, the last 5 checkpoints averaged,
       test2016 BLEU = 36.51 (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0), decoding 9.5 s.
       (With MKL's float32 matmuls instead of oneDNN's: 1,817 updates, BLEU 33.08.)

A smoke run: ``--minutes 3 --test-limit 200 --output-dir runs/m30k-smoke``.

On a GPU (the 10-minute goal; training and decoding move to CUDA when it is there), for example:

    .venv/bin/python experiments/translate_multi30k.py --minutes 10 --layers 6 --d-model 512 --d-ff 2048 \\
        --heads 8 --max-tokens 12000 --warmup 1000 --precision bf16 --output-dir runs/multi30k-gpu

Model: N=3, d_model=256, d_ff=1024, h=4 (7.6M parameters with an 8k vocabulary) - base is too slow
for a CPU hour. Warm-up 800 steps instead of 4000: a CPU hour gives only a few thousand updates. These
are the deviations from the paper's base setting; all are flags.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# Run as a script, Python puts experiments/ first on sys.path; take it off so names cannot shadow libraries.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402

from attnlab.io import load  # noqa: E402
from attnlab.metrics.bleu import corpus_bleu  # noqa: E402
from attnlab.tokenizers import load_tokenizer  # noqa: E402
from attnlab.translation.recipe import train_translation, translate_texts  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--output-dir", type=Path, default=Path("runs/multi30k"))
    p.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=1_000_000)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=2500, help="padded tokens per batch and side")
    p.add_argument("--warmup", type=int, default=800)
    p.add_argument("--lr-scale", type=float, default=1.0)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--average-last", type=int, default=5)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--test-limit", type=int, help="translate only the first N test sentences")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a loaded machine)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"), help="training precision")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    d = args.data_dir
    if not (d / "train.en").is_file():
        print(f"{d}: Multi30k not found (train.en, train.de, val.*, test_2016_flickr.*)", file=sys.stderr)
        return 1
    start = time.time()
    run = train_translation(
        d / "train.en",
        d / "train.de",
        args.output_dir,
        config_overrides={
            "num_layers": args.layers,
            "d_model": args.d_model,
            "d_ff": args.d_ff,
            "num_heads": args.heads,
            "dropout": args.dropout,
        },
        vocab_size=args.vocab_size,
        max_length=128,
        max_tokens=args.max_tokens,
        max_steps=args.max_steps,
        minutes=args.minutes,
        warmup=args.warmup,
        lr_scale=args.lr_scale,
        average_last=args.average_last,
        save_every=args.save_every,
        seed=args.seed,
        src_valid=d / "val.en",
        tgt_valid=d / "val.de",
        trainer_overrides={"progress_bar": False, "log_every": 20, "precision": args.precision},
    )
    trained = time.time() - start

    model = load(run.model_dir, device="cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = load_tokenizer(run.model_dir)
    sources = (d / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    refs = (d / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    if args.test_limit:
        sources, refs = sources[: args.test_limit], refs[: args.test_limit]
    t0 = time.time()
    hyps = translate_texts(model, tokenizer, sources, beam_size=args.beam, alpha=args.alpha)
    decode_s = time.time() - t0
    (args.output_dir / "hyp.test2016.de").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    bleu = corpus_bleu(hyps, refs)
    result = {
        "bleu": round(bleu.score, 2),
        "signature": bleu.signature,
        "test_sentences": len(sources),
        "steps": run.steps,
        "train_minutes": round(trained / 60, 2),
        "decode_seconds": round(decode_s, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "data": run.report,
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    (args.output_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for s, h in list(zip(sources, hyps))[:3]:
        print(f"  {s}\n  -> {h}")
    print(f"test2016 ({len(sources)} sentences) {bleu}")
    print(
        f"{run.steps} steps in {trained / 60:.1f} min (incl. BPE), decoding {decode_s:.0f} s; "
        f"{args.output_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
