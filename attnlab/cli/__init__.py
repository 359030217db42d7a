"""The `attnlab` command.

Each command group lives in its own module under `attnlab.cli` (for example
`attnlab/cli/tokenizer.py`) and exposes `register(subparsers)`, which adds its
sub-commands and sets `func` on each. Modules are discovered here, so adding a
command never touches this file.

`main` is the one place where errors reach the user: a user error (a missing file, a malformed input, a
full disk, a damaged weights file, a NaN loss; see `attnlab.cli.errors`) becomes one line
``attnlab COMMAND: error: ...`` on standard error and exit code 2; ``--debug`` (before or after the
command) re-raises it with its traceback. A reader that closes standard output early (``attnlab info X |
head``) ends the command quietly, with exit code 141 as Unix tools do (128 + SIGPIPE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import textwrap

from attnlab import __version__

from ._catalog import EXAMPLES, GROUPS
from .args import describe_defaults
from .errors import raised_in_attnlab, user_message


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """``--debug`` on every sub-command too (SUPPRESS: an absent flag keeps the top-level value), and no
    abbreviated options anywhere: argparse would otherwise read ``translate --max-length 5`` as the only
    option that starts so, ``--max-length-offset 5``, without a word."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.add_argument(
                    "--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the full traceback of an error",
                )  # fmt: skip
                _add_debug(sub)


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command and sub-command by its full name ("pretrain", "tokenizer train")."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found.update(_subcommands(sub, f"{prefix}{name} "))
    return found


def _add_examples(parser: argparse.ArgumentParser) -> None:
    """Each command's ``--help`` opens with what it does (its description, else its one-line help) and ends
    with an example (`attnlab.cli._catalog.EXAMPLES`)."""
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
    for name, sub in _subcommands(parser).items():
        if not sub.description and helps.get(name):
            sub.description = helps[name][0].upper() + helps[name][1:].rstrip(".") + "."
        if name in EXAMPLES:  # after the command's own epilog (its input formats), if it has one
            sub.epilog = "\n\n".join(filter(None, [sub.epilog, f"example: {EXAMPLES[name]}"]))


def _grouped_commands(parser: argparse.ArgumentParser) -> str:
    """The commands listed by task (`attnlab.cli._catalog.GROUPS`), each with its one-line help."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    listed = {name for names in GROUPS.values() for name in names}
    groups = {**GROUPS, "other": tuple(sorted(set(helps) - listed))}
    width = max(map(len, helps)) + 2
    lines = []
    for group, names in groups.items():
        present = [n for n in names if n in helps]
        if present:
            lines.append(f"{group}:")
            for name in present:
                lines += textwrap.wrap(
                    helps[name], 100, initial_indent=f"  {name:<{width}}", subsequent_indent=" " * (width + 2)
                )
    return "\n".join(lines) + "\n\nrun `attnlab COMMAND --help` for a command's options and an example"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="The Transformer and the BERT family end to end.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    _add_debug(parser)
    describe_defaults(parser)
    _add_examples(parser)
    parser.epilog = _grouped_commands(parser)
    sub._choices_actions.clear()  # the grouped list above replaces argparse's flat one
    return parser


BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what `yes | head` leaves in PIPESTATUS


def _stdout_closed() -> int:
    """Standard output's reader went away: point stdout at /dev/null so that the interpreter's flush at exit
    raises nothing more, and return the exit code of a command killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a descriptor (captured): nothing to redirect
        pass
    return BROKEN_PIPE_EXIT


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught (``--help`` included)
    except BrokenPipeError:
        return _stdout_closed()


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()  # imports the commands' modules, which read settings such as ATTNLAB_CPU_GEMM
    except ValueError as error:
        if not raised_in_attnlab(error):
            raise
        print(f"attnlab: error: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        try:
            return int(args.func(args) or 0)
        finally:
            leave_process_group()
    except KeyboardInterrupt as stop:
        print(f"interrupted: {stop}" if str(stop) else "interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # standard output closed: `main` ends quietly
    except Exception as error:
        if args.debug:
            raise
        message = user_message(error, args)
        if message is None:
            raise
        command = " ".join(
            str(part) for part in (args.command, getattr(args, "tokenizer_command", None)) if part
        )
        print(f"attnlab {command}: error: {message}", file=sys.stderr)
        print("(run with --debug for the full traceback)", file=sys.stderr)
        return 2


def leave_process_group() -> None:
    """A command run under torchrun leaves its process group when it returns, not at the interpreter's exit
    (`attnlab.train.distributed.cleanup_distributed`, a no-op without a group). A command that never
    imported that module joined no group, so nothing is imported here."""
    distributed = sys.modules.get("attnlab.train.distributed")
    if distributed is not None:
        distributed.cleanup_distributed()


if __name__ == "__main__":
    sys.exit(main())
