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
batch shape. Each row shows RSS sampled at its last sample and the peak over its steps (a sample taken between
two steps misses a step's activations; the peak does not).
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


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident set of ``pid`` and its descendants, in MiB (0 once it has exited): now, and its peak since the
    previous call (``VmHWM``, then reset through ``/proc/PID/clear_refs``: a sample between two steps misses
    the activations of a step; the peak does not)."""
    total = peak = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if "VmRSS" in fields:
            total += int(fields["VmRSS"].split()[0]) / 1024
            peak += int(fields.get("VmHWM", fields["VmRSS"]).split()[0]) / 1024
            try:
                Path(f"/proc/{p}/clear_refs").write_text("5")  # the peak counts from now on
            except OSError:
                pass
        pids.extend(int(c) for c in children)
    return total, peak


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


# (seconds since the start, step logged, RSS MiB, its peak since the previous sample, training done)
Sample = tuple[float, int | None, float, float, bool]


def sample(command: list[str], out: Path, interval: float) -> tuple[list[Sample], int]:
    """Run ``command``; return a sample every ``interval`` seconds and its exit status."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    samples = []
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: a long run's log would fill a pipe
        with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err) as proc:
            while proc.poll() is None:
                done = (out / "model").exists()  # written when training ends: averaging, evaluation follow
                samples.append((time.monotonic() - start, latest_step(out), *rss_mb(proc.pid), done))
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
    """Rows of ``every`` steps: RSS at the row's last sample, and the peak RSS over the row's steps."""
    trained = [(s, step, rss, peak) for s, step, rss, peak, done in samples if step is not None and not done]
    if not trained:
        return ["no step was logged"]
    last = trained[-1][1]
    ref_step = 200 if last >= 400 else max(10, int(0.2 * last) // 10 * 10)  # step 200, or 20% of a short run
    windows: dict[int, list] = {}  # row -> [seconds, step, rss, peak over the row]
    for seconds, step, rss, peak in trained:
        row = -(-step // every) * every  # steps (row - every, row] belong to the row
        w = windows.setdefault(row, [seconds, step, rss, peak])
        w[:3] = seconds, step, rss
        w[3] = max(w[3], peak)
    ref_row = -(-ref_step // every) * every
    ref_rss, ref_peak = windows[ref_row][2], windows[ref_row][3]
    rows = [
        f"reference: step {ref_step}: RSS {ref_rss:,.0f} MiB, peak over its row's steps {ref_peak:,.0f} MiB",
        "",
        "| steps up to | s | RSS MiB | / ref | peak MiB over the row | / ref |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sorted(windows):
        seconds, step, rss, peak = windows[row]
        cells = [f"{step}", f"{seconds:.0f}", f"{rss:,.0f}", f"{rss / ref_rss:.2f}", f"{peak:,.0f}"]
        rows.append("| " + " | ".join([*cells, f"{peak / ref_peak:.2f}"]) + " |")
    after = [windows[r] for r in windows if r > ref_row]
    end = [max(rss, peak) for *_, rss, peak, done in samples if done]
    rows.append("")
    if after:
        rss_max, peak_max = max(w[2] for w in after), max(w[3] for w in after)
        rows.append(
            f"training, after step {ref_step}: sampled RSS at most {rss_max / ref_rss:.2f} x the reference, "
            f"peak RSS of a row at most {peak_max / ref_peak:.2f} x the reference row's ({peak_max:,.0f} MiB)"
        )
    peak_all = max(max(rss, peak) for _, _, rss, peak, _ in samples)
    rows.append(
        f"peak of the whole command {peak_all:,.0f} MiB"
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
