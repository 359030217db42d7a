"""Fine-tuning speed with and without length grouping: attnlab's recipe vs HF ``Trainer`` on GLUE data.

    .venv/bin/python benchmarks/finetuning.py                        # STS-B and RTE, 40 steps each (~8 min)
    .venv/bin/python benchmarks/finetuning.py --tasks sst2 --steps 20                      # a quick run

A padded batch costs the time of its longest example. Sentence-pair tasks mix short and long pairs (STS-B:
8 to 128 tokens), so a batch of 32 drawn at random is about half padding. Length grouping (HF's
``TrainingArguments.group_by_length``, attnlab's ``finetune --group-by-length``) sorts chunks of the shuffled
epoch by length before cutting batches: each example is still read once an epoch, in a seeded order.

For each task: its training split, tokenised by attnlab's loader of the released bert-base-uncased WordPiece
(``../shared/data/tokenizers``), of which each run trains the first ``--steps`` batches of its epoch (both
libraries group over the whole split, as they would in a full run: HF's chunks are
min(examples / (4 x 32), 50) batches, attnlab's 50); a bert-mini
(4 x 256, Google's BERT-Mini shape, 30,522 tokens) built from one seed, copied into HF's
``BertForSequenceClassification`` (``attnlab.io.to_hf``: the same weights). Four runs of ``--steps``
optimizer steps, batch 32, fp32, dropout 0.1, AdamW with BERT's linear schedule, on the same split:
attnlab (``attnlab.tasks.finetune.finetune_examples``, the command's code) without and with grouping, HF
``Trainer`` without and with ``group_by_length``. Reported: the padded share of the training batches'
positions, seconds per optimizer step (the wall time of the training loop over its steps; attnlab's
``train_seconds``, HF's ``train_runtime``) and the speed-ups against the ungrouped run of the same library
and against HF at the same setting. Run it on a quiet machine: the runs follow one another.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script (tokenizers.py) would
# shadow the library of that name that transformers imports.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
TASK_DIRS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE", "cola": "CoLA"}
BATCH = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["stsb", "rte"], choices=list(TASK_DIRS))
    p.add_argument("--steps", type=int, default=40, help="optimizer steps of each run")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p.parse_args(argv)


def padded_share(batches: list[list[int]], lengths: list[int]) -> float:
    """Padding positions / all positions when each batch pads to its longest example."""
    positions = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1.0 - sum(lengths[i] for b in batches for i in b) / positions


def attnlab_run(spec, config, tokenizer, state, train, grouped: bool, steps: int, out: Path) -> dict:
    """``finetune_examples`` (the command's code) for the first ``steps`` batches of an epoch; its log."""
    from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples

    source = ModelSource(config=config, tokenizer=tokenizer)
    build = source.build

    def with_weights(*args, **kwargs):  # the benchmark's one set of weights, not the seed's
        model = build(*args, **kwargs)
        model.load_state_dict(state)
        return model

    source.build = with_weights  # type: ignore[method-assign]
    cfg = FinetuneConfig(
        learning_rates=(1e-4,), seeds=(0,), epochs=steps * BATCH / len(train), batch_size=BATCH,
        keep_best=False, output_dir=out, overwrite=True, group_by_length=grouped, max_length=128,
    )  # fmt: skip
    finetune_examples(spec, source, train, train[:BATCH], cfg)
    logs = [json.loads(line) for line in (out / "lr0.0001-seed0" / "log.jsonl").read_text().splitlines()]
    trained = [r for r in logs if r["kind"] == "train"]
    return {"seconds": trained[-1]["train_seconds"], "steps": trained[-1]["step"]}


def attnlab_padding(features, grouped: bool, steps: int) -> float:
    from attnlab.tasks.features import FeatureDataset
    from attnlab.train import ResumableLoader

    dataset = FeatureDataset(features)
    lengths = dataset.lengths
    loader = ResumableLoader(dataset, BATCH, seed=0, lengths=lengths if grouped else None)
    order = loader.epoch_indices(0).tolist()
    return padded_share([order[i : i + BATCH] for i in range(0, steps * BATCH, BATCH)], lengths)


def hf_run(ours, features, grouped: bool, steps: int, out: Path) -> dict:
    """HF ``Trainer`` on the same features and weights (padding by a collator that records the batches'
    shapes)."""
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from attnlab.io import to_hf

    hf_config, hf_state = to_hf(ours)
    model = BertForSequenceClassification(BertConfig(**hf_config))
    missing, unexpected = model.load_state_dict(hf_state, strict=False)
    if unexpected or [k for k in missing if "position_ids" not in k]:
        raise RuntimeError(f"HF weights: missing {missing}, unexpected {unexpected}")
    rows = [dict(f.inputs) for f in features]
    shapes: list[tuple[int, int]] = []

    def collate(items):
        width = max(len(r["input_ids"]) for r in items)
        batch = {
            key: torch.tensor([r[key] + [0] * (width - len(r[key])) for r in items])
            for key in ("input_ids", "attention_mask", "token_type_ids")
        }
        batch["labels"] = torch.tensor([r["labels"] for r in items])
        shapes.append((batch["input_ids"].numel(), int(batch["attention_mask"].sum())))
        return batch

    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=1e-4,
        warmup_steps=0.1, weight_decay=0.01, adam_epsilon=1e-6, lr_scheduler_type="linear",
        train_sampling_strategy="group_by_length" if grouped else "random", report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
    with contextlib.redirect_stdout(io.StringIO()):  # Trainer prints its metrics
        metrics = trainer.train().metrics
    padded = 1.0 - sum(r for _, r in shapes) / sum(p for p, _ in shapes)
    return {"seconds": metrics["train_runtime"], "steps": steps, "padding": padded}


def bench_task(task: str, args: argparse.Namespace, work: Path) -> dict:
    from attnlab.models import get_preset
    from attnlab.tasks.finetune import ModelSource, build_features, get_task, load_split, task_labels
    from attnlab.tokenizers import load_tokenizer
    from attnlab.train import set_seed

    spec = get_task(task)
    tokenizer = load_tokenizer(args.data / "tokenizers" / "bert-base-uncased")
    train = list(load_split(spec, args.data / "glue" / TASK_DIRS[task], "train"))
    random.Random(0).shuffle(train)
    labels = task_labels(spec, train)
    config = get_preset("bert-mini", vocab_size=tokenizer.get_vocab_size())
    features, _ = build_features(
        spec, tokenizer, train, labels, training=True, max_length=128, with_token_types=True
    )
    set_seed(0)
    model = ModelSource(config=config, tokenizer=tokenizer).build(spec, labels, 0.1, False)
    state = model.state_dict()
    lengths = [len(f.inputs["input_ids"]) for f in features]
    result = {
        "task": task,
        "examples": len(features),
        "mean_tokens": statistics.fmean(lengths),
        "max_tokens": max(lengths),
    }
    for grouped in (False, True):
        key = "grouped" if grouped else "plain"
        t0 = time.perf_counter()
        ours = attnlab_run(
            spec, config, tokenizer, state, train, grouped, args.steps, work / f"a-{task}-{key}"
        )
        ours["padding"] = attnlab_padding(features, grouped, ours["steps"])
        ours["wall"] = time.perf_counter() - t0
        hf = hf_run(model, features, grouped, args.steps, work / f"h-{task}-{key}")
        result[key] = {"attnlab": ours, "hf": hf}
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} "
        f"thread(s); bert-mini, batch {BATCH}, {args.steps} steps per run, fp32, CPU"
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            results.append(bench_task(task, args, Path(tmp)))
    print(
        f"\n{'task':<6}{'grouping':<10}{'library':<9}{'padding':>9}{'s/step':>9}{'vs ungrouped':>14}"
        f"{'vs HF':>8}"
    )
    for r in results:
        for key in ("plain", "grouped"):
            for lib in ("attnlab", "hf"):
                x = r[key][lib]
                per = x["seconds"] / x["steps"]
                base = r["plain"][lib]["seconds"] / r["plain"][lib]["steps"]
                hf = r[key]["hf"]["seconds"] / r[key]["hf"]["steps"]
                print(
                    f"{r['task']:<6}{'on' if key == 'grouped' else 'off':<10}{lib:<9}"
                    f"{100 * x['padding']:8.1f}%"
                    f"{per:9.3f}{base / per:13.2f}x{hf / per:7.2f}x"
                )
        print(
            f"       ({r['examples']} examples, {r['mean_tokens']:.1f} tokens on average, "
            f"at most {r['max_tokens']})"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
