"""Every code block in the docs runs as written.

The fenced blocks of ``docs/*.md`` and ``README.md`` are found and checked by language:

- ``python``: executed in a fresh namespace in a temporary directory. A block whose first line is
  ``# NAME.py`` is a script: it is written there as NAME.py for the shell lines that run it.
- ``bash``: each command (``\\``-continued lines joined, comments dropped) is, by its program:
  ``python X`` run with this interpreter; ``attnlab ...`` parsed by the CLI's parser (wrong option names
  fail); ``torchrun ...`` parsed by torchrun's own parser, and in the slow test, a ``--standalone`` launch of
  at most 2 processes really run on the CPU.
- a block preceded by ``<!-- docs-test: skip (why) -->`` or ``<!-- docs-test: parse (why) -->`` is skipped
  or only parsed here, with the reason in the doc; a block without a language (a directory tree, a diagram)
  or a ``csv`` block (a file's format) is an illustration. Anything else fails here, so a new block must be
  runnable or say why not.

The ``attnlab`` commands of the ``bash`` blocks, parsed or run, are also executed in the doc's order at tiny
budgets by the slow ``test_docs_commands.py`` (the README's walk-through by ``tests/test_newcomer.py``), and
every ``python experiments/...`` or ``benchmarks/...`` line of the docs, whatever its block's mode, by the
slow ``test_docs_scripts.py``.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from doc_chain import ROOT, Block, blocks, commands

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# README.md's set-up commands: the Makefile's own targets (CI runs them), and activating the venv
NOT_COMMANDS = {"make", "source"}
ALL = [b for doc in DOCS for b in blocks(doc)]


def scripts(doc: Path) -> dict[str, str]:
    """``{NAME.py: text}`` for the python blocks of ``doc`` that start with ``# NAME.py``."""
    out = {}
    for b in blocks(doc):
        first = b.text.splitlines()[0] if b.text.strip() else ""
        name = re.fullmatch(r"#\s*(\w+\.py)\s*", first)
        if b.lang == "python" and name:
            out[name.group(1)] = b.text
    return out


def test_every_block_is_checked_or_says_why_not() -> None:
    assert len(ALL) >= 10
    for b in ALL:
        assert b.lang in ("python", "bash", "csv", "") or b.mode == "skip", f"{b.id}: a {b.lang!r} block"
        if b.lang == "bash" and b.mode == "run":
            for words in commands(b.text):
                known = {"python", "torchrun", "attnlab"} | (
                    NOT_COMMANDS if b.doc.name == "README.md" else set()
                )
                assert words[0] in known, f"{b.id}: {words[0]!r} is neither run nor parsed here"
    for doc in DOCS:
        launched = {
            w[1] for b in blocks(doc) if b.lang == "bash" for w in commands(b.text) if w[0] == "python"
        }
        for name in scripts(doc):
            assert name in launched, f"{doc.name}: {name} is never run by a `python {name}` command"


@pytest.mark.parametrize(
    "block", [b for b in ALL if b.lang == "python" and b.mode == "run"], ids=lambda b: b.id
)
def test_python_block_runs(block: Block, tmp_path, monkeypatch) -> None:
    if block.text.startswith("#") and block.text.split("\n", 1)[0].strip().endswith(".py"):
        pytest.skip("a script: run by the shell block that launches it")
    monkeypatch.chdir(tmp_path)
    exec(compile(block.text, f"{block.doc}:{block.line}", "exec"), {"__name__": "__main__"})


PYTHON_BLOCKS = [
    b for b in ALL if b.lang == "bash" and b.mode == "run" and any(w[0] == "python" for w in commands(b.text))
]


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.id)
def test_python_commands_run(block: Block, tmp_path, monkeypatch) -> None:
    """The block's ``python SCRIPT ARGS`` commands, in order (a resume needs the run it resumes), each as
    ``__main__`` with its arguments in this process: a fresh interpreter would spend most of the time
    importing torch."""
    for name, text in scripts(block.doc).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for words in commands(block.text):
        assert words[0] == "python", f"{block.id}: {words[0]!r} in a block of python commands"
        monkeypatch.setattr(sys, "argv", words[1:])
        runpy.run_path(words[1], run_name="__main__")


ATTNLAB_LINES = [
    (b, words) for b in ALL if b.lang == "bash" and b.mode in ("run", "parse") for words in commands(b.text)
    if words[0] == "attnlab"
]  # fmt: skip


@pytest.mark.parametrize(
    ("block", "words"), ATTNLAB_LINES, ids=[f"{b.id}:{' '.join(w[:2])}" for b, w in ATTNLAB_LINES]
)
def test_attnlab_command_parses(block: Block, words: list[str]) -> None:
    from attnlab.cli import build_parser

    try:
        args = build_parser().parse_args(words[1:])
    except SystemExit as e:
        pytest.fail(f"{block.id}: `{' '.join(words)}` does not parse (exit {e.code})")
    assert callable(getattr(args, "func", None))


TORCHRUN_LINES = [
    (b, words) for b in ALL if b.lang == "bash" and b.mode in ("run", "parse") for words in commands(b.text)
    if words[0] == "torchrun"
]  # fmt: skip


@pytest.mark.parametrize(
    ("block", "words"), TORCHRUN_LINES, ids=[f"{b.id}:{len(w)}" for b, w in TORCHRUN_LINES]
)
def test_torchrun_command_parses(block: Block, words: list[str]) -> None:
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(words[1:])
    assert args.training_script in scripts(block.doc), (
        f"{block.id}: runs {args.training_script}, not in the doc"
    )


def _cpu_launches():
    out = []
    for b, words in TORCHRUN_LINES:
        if b.mode == "run" and "--standalone" in words:
            nproc = next(int(w.split("=", 1)[1]) for w in words if w.startswith("--nproc_per_node="))
            if nproc <= 2:
                out.append((b, words))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("block", "words"), _cpu_launches(), ids=lambda v: getattr(v, "id", None))
def test_torchrun_on_the_cpu_runs(block: Block, words: list[str], tmp_path) -> None:
    for name, text in scripts(block.doc).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *words[1:]], cwd=tmp_path, capture_output=True,
        text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
