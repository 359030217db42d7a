"""Resident memory of a training command over its run: does it stay flat once the first steps are done?

    .venv/bin/python benchmarks/training_memory.py                      # translate-train, 3 minutes
    .venv/bin/python benchmarks/training_memory.py --minutes 8
    .venv/bin/python benchmarks/training_memory.py --max-steps 400 --every 50
    .venv/bin/python benchmarks/training_memory.py --pretrain           # attnlab pretrain, default budget
    .venv/bin/python benchmarks/training_memory.py -- attnlab finetune ... --output-dir DIR   # any command

Runs the command in a subprocess, samples its resident set (``VmRSS`` of ``/proc/PID/status``, children
included) every ``--interval`` seconds, reads the step from the run's ``log.jsonl`` (the trainer logs every 10
steps), and prints a table: step, RSS, its ratio to RSS at step 200 (at 20% of a run under 400 steps) and the
peak. What a run needs: the weights W, their gradients W, Adam's two moments 2W, the activations of one batch
(``--max-tokens`` tokens through every layer, kept for the backward) and the libraries (PyTorch, oneDNN's
kernels: ~0.3-0.5 GB before the first step). A run that keeps growing beyond that after the first few hundred
steps holds something it need not: freed blocks of varying sizes kept by the C allocator, or a cache per
batch shape. ``ATTNLAB_TRAIN_MALLOC=default`` in the environment runs without the bounding the training
commands apply (`attnlab.train.memory`), to show the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def translate_command(out: Path, data_dir: str, minutes: float, max_steps: int | None) -> list[str]:
    budget = ["--max-steps", str(max_steps)] if max_steps else ["--minutes", str(minutes)]
    return [
        sys.executable, "-m", "attnlab", "translate-train", "--data-dir", data_dir, "--src-lang", "en",
        "--tgt-lang", "de", "--output-dir", str(out), *budget, "--no-progress",
    ]  # fmt: skip


def pretrain_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "attnlab", "pretrain", "--output-dir", str(out), "--no-progress"]


def rss_mb(pid: int) -> float:
    """Resident set of ``pid`` and its descendants, in MiB (0 once it has exited)."""
    total = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
        pids.extend(int(c) for c in children)
    return total


def latest_step(out: Path) -> int | None:
    """The highest training step logged in any ``log.jsonl`` under ``out``."""
    step = None
    for log in out.rglob("log.jsonl"):
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if isinstance(record.get("step"), int) and record.get("kind", "train") == "train":
                step = max(step or 0, record["step"])
    return step


Sample = tuple[float, int | None, float, bool]  # (seconds since the start, step logged, RSS MiB, trained)


def sample(command: list[str], out: Path, interval: float) -> tuple[list[Sample], int]:
    """Run ``command``; return a sample every ``interval`` seconds and its exit status."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    samples = []
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: a long run's log would fill a pipe
        with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err) as proc:
            while proc.poll() is None:
                done = (out / "model").exists()  # written when training ends: averaging, evaluation follow
                samples.append((time.monotonic() - start, latest_step(out), rss_mb(proc.pid), done))
                time.sleep(interval)
        if proc.returncode:
            err.seek(0)
            print(err.read()[-3000:], file=sys.stderr)
    return samples, proc.returncode


def speed(out: Path) -> str:
    """Training seconds a step, from the last record of the run's ``log.jsonl`` that holds them."""
    for log in out.rglob("log.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines()]
        timed = [r for r in records if r.get("kind") == "train" and r.get("train_seconds")]
        if timed:
            last = timed[-1]
            return f"{last['train_seconds'] / last['step']:.2f} s a step over {last['step']} steps"
    return "no step time logged"


def table(samples: list[Sample], every: int) -> list[str]:
    trained = [(s, step, rss) for s, step, rss, done in samples if step is not None and not done]
    if not trained:
        return ["no step was logged"]
    last = trained[-1][1]
    ref_step = 200 if last >= 400 else max(10, int(0.2 * last) // 10 * 10)  # step 200, or 20% of a short run
    reference = next(rss for _, step, rss in trained if step >= ref_step)
    rows = [f"reference: RSS at step {ref_step} = {reference:,.0f} MiB", "", "| step | s | RSS MiB | / ref |",
            "|---:|---:|---:|---:|"]  # fmt: skip
    shown = -1
    for seconds, step, rss in trained:
        if step // every != shown // every or step in (ref_step, last):
            if step != shown:
                rows.append(f"| {step} | {seconds:.0f} | {rss:,.0f} | {rss / reference:.2f} |")
                shown = step
    after = [rss for _, step, rss in trained if step >= ref_step]
    peak = max(rss for _, _, rss, _ in samples)
    end = [rss for *_, rss, done in samples if done]
    rows.append("")
    rows.append(
        f"training, after step {ref_step}: max {max(after):,.0f} MiB = {max(after) / reference:.2f} x the "
        f"reference; peak of the whole command {peak:,.0f} MiB"
        + (f" (after training, while it averages, saves and evaluates: {max(end):,.0f} MiB)" if end else "")
    )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0, help="translate-train's --minutes (default 3)")
    p.add_argument("--max-steps", type=int, help="translate-train's --max-steps instead of --minutes")
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--pretrain", action="store_true", help="attnlab pretrain at its default budget instead")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--every", type=int, default=50, help="a table row every this many steps")
    p.add_argument("command", nargs="*", help="another training command (its --output-dir is read)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="training-memory-") as tmp:
        out = Path(tmp) / "run"
        if args.command:
            command = args.command
            out = Path(command[command.index("--output-dir") + 1])
        elif args.pretrain:
            command = pretrain_command(out)
        else:
            command = translate_command(out, args.data_dir, args.minutes, args.max_steps)
        print("command:", " ".join(command))
        samples, status = sample(command, out, args.interval)
        print("\n".join(table(samples, args.every)))
        print(speed(out))
    return status


if __name__ == "__main__":
    sys.exit(main())
