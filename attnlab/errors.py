"""Which errors are a user's to fix: shared by every command, whatever its layer (`attnlab.cli.errors`
builds the CLI's one-line messages on it; `python -m attnlab.data.prepare` uses it directly).

attnlab raises ValueError/TypeError/KeyError with messages meant for users; the same types raised deep
inside torch or numpy are bugs, reported with their traceback.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

_PACKAGE_DIR = Path(__file__).resolve().parent  # .../attnlab


def raised_in_attnlab(error: BaseException) -> bool:
    """Whether the innermost frame that raised ``error`` is attnlab's code (not torch's, numpy's, ...):
    attnlab raises ValueError/TypeError with messages meant for users; a library's ValueError deep inside a
    computation is a bug to report with its traceback."""
    tb: TracebackType | None = error.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    try:
        return Path(last.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


def input_error_message(error: BaseException) -> str | None:
    """One line for an error in a command's input (a file that cannot be read, bytes that are not UTF-8, a
    malformed input attnlab rejected with a message), or None for anything else (a bug, with traceback)."""
    if isinstance(error, UnicodeDecodeError):
        return f"an input file is not valid UTF-8 ({error.reason} at byte {error.start}); convert it to UTF-8"
    if isinstance(error, OSError):
        if error.filename is None:
            return str(error)
        return f"{error.filename}: {error.strerror or error}"
    if isinstance(error, (ValueError, TypeError, KeyError)) and raised_in_attnlab(error):
        message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        return message or type(error).__name__
    return None
