"""K-BERT in miniature: Chinese medical NER with and without Medical.spo, and sentiment with HowNet.

    .venv/bin/python experiments/kbert.py          # about 25 min on 2 cores
    .venv/bin/python experiments/kbert.py --skip-sentiment   # NER only
    .venv/bin/python experiments/kbert.py --ner-epochs 1 --sentiment-epochs 1 --max-train-examples 300 \\
        --output runs/kbert-smoke                                                 # a smoke run, ~2 min

The targets (Liu et al. 2020, Table 3 and section 4.4): K-BERT with the medical graph scores >= 1.0
F1 above the same model without it on medical_ner dev (the paper: 92.5 -> 94.2 with Google's pre-trained
BERT), and K-BERT without the visible matrix scores below K-BERT with it (the paper's ablation direction).
Also chnsenticorp with HowNet (the paper: 93.3 -> 94.6 dev accuracy).

What runs, all through `attnlab.tasks.finetune.finetune_examples` (the project's recipe; dev evaluation
after every epoch, the best epoch kept) on ``../shared/data/kbert``:

- the model: bert-tiny's shape (2 layers, H=128, 2 heads, FFN 512) with the Chinese BERT vocabulary
  (``vocab/google_zh_vocab.txt``, 21,128 WordPieces), **from random initialisation** (no Chinese
  pre-trained weights exist here, and a few minutes of MLM on 30k reviews would not give a usable model
  on 2 cores within the hour); every arm starts from the same seed's initial weights;
- learning rate 1e-3 (a from-scratch tiny model; BERT's 3e-5 is for pre-trained weights), batch 32,
  10% warm-up then linear decay, the same epochs for every arm: NER 5 epochs, seeds 0 and 1, 160 tokens;
  sentiment the first 4,000 of 9,600 training reviews, 2 epochs, seed 0, 128 tokens (shrunk to share the
  2 cores' hour with the other experiments);
- NER arms: no graph; Medical.spo injected (objects only: its one predicate, 类别 "category", says
  nothing; at most 2 triples per entity as K-BERT's code); the same without the visible matrix (branches
  injected with their soft positions, every token seeing every token);
- sentiment arms: no graph; HowNet.spo (predicate and object, at most 2 triples per entity).

Prints the paper's figures beside the measured ones and writes OUT/results.json. The measured table and
the command that printed it are in docs/kbert.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.knowledge.datasets import load_kbert_classification, load_kbert_ner  # noqa: E402
from attnlab.knowledge.features import load_injector  # noqa: E402
from attnlab.models import presets  # noqa: E402
from attnlab.tasks.finetune import (  # noqa: E402
    FinetuneConfig,
    ModelSource,
    finetune_examples,
    get_task,
    task_labels,
)
from attnlab.tokenizers.factories import bert_wordpiece  # noqa: E402
from attnlab.tokenizers.files import read_vocab_txt  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "kbert"

# (task, arm) -> the paper's figure (Liu et al. 2020; Google BERT rows of Tables 1 and 3, dev for
# chnsenticorp, test-set F1 for Medicine_NER as the paper reports it).
PAPER = {
    ("medical_ner", "no graph"): "92.5 (BERT)",
    ("medical_ner", "Medical.spo"): "94.2 (K-BERT MedicalKG)",
    ("medical_ner", "Medical.spo, no visible matrix"): "lower than with it (Fig. 5)",
    ("chnsenticorp", "no graph"): "93.3 (BERT)",
    ("chnsenticorp", "HowNet.spo"): "94.6 (K-BERT HowNet)",
}


def tokenizer(data: Path):
    return bert_wordpiece(read_vocab_txt(data / "vocab" / "google_zh_vocab.txt"))


def first(examples: list, n: int | None) -> list:
    """The first ``n`` examples (all where ``n`` is None)."""
    return examples if n is None else examples[:n]


def run_arm(
    task, train, dev, arm, injector, args, out: Path, epochs: float, max_length: int, seeds, max_train
) -> dict:
    tok = tokenizer(Path(args.data))
    config = dataclasses.replace(
        presets.bert_tiny(), vocab_size=len(tok.get_vocab()), max_position_embeddings=max(512, max_length)
    )
    cfg = FinetuneConfig(
        learning_rates=(args.lr,),
        seeds=tuple(seeds),
        epochs=epochs,
        batch_size=32,
        max_length=max_length,
        max_train_examples=max_train,
        output_dir=out,
        keep_best=False,
        overwrite=True,
        knowledge=injector,
    )
    start = time.monotonic()
    spec = get_task(task)
    labels = task_labels(spec, list(train) + list(dev))  # every tag, also with --max-train-examples
    source = ModelSource(config=config, tokenizer=tok)
    result = finetune_examples(spec, source, train, dev, cfg, labels=labels)
    minutes = (time.monotonic() - start) / 60
    metric = result.metric
    scores = [r.score(metric) for r in result.runs]
    row = {
        "arm": arm,
        "metric": metric,
        "scores": scores,
        "median": result.median,
        "minutes": round(minutes, 2),
        "steps": [r.steps for r in result.runs],
        "injection": injector.stats.summary() if injector is not None else "",
        "features": result.feature_reports,
    }
    print(f"  {arm}: {metric} {[round(s, 2) for s in scores]} in {minutes:.1f} min", flush=True)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="runs/kbert")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="NER seeds")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--sentiment-seeds", type=int, nargs="+", default=[0])
    p.add_argument("--ner-epochs", type=float, default=5)
    p.add_argument("--sentiment-epochs", type=float, default=2)
    p.add_argument("--ner-max-length", type=int, default=160)
    p.add_argument("--sentiment-max-length", type=int, default=128)
    p.add_argument("--max-train-examples", type=int, default=None, help="NER: the first N training sentences")
    p.add_argument(
        "--sentiment-max-train-examples", type=int, default=4000, help="chnsenticorp: the first N of 9,600"
    )
    p.add_argument("--max-triples", type=int, default=2)
    p.add_argument("--skip-sentiment", action="store_true")
    p.add_argument("--skip-ner", action="store_true")
    p.add_argument("--data", default=str(DATA), help="the K-BERT data folder (default ../shared/data/kbert)")
    p.add_argument(
        "--max-dev-examples", type=int, default=None,
        help="the first N dev sentences of each task (default all; for a quick check of the script)",
    )  # fmt: skip
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load at start: {load}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}", flush=True)
    t0 = time.monotonic()
    rows: dict[str, list[dict]] = {}

    ner = Path(args.data) / "datasets" / "medical_ner"
    train, dev = (
        load_kbert_ner(ner / "train.tsv"),
        first(load_kbert_ner(ner / "dev.tsv"), args.max_dev_examples),
    )
    medical = Path(args.data) / "kgs" / "Medical.spo"
    print(f"medical_ner: {len(train)} train, {len(dev)} dev sentences", flush=True)
    arms = (
        []
        if args.skip_ner
        else [
            ("no graph", None),
            ("Medical.spo", load_injector(str(medical), args.max_triples, with_predicate=False)),
            (
                "Medical.spo, no visible matrix",
                load_injector(str(medical), args.max_triples, with_predicate=False, visible_matrix=False),
            ),
        ]
    )
    rows["medical_ner"] = [
        run_arm("kbert_ner", train, dev, arm, inj, args, out / "medical_ner" / str(i), args.ner_epochs,
                args.ner_max_length, args.seeds, args.max_train_examples)
        for i, (arm, inj) in enumerate(arms)
    ]  # fmt: skip
    if not rows["medical_ner"]:
        del rows["medical_ner"]

    if not args.skip_sentiment:
        senti = Path(args.data) / "datasets" / "chnsenticorp"
        train_s = load_kbert_classification(senti / "train.tsv")
        dev_s = first(load_kbert_classification(senti / "dev.tsv"), args.max_dev_examples)
        print(f"chnsenticorp: {len(train_s)} train, {len(dev_s)} dev reviews", flush=True)
        hownet = load_injector(
            str(Path(args.data) / "kgs" / "HowNet.spo"), args.max_triples, with_predicate=True
        )
        rows["chnsenticorp"] = [
            run_arm("kbert_cls", train_s, dev_s, arm, inj, args, out / "chnsenticorp" / str(i),
                    args.sentiment_epochs, args.sentiment_max_length, args.sentiment_seeds,
                    args.sentiment_max_train_examples)
            for i, (arm, inj) in enumerate([("no graph", None), ("HowNet.spo", hownet)])
        ]  # fmt: skip

    total = (time.monotonic() - t0) / 60
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    seeds = f"NER seeds {args.seeds}, sentiment seeds {args.sentiment_seeds}"
    print(f"\nrandom initialisation (bert-tiny shape, Chinese vocab), {seeds}: {total:.1f} min")
    print(f"load at end: {load}\n")
    print(f"{'task':<14}{'arm':<34}{'metric':<10}{'measured (dev)':>16}  paper")
    for task, task_rows in rows.items():
        for r in task_rows:
            measured = " / ".join(f"{s:.2f}" for s in r["scores"])
            paper = PAPER.get((task, r["arm"]), "")
            print(f"{task:<14}{r['arm']:<34}{r['metric']:<10}{measured:>16}  {paper}")
    verdicts = []
    if "medical_ner" in rows:
        base, kg, novm = (r["median"] for r in rows["medical_ner"])
        verdicts += [
            ("K-BERT (Medical.spo) - no graph >= +1.0 F1", kg - base, kg - base >= 1.0),
            ("K-BERT without visible matrix < with it", novm - kg, novm < kg),
        ]
    if "chnsenticorp" in rows:
        b, h = (r["median"] for r in rows["chnsenticorp"])
        verdicts.append(("chnsenticorp: HowNet - no graph (no target)", h - b, None))
    print()
    for name, diff, ok in verdicts:
        status = "" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{name:<48}{diff:+7.2f}  {status}")
    for task, task_rows in rows.items():
        for r in task_rows:
            if r["injection"]:
                print(f"{task} / {r['arm']}: {r['injection']}")
    result = {"rows": rows, "verdicts": verdicts, "minutes": total, "args": vars(args)}
    name = "results.json" if len(rows) == 2 else f"results-{'-'.join(rows)}.json"
    (out / name).write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
