"""Held-out MLM accuracy against training wall time: ``attnlab pretrain``'s defaults against HF's ``Trainer``.

    python experiments/learning_curve.py                    # the full run: 15 + 30 minutes of training
    OMP_NUM_THREADS=1 python experiments/learning_curve.py --attnlab-minutes 0.5 --hf-minutes 0.5 \\
        --eval-seconds 5 --probe-minutes 0.2 --output runs/lc-smoke        # a smoke run: 2-3 minutes

The goal: attnlab's default reaches the held-out MLM accuracy that HF's ``Trainer`` +
``BertForMaskedLM`` reaches in 30 minutes (same model size, data and tokenizer, HF's documented defaults)
in 15 minutes or less.

What it does:
1. attnlab: ``attnlab pretrain`` as a subprocess on the built-in corpus (or ``--corpus PATH... --format F``)
   with the CLI's own defaults (recipe, preset, batch, length, learning rate, schedule: nothing is set here),
   ``--minutes ATTNLAB_MINUTES``, ``--output OUT/attnlab`` and ``--set trainer.eval_every=N``. N makes the
   held-out set evaluated about every ``--eval-seconds`` (30) of training: a first short run of the same
   command (``--probe-minutes``, 0.5) prepares the tokenizer and shards (cached for the real run) and its
   ``log.jsonl`` gives the seconds per step; ``--eval-every N`` skips it. The curve is read from
   ``OUT/attnlab/train/log.jsonl``: each eval record's ``train_seconds`` (training wall time, evaluation
   excluded) and ``eval_mlm_accuracy``. The CLI's ``--minutes`` is wall time from the start of training and
   includes its evaluations, so attnlab trains for a little less than ATTNLAB_MINUTES.
2. HF: ``transformers.BertForMaskedLM`` with a ``BertConfig`` of the attnlab model's vocabulary, width,
   depth, heads, feed-forward size and positions (``OUT/attnlab/run.json``), HF's defaults for the rest
   (post-LN, GELU, dropout 0.1, init 0.02); ``transformers.Trainer`` with ``TrainingArguments`` at their
   defaults (AdamW lr 5e-5, batch 8, linear decay, no warm-up, no weight decay, clipping at 1.0) and
   ``DataCollatorForLanguageModeling(mlm_probability=0.15)``. Set here: the output folder, the seed, no
   reporting, no progress bar, CPU unless CUDA is there, no checkpoints (HF's default saves every 500
   steps: tens of GB over 30 minutes; not saving only helps HF's clock), and the length of the schedule.
   HF plans the linear decay over ``max_steps``, which a time budget does not give; so, as attnlab's CLI
   does for itself, the callback below re-fits the decay's end to the time left at 2, 10, 30, 50, 70 and
   85% of HF_MINUTES, from the step time measured since the previous fit, and the clock stops the run
   (the learning rate is then near 0, as a planned run's would be). ``--hf-max-steps N`` fixes
   ``max_steps`` instead. Data: the attnlab run's training shards, each document
   framed as ``[CLS] ... [SEP]``, concatenated and cut into blocks of the run's sequence length, the
   remainder dropped, as ``run_mlm.py``'s ``group_texts`` does (it frames each line of a text file;
   framing whole documents wastes fewer positions on special tokens). Tokenizer: the attnlab run's
   ``tokenizer.json`` read by ``transformers.PreTrainedTokenizerFast``. A ``TrainerCallback`` keeps the
   clock (evaluation excluded), evaluates at the start and about every ``--eval-seconds`` of training,
   and stops after HF_MINUTES.
3. Both are scored on the attnlab run's own held-out set (`pretraining.inputs.heldout_set` rebuilt from
   ``run.json``: the same sequences and masked positions; the number of masked tokens is checked against
   attnlab's log). HF's model is given segment ids of 0 there, as in its training: its segment embedding 1
   was never trained.
4. Both on the same number of torch threads: the attnlab run's (``estimate_steps`` switches it to one
   thread when one is faster, and says so in its output; ``--hf-threads`` overrides).

Prints a table of held-out accuracy against minutes (each curve interpolated linearly between its
evaluations), attnlab's unigram baseline, and the time-to-accuracy: HF's accuracy at its last evaluation,
the first time attnlab's curve reaches it (linear interpolation between evaluations; its first evaluation
if that one is already above: an upper bound), the ratio, and PASS when that time is at most HF_MINUTES / 2.
Writes OUT/learning_curve.png, OUT/learning_curve.json, OUT/attnlab.log (the CLI's output) and OUT/hf.

Measured on the project's 2-core CPU (2026-11-25, torch 2.13 CPU, transformers as installed by the test
extras; one thread each, as the attnlab run chose; other engineers' jobs shared the machine at times),
built-in corpus (393k training tokens, 1,938-token WordPiece trained by attnlab), both models 2 layers of 128:

    .venv/bin/python experiments/learning_curve.py --output runs/learning-curve

    attnlab (defaults for 15 minutes: pre-LN, no dropout, 40% masking, lr 2e-3 planned inside the budget):
      25,848 steps of 32 x 32 tokens, held-out MLM accuracy 11.5% at 0.4 min, 41.1% at 2.9, 47.0% at 6.2,
      51.0% at 13.6 (its last evaluation; the budget includes its 30 evaluations)
    HF Trainer + BertForMaskedLM (documented defaults: lr 5e-5, batch 8, post-LN, dropout 0.1, 15%):
      100,978 steps, 6.4% at 1 min, 15.0% at 10, 17.0% at 30 min
    unigram guess 4.7%
    time-to-accuracy: HF reaches 17.0% in 30.0 min; attnlab reaches it in 1.03 min (29x faster); goal
    (<= 15 min): PASS

Re-measured on the slower 2-core AMD EPYC (AVX2, about 3x slower; 2026-11-27, alone on the
machine, both on 2 threads as the attnlab run chose), attnlab given 6 minutes instead of 15 (enough to
pass HF's 30-minute figure; the target is reaching it within 15):

    .venv/bin/python experiments/learning_curve.py --output runs/learning-curve-2 --attnlab-minutes 6

    attnlab: 5,170 steps, 19.7% at 1 min, 33.2% at 2, 40.4% at 4, 42.7% at 5.7 (its last evaluation)
    HF: 51,334 steps, 4.9% at 1 min, 12.9% at 10, 15.1% at 20, 15.1% at 30 min
    unigram guess 4.7%
    time-to-accuracy: HF reaches 15.1% in 30.0 min; attnlab reaches it in 0.62 min (48.7x faster);
    goal (<= 15 min): PASS

The gap is the recipe each tool runs by default, not its arithmetic: given identical settings the two
train identically (benchmarks/training_parity.py). What this measures is what each tool's defaults give a
user in the time given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ONE_THREAD = "one thread is faster here"  # what attnlab.train.budget.estimate_steps logs when it switches

Curve = list[tuple[float, float]]  # (training seconds, held-out MLM accuracy), by time


# ----------------------------------------------------------------------------------------- curves


def time_to_accuracy(curve: Curve, target: float) -> float | None:
    """The first time ``curve`` reaches ``target``: linear interpolation between the two evaluations around
    the crossing; the first evaluation's time when it is already at or above ``target`` (an upper bound: the
    curve is unknown before it); None if never reached."""
    previous: tuple[float, float] | None = None
    for t, accuracy in sorted(curve):
        if accuracy >= target:
            if previous is None:
                return t
            t0, a0 = previous
            return t0 + (target - a0) * (t - t0) / (accuracy - a0)
        previous = (t, accuracy)
    return None


def accuracy_at(curve: Curve, t: float) -> float | None:
    """The curve at ``t`` seconds, linear between evaluations; None outside the evaluated range."""
    points = sorted(curve)
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    for (t0, a0), (t1, a1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def read_attnlab_curve(train_dir: Path, run: dict[str, Any]) -> tuple[Curve, dict[str, Any]]:
    """(train_seconds, eval_mlm_accuracy) of every eval record under ``train_dir`` and the last eval record.
    Several length stages (train/stage-N) restart the clock: each stage is shifted by the time of the
    stages before it. A run stopped by its time limit is evaluated after `Trainer.train` has returned and
    closed its log: that last point is ``run.json``'s eval, at the ``train_seconds`` of the train record
    logged at the step where it stopped."""
    from attnlab.train.logging import read_log

    logs = sorted(train_dir.glob("stage-*/log.jsonl"), key=lambda p: int(p.parent.name.split("-")[1]))
    logs = logs or [train_dir / "log.jsonl"]
    curve: Curve = []
    last: dict[str, Any] = {}
    offset = start = 0.0  # the last stage's start
    records: list[dict[str, Any]] = []
    for path in logs:
        start, records = offset, read_log(path)
        for r in records:
            if r.get("kind") == "eval" and "eval_mlm_accuracy" in r:
                curve.append((offset + float(r["train_seconds"]), float(r["eval_mlm_accuracy"])))
                last = r
        offset += max((float(r.get("train_seconds", 0.0)) for r in records), default=0.0)
    final, steps = run.get("eval", {}), run.get("steps")
    if "eval_mlm_accuracy" in final and steps is not None and steps > last.get("step", -1):
        at_stop = [r for r in records if r.get("kind") == "train" and r["step"] == steps]
        if at_stop and "train_seconds" in at_stop[-1]:
            curve.append((start + float(at_stop[-1]["train_seconds"]), float(final["eval_mlm_accuracy"])))
            last = {"step": steps, **final}
    return curve, last


def seconds_per_step(log_path: Path) -> float:
    """Training seconds per optimizer step in a run's ``log.jsonl``, over its train records after the first
    (the first steps of a process are slower)."""
    from attnlab.train.logging import read_log

    train = [r for r in read_log(log_path) if r.get("kind") == "train" and "train_seconds" in r]
    if len(train) < 2:
        raise ValueError(f"{log_path}: fewer than 2 train records; make --probe-minutes longer")
    first, last = train[0], train[-1]
    return (last["train_seconds"] - first["train_seconds"]) / max(1, last["step"] - first["step"])


# ----------------------------------------------------------------------------------------- attnlab


def run_cli(command: list[str], log_path: Path) -> str:
    """Run ``command``, echoing its output and appending it to ``log_path``; its output as one string."""
    print("$ " + " ".join(command), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    lines = []
    with log_path.open("a", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            print("  | " + line, end="", flush=True)
            log.write(line)
            lines.append(line)
        if proc.wait() != 0:
            raise RuntimeError(f"{' '.join(command[:4])}... exited with {proc.returncode}; see {log_path}")
    return "".join(lines)


def run_attnlab(args: argparse.Namespace, out: Path) -> None:
    """``attnlab pretrain`` with the CLI's defaults: a probe run for the evaluation interval, then the run."""
    base = [sys.executable, "-m", "attnlab", "pretrain", "--output", str(out / "attnlab")]
    if args.corpus:
        base += ["--corpus", *args.corpus] + (["--format", args.format] if args.format else [])
    base += ["--seed", str(args.seed), "--eval-examples", str(args.eval_examples), "--no-progress"]
    base += ["--overwrite"]
    log_path = out / "attnlab.log"
    log_path.unlink(missing_ok=True)
    eval_every = args.eval_every
    if eval_every is None:
        print(f"\n== attnlab probe: {args.probe_minutes:g} min to time a step (and prepare the data)")
        run_cli(base + ["--minutes", str(args.probe_minutes)], log_path)
        per_step = seconds_per_step(out / "attnlab" / "train" / "log.jsonl")
        eval_every = max(1, round(args.eval_seconds / per_step))
        print(f"{per_step:.3f} s a step: evaluating every {eval_every} steps (~{args.eval_seconds:g} s)")
        shutil.rmtree(out / "attnlab" / "train")
    print(f"\n== attnlab pretrain, {args.attnlab_minutes:g} minutes")
    run_cli(
        base + ["--minutes", str(args.attnlab_minutes), "--set", f"trainer.eval_every={eval_every}"], log_path
    )


