"""DistilBERT in miniature: distil a small BERT pre-trained on the books into half its layers, then GLUE.

    .venv/bin/python experiments/distillation.py          # ~20 min teacher + ~35 min, 2 cores
    .venv/bin/python experiments/distillation.py --distill-minutes 0.3 --finetune-steps 10 \\
        --lr-grid 3e-4 --output runs/distill-smoke                                      # a smoke run

The targets (Sanh et al. 2019): the student keeps >= 95% of the teacher's GLUE dev macro score (SST-2,
MRPC, STS-B, CoLA, RTE) while running >= 1.6x faster, and the paper's Table 4 orderings: a randomly
initialised student scores lowest, and removing the cosine loss or the soft-target loss lowers the score.

What it does:
1. The teacher: ``--teacher`` (default OUT/teacher/model). Where that directory holds no model, it is
   pre-trained first for ``--teacher-minutes`` (default 20) on the books by ``attnlab pretrain --corpus BOOKS
   --format text --preset bert-mini --max-length 128 --vocab-size 8192 --set lr=1e-3`` (the command's
   30-to-60-minute budget settings: a pre-LN bert-mini, 4 layers of 256, 40% masking, no dropout). A teacher
   pre-trained elsewhere (e.g. runs/ptf-30/pretrain/model of ``experiments/pretrain_then_finetune.py``, 30
   minutes, 38.1% held-out MLM accuracy) is passed with ``--teacher``.
2. Four students of 2 layers, each by ``attnlab distill --teacher T --corpus BOOKS --format text --minutes
   DISTILL_MINUTES --max-length 128 --batch-size 32 --set lr=5e-4`` (the command's budget settings
   otherwise: pre-LN as the teacher, 40% masking, no dropout; lr 5e-4 is DistilBERT's, the same for all):
   ``distilled`` (the triple loss 5/2/1, layers 0 and 2 of the teacher), ``no-cosine`` (``--alpha-cos 0``),
   ``no-soft-targets`` (``--alpha-ce 0``), ``random-init`` (``--random-init``, triple loss). The same
   held-out documents as the teacher's pre-training give each its held-out MLM accuracy.
3. Inference speed: the teacher's and the distilled student's encoders, interleaved in one process, on
   batches of 32 x 128 tokens and, as the paper's Table 3, STS-B dev pairs one at a time; median times and
   the ratio, with the machine's load (``uptime``).
4. The fine-tuning learning rate of each kind of model (teacher; students) is chosen from ``--lr-grid`` on a
   split of SST-2's TRAIN data (the last 1,000 shuffled training sentences held out), never on dev.
5. Every model fine-tuned on each task with the project's recipe (`attnlab.tasks.finetune`: AdamW, 10%
   warm-up, linear decay, dropout 0.1, batch 32, 128 tokens) for a fixed ``--finetune-steps`` steps: as
   many of the trainer's epochs over the training set as that takes (each a fresh seeded order, the last
   cut short), in length-grouped batches (``finetune --group-by-length``: the same examples, about half the
   padding positions of a pair task's random batches, so half the time; ``--no-group-by-length`` for
   random batches), evaluated once at the end (no best-epoch pick on dev); ``--finetune-seeds`` seeds
   (default 1), the same for every model, so the Table 4 differences are paired seed by seed (printed with
   their spread) and a score is the mean over seeds. ``--jobs`` runs (default
   2) fine-tune at a time, each in its own process with an equal share of the cores (one thread each on 2
   cores: a 2-4-layer model uses one thread far better than two), longest tasks first. Until 2026-11-27 the
   training set was repeated or cut to steps x 32 examples and read in random batches (the runs of
   docs/distillation.md before that date). Dev metrics: accuracy (SST-2, RTE), F1 (MRPC), Spearman
   (STS-B), Matthews correlation (CoLA); the macro score is their mean (x100). ``--finetune-max-epochs E``
   caps a run at E epochs where that is fewer steps (BERT's GLUE recipe: 3 epochs; with 500 steps, RTE's
   2,490 pairs get 234 and MRPC's 3,668 get 345, the costliest runs of the grid).

Prints the paper's figures beside the measured ones, the targets with PASS/FAIL, and writes
OUT/results.json. ``--combine RUN [RUN ...]`` pools finished runs of the same teacher and students that used
different fine-tuning seeds (a later one made with ``--skip-distill --first-seed K``, the students copied or
linked into its OUT/students) and prints the report over all their seeds. Measured results are in
docs/distillation.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASK_DIRS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "rte": "RTE"}
# Relative time of a fine-tuning run at the same steps (longer sequences cost more; measured 2026-11-27: RTE
# took 25 of 62 minutes), to start the longest first when runs share the cores
TASK_COST = {"rte": 5, "mrpc": 2, "stsb": 2, "sst2": 1, "cola": 1}
STUDENTS = {  # name: extra `attnlab distill` arguments
    "distilled": [],
    "no-cosine": ["--alpha-cos", "0"],
    "no-soft-targets": ["--alpha-ce", "0"],
    "random-init": ["--random-init"],
}
# Sanh et al. 2019, Table 1 (GLUE dev; CoLA MCC, STS-B Spearman, MRPC F1 as we read it, others accuracy),
# Table 3 (parameters; seconds for a full pass of STS-B dev on CPU, batch size 1) and Table 4 (ablation:
# change of the GLUE macro score from the triple loss with teacher initialisation). The paper's macro scores
# over all nine tasks: BERT-base 79.5, DistilBERT 77.0 (97%).
PAPER_TASKS = {
    "BERT-base": {
        "sst2": 92.7,
        "mrpc": 88.6,
        "stsb": 89.0,
        "cola": 56.3,
        "rte": 69.3,
    },
    "DistilBERT": {
        "sst2": 91.3,
        "mrpc": 87.5,
        "stsb": 86.9,
        "cola": 51.3,
        "rte": 59.9,
    },
}
PAPER_SPEED = {"BERT-base": (110, 668), "DistilBERT": (66, 410)}  # (M parameters, seconds)
PAPER_ABLATION = {"no-soft-targets": -2.96, "no-cosine": -1.46, "no-mlm": -0.31, "random-init": -3.69}


def log(message: str) -> None:
    print(message, flush=True)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


# ------------------------------------------------------------------------------------------- distillation


def distill(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One student by the `attnlab distill` command, in this process; its run.json."""
    from attnlab.cli import main

    target = out / "students" / name
    prepared = sorted((out / "students").glob("*/data/manifest.json"))
    if prepared and not (target / "data").exists():
        # the same corpus and tokenizer: the command reuses a copy of another student's shards (it checks
        # their key: on a mismatch it prepares them again), instead of minutes of tokenising each time
        shutil.copytree(prepared[0].parent, target / "data")
    argv = [
        "distill", "--teacher", str(args.teacher), "--corpus", *args.corpus, "--format", "text",
        "--minutes", f"{args.distill_minutes:g}", "--max-length", "128", "--batch-size", "32",
        "--set", f"lr={args.distill_lr:g}", "--output", str(target), "--no-progress", "--overwrite",
        "--seed", "0", *STUDENTS[name],
    ]  # fmt: skip
    log(f"\n== distill {name}: attnlab {' '.join(argv)}  [{uptime()}]")
    t0 = time.monotonic()
    if main(argv) != 0:
        raise SystemExit(f"attnlab distill failed for {name}")
    run = json.loads((target / "run.json").read_text())
    run["minutes"] = (time.monotonic() - t0) / 60
    return run


