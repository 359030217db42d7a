"""`attnlab.translation.plan`: a time-budgeted translation run is planned to end when its time does, with a
warm-up inside the plan (a 60-minute run showed 100,000 steps and an ETA of 283 hours)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from attnlab.train import Trainer
from attnlab.translation.config import preset
from attnlab.translation.data import TokenBatchLoader
from attnlab.translation.model import build_model
from attnlab.translation.plan import plan_for_minutes, planned_warmup
from attnlab.translation.recipe import paper_trainer_config


@pytest.mark.parametrize(
    ("requested", "planned", "expected"),
    [(4000, 100_000, 4000), (4000, 1500, 60), (4000, 4000, 160), (100, 1500, 100), (4000, 10, 1)],
)
def test_warmup_ends_inside_the_plan(requested: int, planned: int, expected: int) -> None:
    lines = []
    assert planned_warmup(requested, planned, lines.append) == expected
    assert expected < planned or planned <= 1
    assert bool(lines) == (expected != requested)


def test_a_planned_run_ends_near_its_budget_with_its_schedule(tmp_path) -> None:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    config = preset("transformer-tiny", num_layers=1, d_model=16, d_ff=32, num_heads=2, vocab_size=40)
    model = build_model(config)
    examples = [([5 + i % 30, 6, 3], [7, 8 + i % 20, 3]) for i in range(64)]
    loader = TokenBatchLoader(examples, 24, config.pad_token_id, config.start_token_id)
    quiet = dict(save_every=0, progress_bar=False, tensorboard=False, plot=False, log_every=10)
    tconfig = paper_trainer_config(16, 100_000, tmp_path, warmup=4000, **quiet)
    minutes = 0.05  # 3 s
    start = time.monotonic()
    try:
        plan = plan_for_minutes(
            model, loader, tconfig, minutes, warmup=4000, started=start, log=lambda m: None
        )
        assert 10 < plan.max_steps < 100_000 and plan.warmup < plan.max_steps
        tconfig = paper_trainer_config(16, plan.max_steps, tmp_path, warmup=plan.warmup, **quiet)
        trainer = Trainer(model, tconfig, loader, callbacks=plan.callbacks)
        result = trainer.train()
    finally:
        torch.set_num_threads(threads)  # estimate_steps may pick one thread on a busy CPU
    elapsed = time.monotonic() - start
    assert elapsed < 60 * minutes + 3  # stopped by the clock at the latest, not after 100,000 steps
    assert result.step <= trainer.total_steps < 100_000


EN = ["a dog runs .", "the cat sleeps .", "two men walk on the street .", "a woman reads a book ."]
DE = [
    "ein hund rennt .",
    "die katze schläft .",
    "zwei männer gehen auf der straße .",
    "eine frau liest ein buch .",
]


def test_translate_train_plans_its_steps_from_minutes(tmp_path, capsys) -> None:
    """`translate-train --minutes` without --max-steps: the run is planned to end at its deadline (not the
    paper's 100,000 steps), its warm-up ends inside the plan, and a resume keeps the recorded plan."""
    from attnlab.cli import main

    for name, lines in (("train.en", EN * 8), ("train.de", DE * 8)):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = [
        "translate-train", "--data-dir", str(tmp_path), "--output-dir", str(out),
        "--preset", "transformer-tiny", "--layers", "1", "--d-model", "16", "--d-ff", "32", "--heads", "2",
        "--vocab-size", "300",
        "--max-tokens", "48", "--minutes", "0.05", "--no-progress", "--device", "cpu",
    ]  # fmt: skip
    threads = torch.get_num_threads()
    start = time.monotonic()
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)  # estimate_steps may pick one thread on a busy CPU
    elapsed = time.monotonic() - start
    plan = json.loads((out / "plan.json").read_text())
    report = json.loads((out / "data_report.json").read_text())
    assert 10 < plan["max_steps"] < 100_000 and report["steps"] <= plan["max_steps"]
    # the CPU default of 800 steps cut to a quarter of the first plan (a re-plan keeps it in steps)
    assert 1 <= plan["warmup"] < min(800, plan["max_steps"])
    assert elapsed < 60 * 0.05 + 15  # BPE, timing and saving on top of the 3-s budget; not 100,000 steps
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in records if "lr" in r]
    assert lrs and lrs[-1] < max(lrs)  # past the warm-up peak, decaying when the run ended
    assert "steps fit in 0.05 minutes" in capsys.readouterr().err

    try:
        assert main([*argv, "--resume"]) == 0
    finally:
        torch.set_num_threads(threads)
    captured = capsys.readouterr()
    assert f"resuming the planned schedule: {plan['max_steps']} steps" in captured.out + captured.err