def attnlab_threads(out: Path) -> int | None:
    """1 if the attnlab run (not its probe) switched to one thread, else None (torch's default)."""
    path = out / "attnlab.log"
    if not path.is_file():
        return None
    last_run = path.read_text(encoding="utf-8").rsplit("\n$ ", 1)[-1]
    return 1 if ONE_THREAD in last_run else None


# ----------------------------------------------------------------------------------------- HF


def grouped_blocks(corpus: Any, cls: int, sep: int, block_size: int):
    """``run_mlm.py``'s ``group_texts`` over prepared shards: every document as ``[CLS] ids [SEP]``, all
    concatenated and cut into rows of ``block_size`` tokens, the remainder dropped. (N, block_size) int64."""
    import numpy as np

    pieces = []
    for shard in corpus.shards:
        ids = np.asarray(shard.ids, dtype=np.int64)
        bounds = np.asarray(shard.sent_offsets)[np.asarray(shard.doc_offsets)]  # token offsets of documents
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                pieces += [np.array([cls]), ids[a:b], np.array([sep])]
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    n = len(flat) // block_size
    if n == 0:
        raise ValueError(f"the training shards hold {len(flat)} tokens, less than one block of {block_size}")
    return flat[: n * block_size].reshape(n, block_size)


class Blocks:
    """The grouped blocks as a map-style dataset of the fields ``run_mlm.py``'s tokenizer returns."""

    def __init__(self, blocks: Any, special_ids: Sequence[int]) -> None:
        import numpy as np

        self.blocks = blocks
        self.special = np.isin(blocks, list(special_ids)).astype(np.int64)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        ids = self.blocks[i].tolist()
        return {
            "input_ids": ids,
            "token_type_ids": [0] * len(ids),
            "attention_mask": [1] * len(ids),
            "special_tokens_mask": self.special[i].tolist(),
        }