def pretrain_teacher(args: argparse.Namespace, target: Path) -> None:
    """The teacher by `attnlab pretrain` on the books at the command's 30-to-60-minute budget settings; an
    interrupted one continues from its newest checkpoint (``--resume``) instead of starting again."""
    from attnlab.cli import main

    again = "--resume" if (target / "train" / "checkpoints").is_dir() else "--overwrite"
    argv = [
        "pretrain", "--corpus", *args.corpus, "--format", "text", "--minutes", f"{args.teacher_minutes:g}",
        "--preset", "bert-mini", "--max-length", "128", "--vocab-size", "8192", "--set", "lr=1e-3",
        "--output-dir", str(target), "--no-progress", again, "--seed", "0",
    ]  # fmt: skip
    log(f"\n== teacher: attnlab {' '.join(argv)}  [{uptime()}]")
    if main(argv) != 0:
        raise SystemExit("attnlab pretrain failed for the teacher")


# ------------------------------------------------------------------------------------------- speed


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def benchmark(teacher_dir: Path, student_dir: Path, stsb_dir: Path, pairs: int = 200) -> dict[str, Any]:
    """Median encoder forward times of teacher and student, interleaved (batch 32 x 128; STS-B dev pairs at
    batch size 1, as the paper's Table 3)."""
    from attnlab.models import count_parameters
    from attnlab.pretraining.fill_mask import load_masked_lm
    from attnlab.tasks.finetune import get_task, load_split

    teacher, tok = load_masked_lm(teacher_dir)
    student, _ = load_masked_lm(student_dir)
    models = {"teacher": teacher.encoder.eval(), "student": student.encoder.eval()}
    g = torch.Generator().manual_seed(0)
    batch = torch.randint(5, teacher.config.vocab_size, (32, 128), generator=g)
    dev = load_split(get_task("stsb"), stsb_dir, "dev")[:pairs]
    encoded = []
    for ex in dev:
        enc = tok.encode(ex.text_a, ex.text_b) if ex.text_b is not None else tok.encode(ex.text_a)
        encoded.append(torch.tensor([enc.ids[:128]]))
    result: dict[str, Any] = {"load": uptime(), "threads": torch.get_num_threads()}
    batch_times: dict[str, list[float]] = {k: [] for k in models}
    stsb_times: dict[str, list[float]] = {k: [] for k in models}
    for m in models.values():  # warm-up
        m(batch)
    for _ in range(5):  # interleaved rounds: both meet the same load
        for k, m in models.items():
            batch_times[k].append(_median_seconds(lambda m=m: m(batch), 3))
        for k, m in models.items():
            t0 = time.perf_counter()
            for ids in encoded:
                m(ids)
            stsb_times[k].append(time.perf_counter() - t0)
    for k, m in models.items():
        result[k] = {
            "parameters": count_parameters(m),
            "batch_seconds": statistics.median(batch_times[k]),
            "stsb_seconds": statistics.median(stsb_times[k]),
        }
    result["speedup_batch"] = result["teacher"]["batch_seconds"] / result["student"]["batch_seconds"]
    result["speedup_stsb"] = result["teacher"]["stsb_seconds"] / result["student"]["stsb_seconds"]
    result["stsb_pairs"] = len(encoded)
    return result


