"""A newcomer's first hour, as README.md tells it, from a fresh folder at tiny budgets.

`make run`'s pre-training (the Makefile's own command, 2 steps), then the README's "Your own data"
walk-through as written, in its order, each step reading what the step before it wrote: fill-mask on
`make run`'s model, CSV files in the README's format (its example rows, repeated), fine-tuning on them,
`predict`, the HF export loaded by `transformers.pipeline`, and `attnlab serve` answering the README's
`curl` line before `kill %1` stops it. The commands come from the README itself (`doc_chain`), so a
changed README is what this test runs.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from doc_chain import ROOT, Shell, blocks, commands, make_target

README = ROOT / "README.md"
SECTION = "Your own data"
# the walk-through's steps, by program and command: a step the README drops or adds fails here first
STEPS = [
    "source", "attnlab fill-mask", "attnlab finetune", "attnlab predict", "attnlab convert", "python -c",
    "attnlab serve", "curl", "kill %1",
]  # fmt: skip


def walkthrough() -> tuple[str, list[list[str]]]:
    """The README's example CSV file and its walk-through's commands."""
    section = [b for b in blocks(README) if b.section.startswith(SECTION)]
    example = next(b.text for b in section if b.lang == "csv")
    steps = [words for b in section if b.lang == "bash" for words in commands(b.text)]
    return example, steps


def write_my_data(folder: Path, example: str) -> set[str]:
    """``train.csv`` and ``dev.csv`` as the README describes them: its example's header and rows, repeated.
    Returns the labels."""
    header, *rows = example.strip().splitlines()
    folder.mkdir(parents=True)
    (folder / "train.csv").write_text("\n".join([header, *rows * 8]) + "\n", encoding="utf-8")
    (folder / "dev.csv").write_text("\n".join([header, *rows * 2]) + "\n", encoding="utf-8")
    return {row.rsplit(",", 1)[1] for row in rows}


def test_the_walkthrough_has_the_steps_of_a_newcomer() -> None:
    example, steps = walkthrough()
    assert example.startswith("sentence,label\n")
    assert [w[0] if w[0] in ("source", "curl") else " ".join(w[:2]) for w in steps] == STEPS
    assert make_target("run") == [["attnlab", "pretrain"]]


@pytest.mark.slow
def test_readme_from_make_run_to_a_served_classifier(tmp_path) -> None:
    example, steps = walkthrough()
    shell = Shell(tmp_path)
    for words in make_target("run"):  # `make run`, at 2 steps
        printed = shell.run(words)
    model = shell.cwd / "runs/pretrain-mlm/model"
    assert f"model: {model.relative_to(shell.cwd)}" in printed and (model / "config.json").is_file()
    finetune = next(w for w in steps if w[:2] == ["attnlab", "finetune"])
    labels = write_my_data(shell.cwd / finetune[finetune.index("--data-dir") + 1], example)

    out = {}
    try:
        for words in steps:
            if words[0] != "source":  # the test runs attnlab from its own interpreter
                out[words[0] if words[0] in ("python", "curl") else words[1]] = shell.run(words)
    finally:
        if shell.server is not None:
            shell.server.kill()
    assert shell.server is None  # `kill %1` stopped it

    assert "[MASK]" in out["fill-mask"] and len(out["fill-mask"].splitlines()) == 2  # the text, 5 candidates
    best = shell.cwd / finetune[finetune.index("--output-dir") + 1] / "best"
    assert json.loads((best / "config.json").read_text())["id2label"]
    predicted = json.loads(out["predict"])["labels"]
    assert {p["label"] for p in predicted} == labels and abs(sum(p["score"] for p in predicted) - 1) < 1e-4
    (answer,) = ast.literal_eval(out["python"].strip())  # transformers.pipeline on the HF export
    top = max(predicted, key=lambda p: p["score"])
    assert answer["label"] == top["label"] and answer["score"] == pytest.approx(top["score"], abs=1e-4)
    served = json.loads(out["curl"])["predictions"]
    assert {p["label"] for p in served} == labels
    assert {p["label"]: p["score"] for p in served} == pytest.approx(
        {p["label"]: p["score"] for p in predicted}
    )
