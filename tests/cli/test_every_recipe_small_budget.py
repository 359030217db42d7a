"""Every pre-training recipe at a budget of 0.3 minutes, as published (``--paper``) and at the budget's sizes:
it trains and reports, or it stops before any training step with one sentence saying why. At the budget's
sizes it never takes more than 2 GiB of memory, and a refusal never does (the papers' steps are priced
before they run: `attnlab.train.footprint`). Whether a paper's step fits in the budget depends on the
machine's speed (ELECTRA's is priced at about 6 s on a 2-core EPYC, against the 6 s the budget leaves), so a
paper run may train, with the memory its step takes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.pretraining.recipes import RECIPES

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT_KIB = 2 * 1024 * 1024
# runs `attnlab ARGS` and prints its exit code and peak resident memory (KiB) as JSON
WRAPPER = """
import json, resource, subprocess, sys
code = subprocess.run([sys.executable, "-m", "attnlab", *sys.argv[1:]]).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": code, "peak_kib": peak}), file=sys.stderr)
"""


SWEPT = sorted([*RECIPES, "elmo"])  # --recipe's choices: ELMo's biLM is not a Recipe (attnlab.cli.elmo)


def test_every_recipe_is_swept():
    every = {"mlm", "bert", "roberta", "albert", "spanbert", "electra", "gpt", "transfo-xl", "elmo"}
    assert set(SWEPT) == every


@pytest.mark.slow
@pytest.mark.parametrize("paper", [False, True], ids=["budget", "paper"])
@pytest.mark.parametrize("recipe", SWEPT)
def test_recipe_at_a_third_of_a_minute_trains_or_says_why(recipe: str, paper: bool, tmp_path: Path):
    args = [
        "pretrain",
        "--recipe",
        recipe,
        "--minutes",
        "0.3",
        "--no-progress",
        "--output-dir",
        str(tmp_path),
    ]
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args, *(["--paper"] if paper else [])],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_env(),
    )  # fmt: skip
    measured = json.loads(done.stderr.strip().splitlines()[-1])
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    peak = f"peak {measured['peak_kib'] / 1024:.0f} MiB"
    if measured["code"] == 0:
        assert paper or measured["peak_kib"] < MEMORY_LIMIT_KIB, peak
        assert "held-out" in done.stdout or "perplexity" in done.stdout, done.stdout[-2000:]
        assert (tmp_path / "model" / "config.json").is_file()
        return
    assert measured["code"] == 2, done.stderr[-3000:]
    assert measured["peak_kib"] < MEMORY_LIMIT_KIB, peak
    # refused before a step was trained or timed: nothing logged, no model
    assert not list(tmp_path.rglob("log.jsonl")) and not (tmp_path / "model").exists()
    assert len(errors) == 1 and errors[0].startswith("attnlab pretrain: error: "), done.stderr[-3000:]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's attnlab


def test_wrapper_reports_a_childs_code_and_memory(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, "--version"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env=_env(),
    )  # fmt: skip
    measured = json.loads(done.stderr.strip().splitlines()[-1])
    assert measured["code"] == 0 and measured["peak_kib"] > 1000


@pytest.mark.parametrize("recipe", SWEPT)
def test_paper_refuses_the_options_it_fixes(recipe: str, tmp_path: Path, capsys):
    from attnlab.cli import main

    code = main(
        ["pretrain", "--recipe", recipe, "--paper", "--max-steps", "2", "--output-dir", str(tmp_path)]
    )
    assert code == 2
    assert "--paper takes the paper's steps, batch and lengths" in capsys.readouterr().err


def test_elmo_paper_recipe_is_bilm_tf_training():
    """10 epochs of the 1B Word Benchmark's 768,648,884 words in windows of 20, 128 a GPU on 3 GPUs."""
    from attnlab.pretraining.elmo import PAPER

    assert PAPER.max_steps == 768_648_884 * 10 // (128 * 20 * 3)
    assert (PAPER.preset, PAPER.batch_size, PAPER.max_words, PAPER.vocab_size) == ("elmo", 128, 20, 793_471)
