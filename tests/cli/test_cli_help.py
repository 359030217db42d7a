"""The command line as the first documentation: `attnlab` alone lists the commands grouped by task, and every
command's ``--help`` opens with what it does and ends with an example that parses."""

from __future__ import annotations

import shlex

import pytest

from attnlab.cli import _subcommands, build_parser, main
from attnlab.cli._catalog import EXAMPLES, GROUPS

PARSER = build_parser()
COMMANDS = _subcommands(PARSER)


def test_every_command_is_grouped_and_has_an_example() -> None:
    top_level = {name for name in COMMANDS if " " not in name}
    grouped = [name for names in GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(top_level)
    assert set(EXAMPLES) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_example_parses_as_that_command(name: str) -> None:
    words = shlex.split(EXAMPLES[name])
    assert words[0] == "attnlab" and " ".join(words[1 : 1 + len(name.split())]) == name
    args = build_parser().parse_args(words[1:])
    assert args.command == name.split()[0] and callable(args.func)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_opens_with_a_sentence_and_ends_with_the_example(name: str) -> None:
    sub = COMMANDS[name]
    assert sub.description and sub.description.strip()[0].isupper()
    text = " ".join(sub.format_help().split())
    assert text.endswith(" ".join(f"example: {EXAMPLES[name]}".split()))


def test_no_arguments_lists_the_commands_by_task(capsys) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    positions = [out.index(f"\n{group}:\n") for group in ("train", "use", "serve", "convert", "inspect")]
    assert positions == sorted(positions) and "other:" not in out
    assert out.index("  pretrain ") > positions[0] and out.index("  serve ") > positions[2]