# ------------------------------------------------------------------------------------------- fine-tuning


def finetune_score(
    model_dir: Path,
    task: str,
    train: list[Any],
    dev: list[Any],
    lr: float,
    steps: int,
    out: Path,
    group_by_length: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """``steps`` optimizer steps of batch 32 over ``train`` (the trainer's epochs, each a fresh seeded order
    of every example; the last cut short), one evaluation on ``dev`` at the end. ``seed`` sets the head's
    initialisation, dropout and the batch order."""
    from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task

    spec = get_task(task)
    per_epoch = math.ceil(len(train) / 32)
    cfg = FinetuneConfig(
        learning_rates=(lr,), seeds=(seed,),
        epochs=(steps - 1e-6) / per_epoch,  # the trainer's ceil(epochs * per_epoch) is then exactly steps
        batch_size=32, max_length=128, keep_best=False, eval_every=steps + 1,  # only the last step's
        group_by_length=group_by_length, output_dir=out, overwrite=True, progress_bar=False,
    )  # fmt: skip
    t0 = time.monotonic()
    result = finetune_examples(
        spec, ModelSource(directory=model_dir), train, dev, cfg,
        regression=False,  # as `finetune` passes for GLUE: STS-B is a regression TaskSpec already
    )  # fmt: skip
    run = result.runs[0]
    if run.steps != steps or len(run.epochs) != 1:
        raise RuntimeError(f"{task}: {run.steps} steps, {len(run.epochs)} evaluations (expected {steps}, 1)")
    return {"score": result.median, "metrics": run.best, "steps": run.steps,
            "seconds": time.monotonic() - t0}  # fmt: skip


def capped_steps(steps: int, examples: int, max_epochs: float | None) -> int:
    """``steps``, or fewer where ``max_epochs`` passes over ``examples`` in batches of 32 take fewer (BERT's
    GLUE recipe is 3 epochs: RTE's 2,490 pairs are 234 steps, not 500)."""
    if max_epochs is None:
        return steps
    return max(1, min(steps, math.ceil(max_epochs * math.ceil(examples / 32))))


def finetune_task(
    model_dir: Path,
    task: str,
    glue: str,
    lr: float,
    steps: int,
    out: Path,
    group_by_length: bool,
    seed: int = 0,
    threads: int | None = None,
    max_epochs: float | None = None,
) -> dict[str, Any]:
    """`finetune_score` on ``task``'s TRAIN and dev splits read from ``glue``, with ``threads`` torch threads
    (None: as they are), for ``steps`` steps or ``max_epochs`` epochs, whichever is fewer; what each worker
    process of ``--jobs`` runs."""
    from attnlab.tasks.finetune import get_task, load_split

    if threads is not None:
        torch.set_num_threads(threads)
    spec, d = get_task(task), Path(glue) / TASK_DIRS[task]
    train, dev = load_split(spec, d, "train"), load_split(spec, d, "dev")
    steps = capped_steps(steps, len(train), max_epochs)
    return finetune_score(model_dir, task, train, dev, lr, steps, out, group_by_length, seed)


def finetune_grid(
    models: dict[str, Path], lrs: dict[str, float], args: argparse.Namespace, out: Path
) -> dict[str, dict[str, Any]]:
    """Every model fine-tuned on every task with each of ``--finetune-seeds`` seeds (the same seeds for every
    model, so their differences are paired), ``--jobs`` runs at a time in worker processes (each with an
    equal share of the cores: small models use one thread far better than two), longest tasks first; the
    results as ``{model: {task: result}}``, ``score`` the mean over the seeds and ``scores`` each seed's.
    One job runs in this process."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from attnlab.tasks.finetune import get_task

    order = sorted(args.tasks, key=lambda t: -TASK_COST[t])
    seeds = range(args.first_seed, args.first_seed + args.finetune_seeds)
    calls = [(name, task, seed) for task in order for seed in seeds for name in models]
    runs: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}

    def done(name: str, task: str, seed: int, r: dict[str, Any]) -> None:
        runs.setdefault((name, task), {})[seed] = r
        log(f"  {task:<5} {name:<16} seed {seed} {get_task(task).metric} {r['score']:6.2f}  ({r['steps']} "
            f"steps, {r['seconds']:.0f}s)")  # fmt: skip

    def call_args(name: str, task: str, seed: int) -> tuple:
        target = out / "glue" / name / task / f"seed-{seed}"
        return (models[name], task, args.glue, lrs[name], args.finetune_steps, target, args.group_by_length,
                seed)  # fmt: skip

    cap = {"max_epochs": args.finetune_max_epochs}
    if args.jobs <= 1:
        for call in calls:
            done(*call, finetune_task(*call_args(*call), **cap))
    else:
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(finetune_task, *call_args(*call), threads, **cap): call for call in calls}
            for future in as_completed(futures):
                done(*futures[future], future.result())
    results: dict[str, dict[str, Any]] = {}
    for name in models:
        for task in args.tasks:
            by_seed = [runs[name, task][seed] for seed in seeds]
            results.setdefault(name, {})[task] = {
                "score": statistics.fmean(r["score"] for r in by_seed),
                "scores": [r["score"] for r in by_seed],
                "seeds": list(seeds),
                "steps": by_seed[0]["steps"],
                "seconds": sum(r["seconds"] for r in by_seed),
            }
    return results


def select_lr(model_dir: Path, args: argparse.Namespace, out: Path, kind: str) -> tuple[float, dict]:
    """The learning rate of ``--lr-grid`` with the best SST-2 accuracy on held-out TRAIN sentences (a grid of
    one value is taken as it is)."""
    from attnlab.tasks.finetune import get_task, load_split

    if len(args.lr_grid) == 1:
        return args.lr_grid[0], {}

    train = load_split(get_task("sst2"), Path(args.glue) / "SST-2", "train")
    train = list(train)
    random.Random(1).shuffle(train)
    fit, held = train[:-1000], train[-1000:]
    scores = {}
    for lr in args.lr_grid:
        r = finetune_score(
            model_dir,
            "sst2",
            fit,
            held,
            lr,
            args.finetune_steps,
            out / f"lr-{kind}-{lr:g}",
            args.group_by_length,
        )
        scores[lr] = r["score"]
        log(f"  lr selection ({kind}): lr {lr:g} -> SST-2 held-out-train accuracy {r['score']:.2f}")
    return max(scores, key=scores.get), scores


# ------------------------------------------------------------------------------------------- combining runs

# what runs pooled by --combine must share: the same models fine-tuned the same way
SHARED_ARGS = ("teacher", "tasks", "students", "finetune_steps", "finetune_max_epochs", "group_by_length",
               "lr_grid")  # fmt: skip


def run_seeds(run: dict[str, Any], name: str, task: str) -> list[int]:
    """The fine-tuning seeds of ``run``'s scores for ``name`` on ``task`` (results written before the seeds
    were recorded: --first-seed .. + --finetune-seeds)."""
    r = run["glue"][name][task]
    if "seeds" in r:
        return list(r["seeds"])
    first, n = int(run["args"].get("first_seed", 0)), int(run["args"].get("finetune_seeds", 1))
    return list(range(first, first + n))


def combine(dirs: list[Path], tasks: list[str]) -> dict[str, Any]:
    """The results of runs over the same teacher and students with different fine-tuning seeds (e.g. the
    second of them made with ``--skip-distill --first-seed 2``), pooled seed by seed: each score the mean
    over every run's seeds. Speed and distillation figures are the first run's. Refuses runs that differ in
    what they fine-tuned (`SHARED_ARGS`), lack a model or task, or repeat a seed."""
    runs = []
    for d in dirs:
        path = d / "results.json"
        if not path.is_file():
            raise SystemExit(f"--combine: {path}: no such file (a finished run of this script writes it)")
        try:
            run = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SystemExit(f"--combine: {path}: not a JSON results file ({e})") from None
        parts = ("args", "glue", "speed")
        if not (isinstance(run, dict) and all(isinstance(run.get(k), dict) for k in parts)):
            raise SystemExit(f"--combine: {path}: expected this script's results (an object with 'args', "
                             f"'glue' and 'speed')")  # fmt: skip
        for model in ("teacher", "distilled"):  # what the report compares everything with
            if not isinstance(run["glue"].get(model), dict):
                raise SystemExit(f"--combine: {path}: no GLUE results for the {model} model")
        runs.append(run)
    first = runs[0]
    for d, run in zip(dirs[1:], runs[1:]):
        for key in SHARED_ARGS:
            a, b = first["args"].get(key, "None"), run["args"].get(key, "None")
            if a != b:
                raise SystemExit(f"--combine: {d / 'results.json'}: {key} is {b}, but {a} in {dirs[0]}")
    glue: dict[str, dict[str, Any]] = {}
    for name in first["glue"]:
        for task in tasks:
            by_seed: dict[int, float] = {}
            for d, run in zip(dirs, runs):
                if task not in run["glue"].get(name, {}):
                    raise SystemExit(f"--combine: {d / 'results.json'}: no {task} result for {name}")
                r = run["glue"][name][task]
                for seed, score in zip(run_seeds(run, name, task), r.get("scores", [r["score"]])):
                    if seed in by_seed:
                        raise SystemExit(f"--combine: {d / 'results.json'}: seed {seed} of {name} on {task} "
                                         f"is in an earlier run too")  # fmt: skip
                    by_seed[seed] = score
            seeds = sorted(by_seed)
            glue.setdefault(name, {})[task] = {
                "score": statistics.fmean(by_seed.values()), "scores": [by_seed[k] for k in seeds],
                "seeds": seeds, "steps": first["glue"][name][task]["steps"],
            }  # fmt: skip
    return {**first, "glue": glue, "combined": [str(d) for d in dirs],
            "minutes_each": [run.get("minutes") for run in runs]}  # fmt: skip


# ------------------------------------------------------------------------------------------- report


def macro(scores: dict[str, float], tasks: list[str]) -> float:
    return statistics.fmean(scores[t] for t in tasks)


def seed_macros(glue: dict[str, Any], name: str, tasks: list[str]) -> list[float]:
    """``name``'s macro score of each fine-tuning seed (one value for results written before seeds)."""
    per_task = {t: glue[name][t].get("scores", [glue[name][t]["score"]]) for t in tasks}
    return [statistics.fmean(per_task[t][k] for t in tasks) for k in range(len(per_task[tasks[0]]))]