def rebuild_recipe(run: dict[str, Any]):
    """The run's `Recipe` from ``run.json`` (its name's recipe with every field the run recorded)."""
    from attnlab.pretraining.recipes import get_recipe

    fields = dict(run["recipe"])
    return get_recipe(fields["name"]).override(**fields)


def heldout_batches(out: Path, run: dict[str, Any], examples: int, seed: int) -> list[dict[str, Any]]:
    """The attnlab run's held-out evaluation set, collated as the run collates it."""
    from attnlab.data import PretrainingCollator, ShardedCorpus, SpecialIds
    from attnlab.pretraining.inputs import heldout_set
    from attnlab.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(out / "attnlab" / "tokenizer")
    recipe = rebuild_recipe(run)
    data = heldout_set(
        recipe, ShardedCorpus(out / "attnlab" / "data" / "heldout", tokenizer), tokenizer, examples, seed=seed
    )
    collate = PretrainingCollator(SpecialIds.from_tokenizer(tokenizer).pad)
    size = recipe.batch_size
    return [collate([data[j] for j in range(i, min(i + size, len(data)))]) for i in range(0, len(data), size)]


def mlm_accuracy(model: Any, batches: list[dict[str, Any]]) -> tuple[float, int]:
    """argmax == label over the masked tokens (labels != -100) of ``batches``; (accuracy, tokens)."""
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = count = 0
    with torch.no_grad():
        for batch in batches:
            ids = batch["input_ids"].to(device)
            labels = batch["labels"].to(device)
            logits = model(
                input_ids=ids,
                attention_mask=batch["attention_mask"].to(device),
                token_type_ids=torch.zeros_like(ids),  # as in its training (see the module docstring)
            ).logits  # (B, T, V)
            keep = labels != -100
            correct += int((logits[keep].argmax(-1) == labels[keep]).sum())
            count += int(keep.sum())
    model.train(was_training)
    return correct / max(1, count), count


