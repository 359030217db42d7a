"""Fine-tune on GLUE (SST-2, MRPC, RTE, STS-B, CoLA), CoNLL-2003 NER and SQuAD v1.1, and print one table.

Data: ``../shared/data`` beside the repository (``--data``): ``glue/{SST-2,MRPC,RTE,STS-B,CoLA}``,
``conll2003`` and
``squad/v1.1/dev-v1.1.json``. SQuAD's training split is not available here, so the dev file is split by
article: the first 40 articles train, the last 8 evaluate (no passage is in both).

The model starts from ``--model DIR`` (the ``model/`` directory ``attnlab pretrain --output OUT`` writes,
or any attnlab or HF directory with its tokenizer) or, without one, from random initialisation of
``--preset`` (bert-mini by default) with a WordPiece vocabulary trained here on the tasks' training texts
(``--vocab-size``). Random initialisation shows the machinery working, not BERT's numbers: without
pre-training, dev scores stay near the majority-class baseline.

Every task follows BERT's recipe (`attnlab.tasks.finetune`): AdamW, 10% warm-up, linear decay, dropout
0.1, batch 32, evaluation after every epoch, best epoch kept; ``--lr``, ``--epochs``,
``--max-train-examples``, ``--max-eval-examples`` and ``--minutes`` (per task) keep it within a small CPU.

    python experiments/finetune_glue.py --max-train-examples 400 --max-eval-examples 200 --epochs 1 \\
        --minutes 0.5                                   # a few minutes: proves it works
    python experiments/finetune_glue.py --model runs/pretrain-bert/model --epochs 3 --minutes 60  # fuller
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ALL_TASKS = ("sst2", "mrpc", "rte", "stsb", "cola", "conll2003", "squad")
GLUE_DIRS = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "stsb": "STS-B", "cola": "CoLA"}
SQUAD_TRAIN_ARTICLES, SQUAD_EVAL_ARTICLES = 40, 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="the shared data directory")
    p.add_argument("--model", help="checkpoint directory to start from (default: random init of --preset)")
    p.add_argument("--preset", default="bert-mini", help="preset for random initialisation")
    p.add_argument("--tokenizer", help="tokenizer directory for random initialisation (default: train one)")
    p.add_argument(
        "--vocab-size", type=int, default=8000, help="WordPiece vocabulary trained for random init"
    )
    p.add_argument("--tasks", nargs="+", default=list(ALL_TASKS), choices=ALL_TASKS)
    p.add_argument(
        "--lr",
        type=float,
        nargs="+",
        default=None,
        help="learning rate(s); several = a sweep (default 5e-5 from a checkpoint, 5e-4 random init)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--qa-max-length", type=int, default=384)
    p.add_argument("--qa-stride", type=int, default=128, help="overlap of SQuAD passage windows, in tokens")
    p.add_argument("--max-train-examples", type=int, default=None)
    p.add_argument("--max-eval-examples", type=int, default=None)
    p.add_argument("--minutes", type=float, default=None, help="training budget per task and run")
    p.add_argument("--device", default="auto")
    p.add_argument("--output-dir", default="runs/finetune_glue")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    return p.parse_args(argv)  # fmt: skip


def squad_by_article(path: Path) -> tuple[list, list]:
    """SQuAD dev questions split by article: the first 40 articles train, the last 8 evaluate."""
    from attnlab.tasks.loaders import load_squad

    examples = load_squad(path)
    titles: list[str] = []
    for ex in examples:
        if not titles or titles[-1] != ex.title:
            titles.append(ex.title)
    if len(titles) < SQUAD_TRAIN_ARTICLES + SQUAD_EVAL_ARTICLES:
        raise ValueError(f"{path}: {len(titles)} articles, need {SQUAD_TRAIN_ARTICLES + SQUAD_EVAL_ARTICLES}")
    train_titles = set(titles[:SQUAD_TRAIN_ARTICLES])
    eval_titles = set(titles[-SQUAD_EVAL_ARTICLES:])
    return [e for e in examples if e.title in train_titles], [e for e in examples if e.title in eval_titles]


def task_data(task: str, data: Path) -> tuple[list, list]:
    from attnlab.tasks.finetune import get_task, load_split

    if task == "squad":
        return squad_by_article(data / "squad" / "v1.1" / "dev-v1.1.json")
    spec = get_task(task)
    directory = data / "glue" / GLUE_DIRS[task] if task in GLUE_DIRS else data / "conll2003"
    return load_split(spec, directory, "train"), load_split(spec, directory, "dev")


def training_texts(splits: dict[str, tuple[list, list]], limit: int | None):
    for train, _ in splits.values():
        for ex in train[:limit]:
            if hasattr(ex, "words"):
                yield " ".join(ex.words)
            elif hasattr(ex, "context"):
                yield ex.question
                yield ex.context
            else:
                yield ex.text_a
                if ex.text_b:
                    yield ex.text_b


def main(argv: list[str] | None = None) -> int:
    import torch

    from attnlab.models import get_preset
    from attnlab.tasks.features import pad_id_of
    from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task
    from attnlab.tokenizers import load_tokenizer
    from attnlab.tokenizers.trainers import train_tokenizer

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    data, out = Path(args.data), Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    splits = {task: task_data(task, data) for task in args.tasks}

    if args.model:
        source_kwargs = {"directory": args.model}
        lrs = tuple(args.lr or (5e-5,))
        start = f"checkpoint {args.model}"
    else:
        if args.tokenizer:
            tokenizer = load_tokenizer(args.tokenizer)
        else:
            t0 = time.time()
            texts = list(training_texts(splits, args.max_train_examples))
            tokenizer = train_tokenizer(
                "wordpiece", iter(texts), args.vocab_size, show_progress=False, processes=1
            )
            tokenizer.save(out / "tokenizer")
            print(f"trained a {tokenizer.vocab_size}-token WordPiece vocabulary on {len(texts)} texts "
                  f"in {time.time() - t0:.0f} s", flush=True)  # fmt: skip
        config = get_preset(args.preset, vocab_size=tokenizer.vocab_size, pad_token_id=pad_id_of(tokenizer))
        source_kwargs = {"config": config, "tokenizer": tokenizer, "name": f"{args.preset} (random init)"}
        # Without pre-training the encoder learns from scratch: BERT's 2e-5..5e-5 barely move it.
        lrs = tuple(args.lr or (5e-4,))
        start = f"random init of {args.preset}"

    rows = []
    for task in args.tasks:
        spec = get_task(task)
        train, dev = splits[task]
        qa = spec.kind == "qa"
        cfg = FinetuneConfig(
            learning_rates=lrs, seeds=tuple(args.seeds), epochs=args.epochs, batch_size=args.batch_size,
            max_length=args.qa_max_length if qa else args.max_length, stride=args.qa_stride,
            max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
            minutes=args.minutes, device=args.device, output_dir=out / task,
        )  # fmt: skip
        t0 = time.time()
        result = finetune_examples(spec, ModelSource(**source_kwargs), train, dev, cfg)
        minutes = (time.time() - t0) / 60
        best = max(result.runs, key=lambda r: r.score(spec.metric))
        row = {
            "task": task,
            "metric": spec.metric,
            "value": result.median,
            "train_examples": result.train_examples,
            "eval_examples": result.eval_examples,
            "minutes": minutes,
            "lr": result.learning_rate,
            "steps": best.steps,
            "stopped_by_time": any(r.stopped_by_time for r in result.runs),
            "all_metrics": best.best,
        }
        rows.append(row)
        print(f"{task}: {spec.metric} (%) = {result.median:.2f} ({minutes:.1f} min)", flush=True)

    print(f"\nfine-tuning from {start}; lr {', '.join(f'{x:g}' for x in lrs)}; seeds {args.seeds}")
    print(f"{'task':<10} {'metric':<9} {'value':>8} {'train ex':>9} {'dev ex':>7} {'minutes':>8}")
    for r in rows:
        value = r["value"]  # percent for every task (attnlab.metrics.scale)
        note = "  (time limit)" if r["stopped_by_time"] else ""
        print(
            f"{r['task']:<10} {r['metric']:<9} {value:8.2f} {r['train_examples']:9d} "
            f"{r['eval_examples']:7d} {r['minutes']:8.1f}{note}"
        )
    (out / "results.json").write_text(json.dumps({"start": start, "rows": rows}, indent=2))
    print(f"(values x100 except SQuAD F1, already in %; per-run details in {out}/<task>/results.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