def paired(glue: dict[str, Any], name: str, tasks: list[str]) -> str:
    """``name``'s macro score minus the distilled student's, seed by seed: the mean, the standard deviation
    over seeds and each seed's difference."""
    diffs = [a - b for a, b in zip(seed_macros(glue, name, tasks), seed_macros(glue, "distilled", tasks))]
    spread = f" ± {statistics.stdev(diffs):.2f}" if len(diffs) > 1 else ""
    return f"{statistics.fmean(diffs):+6.2f}{spread}  (seeds: {', '.join(f'{d:+.2f}' for d in diffs)})"


def report(results: dict[str, Any], tasks: list[str]) -> list[str]:
    lines = []
    glue = results["glue"]
    names = ["teacher", *STUDENTS]
    header = f"{'model':<17}" + "".join(f"{t:>8}" for t in tasks) + f"{'macro':>8}{'% teacher':>11}"
    lines += ["", "GLUE dev (x100; SST-2/RTE accuracy, MRPC F1, STS-B Spearman, CoLA MCC)", header]
    t_macro = macro({t: glue["teacher"][t]["score"] for t in tasks}, tasks)
    for name in names:
        if name not in glue:
            continue
        s = {t: glue[name][t]["score"] for t in tasks}
        m = macro(s, tasks)
        lines.append(
            f"{name:<17}" + "".join(f"{s[t]:8.2f}" for t in tasks) + f"{m:8.2f}{100 * m / t_macro:10.1f}%"
        )
    paper_teacher = statistics.fmean(PAPER_TASKS["BERT-base"][t] for t in tasks)
    for paper, row in PAPER_TASKS.items():
        m = statistics.fmean(row[t] for t in tasks)
        lines.append(
            f"{'paper ' + paper:<17}" + "".join(f"{row[t]:8.1f}" for t in tasks)
            + f"{m:8.2f}{100 * m / paper_teacher:10.1f}%"
        )  # fmt: skip
    b = results["speed"]
    lines += [
        "",
        f"inference ({b['load']}; {b['threads']} thread(s), interleaved, median of 5 rounds)",
        f"{'':<17}{'params':>10}{'32x128 batch s':>16}{'STS-B dev bs=1 s':>18}",
    ]
    for k in ("teacher", "student"):
        r = b[k]
        lines.append(f"{k:<17}{r['parameters']:>10,}{r['batch_seconds']:16.4f}{r['stsb_seconds']:18.3f}")
    lines.append(
        f"{'speed-up':<17}{'':>10}{b['speedup_batch']:15.2f}x{b['speedup_stsb']:17.2f}x"
        f"   (paper, STS-B on CPU bs=1: {PAPER_SPEED['BERT-base'][1]} s / {PAPER_SPEED['DistilBERT'][1]} s "
        f"= {PAPER_SPEED['BERT-base'][1] / PAPER_SPEED['DistilBERT'][1]:.2f}x; 110M -> 66M parameters)"
    )
    lines += ["", "Table 4 (change of the macro score against the distilled student; paper's GLUE macro)"]
    d_macro = macro({t: glue["distilled"][t]["score"] for t in tasks}, tasks)
    for name in ("no-soft-targets", "no-cosine", "random-init"):
        if name in glue:
            measured = paired(glue, name, tasks)
            lines.append(f"  {name:<17} paper {PAPER_ABLATION[name]:+6.2f}   measured {measured}")
    lines += ["", "targets"]
    s_macro = d_macro
    checks = [
        (f"student keeps >= 95% of the teacher's macro score ({100 * s_macro / t_macro:.1f}%)",
         s_macro >= 0.95 * t_macro),
        (f"student >= 1.6x faster (batch {b['speedup_batch']:.2f}x, STS-B bs=1 {b['speedup_stsb']:.2f}x)",
         min(b["speedup_batch"], b["speedup_stsb"]) >= 1.6),
    ]  # fmt: skip
    others = {n: macro({t: glue[n][t]["score"] for t in tasks}, tasks) for n in STUDENTS if n in glue}
    if "random-init" in others:
        lowest = min(others, key=others.get)
        checks.append((f"random-init student scores lowest (lowest: {lowest})", lowest == "random-init"))
    for name in ("no-cosine", "no-soft-targets"):
        if name in others:
            checks.append((f"{name} below the distilled student ({others[name]:.2f} < {s_macro:.2f})",
                           others[name] < s_macro))  # fmt: skip
    for text, ok in checks:
        lines.append(f"  {'PASS' if ok else 'FAIL'}  {text}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--teacher", type=Path, help="default OUT/teacher/model (pre-trained if absent)")
    p.add_argument("--teacher-minutes", type=float, default=20.0)
    p.add_argument("--corpus", nargs="+", default=[str(ROOT.parent / "shared/data/books/en")])
    p.add_argument("--glue", default=str(ROOT.parent / "shared/data/glue"))
    p.add_argument("--tasks", nargs="+", default=list(TASK_DIRS), choices=list(TASK_DIRS))
    p.add_argument("--students", nargs="+", default=list(STUDENTS), choices=list(STUDENTS))
    p.add_argument("--distill-minutes", type=float, default=5.0)
    p.add_argument("--distill-lr", type=float, default=5e-4)
    p.add_argument("--finetune-steps", type=int, default=150)
    p.add_argument(
        "--finetune-max-epochs", type=float, default=None,
        help="at most this many epochs a run (fewer steps than --finetune-steps on small tasks; BERT: 3)",
    )  # fmt: skip
    p.add_argument(
        "--finetune-seeds", type=int, default=1,
        help="fine-tuning seeds per model and task (the same for every model; scores are their mean)",
    )  # fmt: skip
    p.add_argument(
        "--first-seed", type=int, default=0,
        help="the first fine-tuning seed (seeds FIRST .. FIRST + N - 1; to add seeds to an earlier run's)",
    )  # fmt: skip
    p.add_argument("--lr-grid", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    p.add_argument("--output", type=Path, default=ROOT / "runs/distill-exp")
    p.add_argument("--skip-distill", action="store_true", help="reuse OUT/students")
    p.add_argument(
        "--speed-pairs", type=int, default=200,
        help="STS-B dev pairs timed one at a time for the speed-up (default 200; fewer for a quick check)",
    )  # fmt: skip
    p.add_argument(
        "--combine", type=Path, nargs="+", metavar="RUN",
        help="pool the fine-tuning seeds of finished runs (their OUTPUT directories) and print the report; "
        "runs nothing",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=int, default=2,
        help="fine-tuning runs at a time, each in its own process with cores / jobs threads (default 2)",
    )  # fmt: skip
    p.add_argument(
        "--group-by-length", action=argparse.BooleanOptionalAction, default=True,
        help="fine-tune on length-grouped batches (attnlab finetune --group-by-length; default on)",
    )  # fmt: skip
    args = p.parse_args()
    for name, low in (("finetune_steps", 1), ("finetune_seeds", 1), ("first_seed", 0), ("jobs", 1)):
        if getattr(args, name) < low:
            p.error(f"--{name.replace('_', '-')}: expected an integer >= {low}, got {getattr(args, name)}")
    if args.finetune_max_epochs is not None and not args.finetune_max_epochs > 0:
        p.error(f"--finetune-max-epochs: expected a number > 0, got {args.finetune_max_epochs:g}")
    if args.combine:
        results = combine(args.combine, args.tasks)
        for line in report(results, args.tasks):
            log(line)
        n = len(results["glue"]["teacher"][args.tasks[0]]["seeds"])
        log(f"\n{len(args.combine)} runs pooled: {n} fine-tuning seeds; minutes each: "
            + ", ".join(f"{m:.1f}" if m is not None else "?" for m in results["minutes_each"]))  # fmt: skip
        return 0
    logging.basicConfig(level=logging.WARNING)
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()

    from attnlab.pretraining.distillation import load_teacher

    if args.teacher is None:
        args.teacher = out / "teacher" / "model"
        if not (args.teacher / "config.json").is_file():
            pretrain_teacher(args, out / "teacher")
    teacher, _ = load_teacher(args.teacher)
    c = teacher.config
    log(f"teacher {args.teacher}: {c.num_layers} layers x {c.hidden_size}, vocab {c.vocab_size}, "
        f"norm_first={c.norm_first}  [{uptime()}]")  # fmt: skip
    del teacher
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "distill": {}, "glue": {}}
    for name in args.students:
        if not args.skip_distill:
            run = distill(name, args, out)
        else:
            run = json.loads((out / "students" / name / "run.json").read_text())
        results["distill"][name] = {k: run.get(k) for k in ("steps", "eval", "minutes", "seconds")}
    student_dir = out / "students" / "distilled" / "model"
    log(f"\n== inference benchmark  [{uptime()}]")
    results["speed"] = benchmark(args.teacher, student_dir, Path(args.glue) / "STS-B", args.speed_pairs)
    log(json.dumps(results["speed"], indent=1))

    log(f"\n== learning rates, chosen on SST-2 TRAIN held-out sentences  [{uptime()}]")
    lr_teacher, s1 = select_lr(args.teacher, args, out / "lr", "teacher")
    lr_student, s2 = select_lr(student_dir, args, out / "lr", "student")
    results["lr"] = {"teacher": lr_teacher, "student": lr_student, "scores": {"teacher": s1, "student": s2}}
    log(f"  chosen: teacher {lr_teacher:g}, students {lr_student:g}")

    models = {"teacher": args.teacher, **{n: out / "students" / n / "model" for n in args.students}}
    lrs = {name: lr_teacher if name == "teacher" else lr_student for name in models}
    log(f"\n== GLUE fine-tuning, {args.jobs} run(s) at a time  [{uptime()}]")
    results["glue"] = finetune_grid(models, lrs, args, out)

    log("\n== held-out MLM accuracy on the books (15% masked)")
    teacher_run = args.teacher.parent / "run.json"
    if teacher_run.is_file():
        results["distill"] = {"teacher": json.loads(teacher_run.read_text()), **results["distill"]}
    for name, r in results["distill"].items():
        e = r.get("eval") or {}
        log(f"  {name:<16} {100 * e.get('eval_mlm_accuracy', float('nan')):5.1f}%  ({r.get('steps')} steps)")
    lines = report(results, args.tasks)
    results["minutes"] = (time.monotonic() - t_start) / 60
    lines.append(
        f"\n{results['minutes']:.1f} minutes in all; fine-tuning {args.finetune_steps} steps a run"
        + (f" (at most {args.finetune_max_epochs:g} epochs)" if args.finetune_max_epochs else "")
        + f", {args.finetune_seeds} seed(s)"
    )
    for line in lines:
        log(line)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