# fractions of HF's budget at which its linear schedule is re-fitted to the time left (attnlab's CLI re-plans
# at 10, 30, 50, 70 and 85% of its run; 2% gives the first fit, the learning rate still within 2% of its peak)
HF_REPLAN_AT = (0.02, 0.1, 0.3, 0.5, 0.7, 0.85)


def set_linear_horizon(scheduler: Any, total: int) -> None:
    """Make HF's ``linear`` schedule without warm-up (a `LambdaLR`: peak * (total - step) / total, then 0)
    end at step ``total``, from the next step on."""

    def factor(step: int) -> float:
        return max(0.0, (total - step) / max(1, total))

    scheduler.lr_lambdas = [factor] * len(scheduler.lr_lambdas)


def hf_clock(budget_s: float, eval_s: float, evaluate: Any, fit_schedule: bool):
    """A `transformers.TrainerCallback` that keeps the training clock (evaluation excluded), evaluates at the
    start and every ``eval_s`` of training (``evaluate(model, step, seconds)``), stops the run once
    ``budget_s`` is spent (evaluating there) or at max_steps, and with ``fit_schedule`` re-fits the linear
    schedule's end to the time left at `HF_REPLAN_AT` (steps a second measured since the previous fit)."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.start = self.paused = 0.0
            self.next_eval = 0.0
            self.mark: tuple[int, float] | None = None  # (step, seconds) where the step-time window starts
            self.replan_at = [f * budget_s for f in HF_REPLAN_AT] if fit_schedule else []
            self.plans: list[dict[str, float]] = []
            self.last_lr = float("nan")

        def seconds(self) -> float:
            return time.perf_counter() - self.start - self.paused

        def _evaluate(self, model: Any, step: int, seconds: float) -> None:
            t0 = time.perf_counter()
            evaluate(model, step, seconds)
            self.paused += time.perf_counter() - t0

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.start, self.paused = time.perf_counter(), 0.0
            self._evaluate(model, 0, 0.0)
            self.next_eval = eval_s

        def on_step_end(self, args, state, control, model=None, lr_scheduler=None, **kwargs):
            seconds, step = self.seconds(), state.global_step
            if self.mark is None:
                self.mark = (step, seconds)  # the first step of a process is slower: not timed
            if self.replan_at and seconds >= self.replan_at[0]:
                while self.replan_at and seconds >= self.replan_at[0]:
                    self.replan_at.pop(0)
                per_step = (seconds - self.mark[1]) / max(1, step - self.mark[0])
                self.mark = (step, seconds)
                total = step + max(1, int((budget_s - seconds) / per_step))
                set_linear_horizon(lr_scheduler, total)
                self.plans.append({"step": step, "seconds": seconds, "per_step": per_step, "total": total})
            self.last_lr = lr_scheduler.get_last_lr()[0]
            done = seconds >= budget_s or step >= state.max_steps
            if done or seconds >= self.next_eval:
                self._evaluate(model, step, seconds)
                while self.next_eval <= seconds:
                    self.next_eval += eval_s
            if done:
                control.should_training_stop = True

    return Clock()


def run_hf(args: argparse.Namespace, out: Path, run: dict[str, Any], threads: int) -> dict[str, Any]:
    """HF's Trainer + BertForMaskedLM on the attnlab run's data, tokenizer and held-out set."""
    import torch
    import transformers
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        PreTrainedTokenizerFast,
        Trainer,
        TrainingArguments,
    )

    from attnlab.data import ShardedCorpus

    torch.set_num_threads(threads)
    tok_dir = out / "attnlab" / "tokenizer"
    special = json.loads((tok_dir / "tokenizer_config.json").read_text())
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tok_dir / "tokenizer.json"),
        **{f"{r}_token": special[f"{r}_token"] for r in ("cls", "sep", "mask", "pad")},
    )
    mc = run["model_config"]
    if len(tokenizer) != mc["vocab_size"]:
        raise ValueError(f"HF reads {len(tokenizer)} tokens from {tok_dir}, the model has {mc['vocab_size']}")
    if mc.get("embedding_size") not in (None, mc["hidden_size"]):
        print(f"note: the attnlab model factorises its embeddings (E={mc['embedding_size']}); HF's has E=H")
    config = BertConfig(
        vocab_size=mc["vocab_size"],
        hidden_size=mc["hidden_size"],
        num_hidden_layers=mc["num_layers"],
        num_attention_heads=mc["num_heads"],
        intermediate_size=mc["intermediate_size"],
        max_position_embeddings=mc["max_position_embeddings"],
        pad_token_id=tokenizer.pad_token_id,
    )
    block_size = rebuild_recipe(run).stages[-1].max_length
    blocks = grouped_blocks(
        ShardedCorpus(out / "attnlab" / "data" / "train"),
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        block_size,
    )
    train_data = Blocks(blocks, tokenizer.all_special_ids)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    eval_batches = heldout_batches(out, run, args.eval_examples, args.seed)
    print(
        f"HF: BertForMaskedLM L={config.num_hidden_layers} H={config.hidden_size} A="
        f"{config.num_attention_heads} I={config.intermediate_size} V={config.vocab_size}; "
        f"{len(blocks):,} blocks of {block_size} tokens; {threads} torch thread(s)"
    )
    budget = 60.0 * args.hf_minutes
    use_cpu = not torch.cuda.is_available()

    def training_args(max_steps: int) -> TrainingArguments:
        # HF's defaults but for these: nothing about the optimisation is set here
        return TrainingArguments(
            output_dir=str(out / "hf"),
            max_steps=max_steps,
            seed=args.seed,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=use_cpu,
        )

    def trainer(max_steps: int, clock: Any) -> Trainer:
        transformers.set_seed(args.seed)
        model = BertForMaskedLM(config)
        return Trainer(
            model=model,
            args=training_args(max_steps),
            train_dataset=train_data,
            data_collator=collator,
            callbacks=[clock],
        )

    fit = not args.hf_max_steps
    max_steps = args.hf_max_steps or 10**9  # fitted: the clock stops it, the schedule is re-fitted as it runs

    curve: Curve = []
    tokens: list[int] = []

    def evaluate(model: Any, step: int, seconds: float) -> None:
        accuracy, n = mlm_accuracy(model, eval_batches)
        curve.append((seconds, accuracy))
        tokens.append(n)
        print(f"HF step {step}: {seconds / 60:.2f} min, held-out MLM accuracy {accuracy:.4f}", flush=True)

    clock = hf_clock(budget, args.eval_seconds, evaluate, fit)
    result = trainer(max_steps, clock)
    result.train()
    for plan in clock.plans:
        print(
            f"HF schedule fitted at step {plan['step']} ({plan['seconds']:.0f} s): "
            f"{plan['per_step']:.3f} s a step, so the linear decay ends at step {plan['total']}"
        )
    print(f"HF: {result.state.global_step} steps, learning rate {clock.last_lr:.2e} at the end")
    return {
        "curve": curve,
        "eval_tokens": tokens[-1] if tokens else 0,
        "steps": result.state.global_step,
        "max_steps": None if fit else max_steps,
        "schedule_fits": clock.plans,
        "final_lr": clock.last_lr,
        "threads": threads,
        "blocks": len(blocks),
        "block_size": block_size,
        "transformers": transformers.__version__,
        "config": {k: getattr(config, k) for k in ("hidden_dropout_prob", "initializer_range", "hidden_act")},
        "training_args": {
            k: getattr(result.args, k)
            for k in (
                "learning_rate",
                "per_device_train_batch_size",
                "lr_scheduler_type",
                "warmup_steps",
                "weight_decay",
                "max_grad_norm",
                "adam_beta1",
                "adam_beta2",
                "adam_epsilon",
            )
        }
        | {"optim": str(getattr(result.args.optim, "value", result.args.optim))},
    }


# ----------------------------------------------------------------------------------------- report


def plot(
    path: Path, attnlab: Curve, hf: Curve, target: float, reached: float | None, goal: float, baseline: Any
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot([t / 60 for t, _ in attnlab], [a for _, a in attnlab], "o-", ms=3, label="attnlab pretrain")
    ax.plot([t / 60 for t, _ in hf], [a for _, a in hf], "s-", ms=3, label="HF Trainer + BertForMaskedLM")
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"HF's final accuracy {target:.4f}")
    if reached is not None:
        ax.axvline(
            reached / 60, color="C0", ls=":", lw=1, label=f"attnlab reaches it: {reached / 60:.2f} min"
        )
    ax.axvline(goal / 60, color="C3", ls="--", lw=1, label=f"goal: {goal / 60:g} min")
    if baseline is not None:
        ax.axhline(baseline, color="black", ls=":", lw=1, label=f"unigram baseline {baseline:.4f}")
    ax.set_xlabel("training wall time (minutes, evaluation excluded)")
    ax.set_ylabel("held-out MLM accuracy")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(attnlab: Curve, hf: Curve, step_s: float) -> list[tuple[float, float | None, float | None]]:
    end = max([t for t, _ in attnlab + hf], default=0.0)
    rows, t = [], 0.0
    while t <= end + 1e-9:
        rows.append((t / 60, accuracy_at(attnlab, t), accuracy_at(hf, t)))
        t += step_s
    return rows


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attnlab-minutes", type=float, default=15.0, help="attnlab's --minutes (default 15)")
    p.add_argument("--hf-minutes", type=float, default=30.0, help="HF's training time (default 30)")
    p.add_argument("--output", default="runs/learning-curve")
    p.add_argument("--corpus", nargs="*", metavar="PATH", help="files or folders (default: built-in corpus)")
    p.add_argument("--format", help="corpus format, passed to attnlab pretrain (default: its own)")
    p.add_argument("--skip-attnlab", action="store_true", help="reuse the attnlab run in OUTPUT/attnlab")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-seconds", type=float, default=30.0, help="evaluate about this often (default 30)")
    p.add_argument("--eval-every", type=int, help="attnlab: evaluate every N steps (default: from a probe)")
    p.add_argument("--probe-minutes", type=float, default=0.5, help="attnlab probe run (default 0.5)")
    p.add_argument("--eval-examples", type=int, default=512, help="held-out sequences scored (default 512)")
    p.add_argument(
        "--hf-max-steps", type=int, help="HF max_steps, a fixed schedule (default: fitted to --hf-minutes)"
    )
    p.add_argument("--hf-threads", type=int, help="HF's torch threads (default: the attnlab run's)")
    args = p.parse_args(argv)
    if args.format and not args.corpus:
        p.error("--format needs --corpus")

    import importlib.util

    import torch

    if importlib.util.find_spec("accelerate") is None:  # HF's Trainer needs it; checked before any training
        print("HF's Trainer needs accelerate: pip install 'accelerate>=1.1.0'", file=sys.stderr)
        return 2
    out = Path(args.output).resolve()  # the attnlab runs start in ROOT
    out.mkdir(parents=True, exist_ok=True)
    default_threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {default_threads} thread(s) by default, {os.cpu_count()} cores")
    if not args.skip_attnlab:
        run_attnlab(args, out)
    run_path = out / "attnlab" / "run.json"
    if not run_path.is_file():
        print(f"{run_path}: no attnlab run (drop --skip-attnlab)", file=sys.stderr)
        return 2
    run = json.loads(run_path.read_text())
    attnlab_curve, last_eval = read_attnlab_curve(out / "attnlab" / "train", run)
    if not attnlab_curve:
        print(f"{out / 'attnlab' / 'train'}: no eval records in log.jsonl", file=sys.stderr)
        return 2
    attnlab_thr = attnlab_threads(out) or default_threads
    threads = args.hf_threads or attnlab_thr
    print(f"\nattnlab ran on {attnlab_thr} thread(s); HF runs on {threads}")
    print(f"\n== HF Trainer, {args.hf_minutes:g} minutes")
    hf = run_hf(args, out, run, threads)
    hf_curve: Curve = hf["curve"]

    if last_eval.get("eval_mlm_tokens") and int(last_eval["eval_mlm_tokens"]) != hf["eval_tokens"]:
        print(
            f"WARNING: HF was scored on {hf['eval_tokens']} masked tokens, attnlab on "
            f"{int(last_eval['eval_mlm_tokens'])}: not the same held-out set"
        )
    target_s, target = hf_curve[-1]
    reached = time_to_accuracy(attnlab_curve, target)
    goal_s = 60.0 * args.hf_minutes / 2
    passed = reached is not None and reached <= goal_s
    baseline = run.get("eval", {}).get("eval_unigram_accuracy")

    step_s = max(args.eval_seconds, max(t for t, _ in attnlab_curve + hf_curve) / 30)
    step_s = 60.0 if step_s > 45 else step_s
    print(f"\nheld-out MLM accuracy over {hf['eval_tokens']} masked tokens ({args.eval_examples} sequences)")
    print(f"{'minutes':>8}  {'attnlab':>8}  {'HF':>8}")
    for minutes, a, h in table(attnlab_curve, hf_curve, step_s):
        print(f"{minutes:8.2f}  {fmt(a):>8}  {fmt(h):>8}")
    print(
        f"attnlab: {len(attnlab_curve)} evaluations, final {attnlab_curve[-1][1]:.4f} at "
        f"{attnlab_curve[-1][0] / 60:.2f} min, {run.get('steps')} steps"
    )
    print(
        f"HF:      {len(hf_curve)} evaluations, final {target:.4f} at {target_s / 60:.2f} min, "
        f"{hf['steps']} steps"
    )
    if baseline is not None:
        print(f"unigram baseline (attnlab's run.json): {baseline:.4f}")
    ratio = None if reached is None else reached / target_s
    when = "not reached" if reached is None else f"{reached / 60:.2f} min"
    print(
        f"\ntime-to-accuracy: HF reaches {target:.4f} in {target_s / 60:.2f} min; attnlab reaches it in "
        f"{when}{'' if ratio is None else f' ({ratio:.2f} of HF time, {1 / ratio:.1f}x faster)'}"
    )
    print(f"goal (attnlab <= {goal_s / 60:g} min): {'PASS' if passed else 'FAIL'}")
    if reached is not None and reached == attnlab_curve[0][0]:
        print("(attnlab's first evaluation is already above it: its time is an upper bound)")

    plot(out / "learning_curve.png", attnlab_curve, hf_curve, target, reached, goal_s, baseline)
    results = {
        "attnlab": {
            "curve": attnlab_curve,
            "minutes": args.attnlab_minutes,
            "steps": run.get("steps"),
            "threads": attnlab_thr,
            "eval_tokens": last_eval.get("eval_mlm_tokens"),
            "recipe": run.get("recipe"),
            "model_config": run.get("model_config"),
        },
        "hf": {**hf, "minutes": args.hf_minutes},
        "unigram_accuracy": baseline,
        "target_accuracy": target,
        "hf_seconds": target_s,
        "attnlab_seconds_to_target": reached,
        "ratio": ratio,
        "goal_seconds": goal_s,
        "pass": passed,
    }
    (out / "learning_curve.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"plot: {out / 'learning_curve.png'}; figures: {out / 'learning_curve.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
