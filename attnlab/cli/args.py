"""Argument types and help formatting shared by every ``attnlab`` command.

Numeric options are checked where they are parsed: ``--max-steps 0`` or ``--batch-size -1`` is an
argparse error naming the option and the expected range (exit code 2), never a value silently taken as
"unset". Each type below is a plain function, so argparse's message reads
``argument --batch-size: expected a positive integer, got '0'``.

`describe_defaults` adds ``(default: X)`` to every option's help that does not already state its default,
so ``--help`` of every command shows them.
"""

from __future__ import annotations

import argparse
import math

# Types whose name tells the range they accept; `tests/cli/test_cli_options.py` checks that every numeric
# option of every command uses one of them (or is listed there as taking any integer, like --seed).
__all__ = [
    "describe_defaults",
    "device",
    "fraction",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "probability",
    "probability_mass",
    "probability_or_keep",
    "real_number",
    "NUMERIC_TYPES",
]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (steps, sizes, counts)."""
    value = _int(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0, for options whose 0 has a documented meaning (e.g. 0 warm-up steps)."""
    value = _int(text, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (learning rates, minutes, epochs)."""
    value = _float(text, "a positive number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (weight decay, length penalty)."""
    value = _float(text, "a number >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1) (warm-up fraction, label smoothing)."""
    value = _float(text, "a number in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def probability(text: str) -> float:
    """A dropout probability in [0, 1)."""
    value = _float(text, "a probability in [0, 1)")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def probability_or_keep(text: str) -> float | None:
    """A dropout probability in [0, 1), or ``keep`` (None: leave the model's own value)."""
    if text.strip().lower() == "keep":
        return None
    value = _float(text, "a probability in [0, 1) or 'keep'")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1) or 'keep', got {text!r}")
    return value


def probability_mass(text: str) -> float:
    """A number in (0, 1] (nucleus sampling's top-p: 1 keeps every token, 0 none)."""
    value = _float(text, "a number in (0, 1]")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def real_number(text: str) -> float:
    """Any finite number, for options whose sign has a meaning (beam search's length penalty: < 0 favours
    short hypotheses, > 0 long ones)."""
    return _float(text, "a finite number")


def device(text: str) -> str:
    """A device this machine has: cpu, cuda, cuda:N, mps or auto (checked at parse time, so a typo or a GPU
    the machine lacks is named before any file is read, not torch's traceback from deep inside a run)."""
    if text.strip().lower() in ("auto", "cpu"):
        return text.strip().lower()
    from attnlab.train.distributed import resolve_device  # imports torch: only for a non-default value

    try:
        resolve_device(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--device ")) from None
    return text


NUMERIC_TYPES = (
    positive_int, non_negative_int, positive_float, non_negative_float, fraction, probability,
    probability_mass, real_number, probability_or_keep,
)  # fmt: skip


def _states_default(help_text: str) -> bool:
    return "default" in help_text.lower() or "%(default)" in help_text


def describe_defaults(parser: argparse.ArgumentParser) -> None:
    """Append ``(default: X)`` to the help of every option of ``parser`` (and of its sub-commands) that does
    not already state its default; an optional value with no default reads ``(default: not set)``. On/off
    flags, required options and the members of a required either-or group are left as they are."""
    either_or = {id(a) for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                describe_defaults(sub)
            continue
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or not action.option_strings:
            continue
        default = action.default
        if action.required or id(action) in either_or or default is argparse.SUPPRESS:
            continue
        if isinstance(default, bool) or (default is None and action.nargs == 0):
            continue  # a flag: its help says what it turns on
        help_text = action.help or ""
        if help_text == argparse.SUPPRESS or _states_default(help_text):
            continue
        if default is None:
            shown = "not set"
        elif isinstance(default, (list, tuple)):
            shown = " ".join(map(str, default)) if default else "none"
        else:
            shown = str(default)
        shown = shown.replace("%", "%%")
        action.help = f"{help_text} (default: {shown})" if help_text else f"default: {shown}"
