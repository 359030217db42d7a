"""``attnlab finetune --help`` and ``attnlab pretrain --help`` state the own-data formats: the generic task's
file names and column options, and what each ``--format`` of a pre-training corpus means."""

from __future__ import annotations

import pytest

from attnlab.cli import main


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([command, "--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps option help at the terminal's width


def test_finetune_help_states_the_generic_task_files_and_columns(capsys):
    text = _help(capsys, "finetune")
    for needed in ("--task generic", "train.csv", "dev.csv", "train.tsv", "train.jsonl", "header row",
                   "--text-a", "--text-b", "--label-column", "--regression", "sentence pairs",
                   "example: attnlab finetune"):  # fmt: skip
        assert needed in text, needed


def test_pretrain_help_states_every_corpus_format(capsys):
    from attnlab.data.corpus import FORMATS

    text = _help(capsys, "pretrain")
    for fmt in FORMATS:
        assert f"--format {fmt} " in text, fmt  # each format with its meaning
    for needed in ("one sentence per line, a blank line between documents", "one document per line",
                   '"text" field', "one document per file", "example: attnlab pretrain"):  # fmt: skip
        assert needed in text, needed
