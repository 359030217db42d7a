"""User errors as one line: what `attnlab.cli.main` prints instead of a traceback.

`user_message(error, args)` returns the message for an exception a user can cause and fix (a missing or
unreadable file, a full disk, a read-only directory, a damaged weights file, a malformed input that attnlab
rejected with a message, a loss that became NaN or Inf), or ``None`` for anything else: a bug, which keeps
its traceback. ``attnlab --debug ...`` re-raises every error with its traceback.

Messages say what happened and where; for training commands they add where the last good checkpoint is
(found under the command's output directory) and what to try.
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

from attnlab.atomic import WriteError
from attnlab.errors import raised_in_attnlab


def _output_dir(args: argparse.Namespace) -> Path | None:
    for name in ("output_dir", "output", "out"):
        value = getattr(args, name, None)
        if isinstance(value, (str, os.PathLike)):
            return Path(value)
    return None


def _last_checkpoint(args: argparse.Namespace) -> str:
    """Where the newest finished checkpoint under the command's output directory is: its ``checkpoints/``,
    or one level down (pretrain's ``train/checkpoints``, finetune's ``lr*-seed*/checkpoints``)."""
    from attnlab.train.checkpoint import latest_checkpoint

    out = _output_dir(args)
    if out is None:
        return ""
    roots = [out / "checkpoints", *sorted(out.glob("*/checkpoints"))] if out.is_dir() else []
    found = [c for c in (latest_checkpoint(root) for root in roots) if c is not None]
    newest = max(found, key=lambda c: c.stat().st_mtime, default=None)
    return f"; last good checkpoint: {newest}" if newest else f"; no checkpoint was saved in {out}"


def _damaged_file(error: BaseException) -> str | None:
    """The path a safetensors reader was given, from the failing frames' ``path``/``filename`` locals
    (safetensors' own error does not name the file)."""
    tb = error.__traceback__
    found = None
    while tb is not None:
        for name in ("path", "filename", "file"):
            value = tb.tb_frame.f_locals.get(name)
            if isinstance(value, (str, os.PathLike)) and os.fspath(value).endswith(".safetensors"):
                found = os.fspath(value)
        tb = tb.tb_next
    return found


def _file_in_the_way(path: Path, out: Path | None) -> str | None:
    """The message when making directory ``path`` met a file (``path`` itself or a parent), naming
    --output-dir when ``path`` is in it; None when no file is in the way."""
    blocking = next((p for p in (path, *path.parents) if p.is_file()), None)
    if blocking is None:
        return None
    inside = out is not None and (path == out or out in path.parents or path in out.parents)
    where = f"--output-dir {out}" if inside else str(path)
    return f"{where}: {blocking} is a file, expected a directory (or a path not yet there)"


def _write_message(error: WriteError, args: argparse.Namespace) -> str:
    """A failed write (`attnlab.atomic.WriteError`: its own sentence names the folder and the space), the
    last good checkpoint, and what to do."""
    if error.errno == errno.EROFS:
        advice = "choose a writable --output-dir"
    elif error.errno in (errno.EACCES, errno.EPERM):
        advice = f"make {error.folder} writable or choose another --output-dir"
    else:
        advice = "free some space or choose another --output-dir, then run again (--resume continues)"
    return f"{error}{_last_checkpoint(args)}; {advice}"


def _os_message(error: OSError, args: argparse.Namespace) -> str:
    if isinstance(error, WriteError):
        return _write_message(error, args)
    where = error.filename if error.filename is not None else ""
    if error.filename2 is not None:
        where = f"{where} -> {error.filename2}"
    if error.filename is None and error.strerror is None and error.args:
        return str(error)  # attnlab's own message (FileNotFoundError("x: no such file"), ...)
    if error.errno == errno.ENOSPC:
        out = _output_dir(args)
        where = where or (str(out) if out is not None else "the output")
        return (
            f"no space left on the device while writing {where}{_last_checkpoint(args)}; "
            "free some space or choose another --output-dir, then run again"
        )
    if error.errno == errno.EROFS:
        return f"{where}: read-only file system{_last_checkpoint(args)}; choose a writable --output-dir"
    if isinstance(error, PermissionError):
        return (
            f"{where}: permission denied{_last_checkpoint(args)}; choose a path you can write to (or read, "
            "for an input)"
        )
    if isinstance(error, (FileExistsError, NotADirectoryError)) and error.filename is not None:
        message = _file_in_the_way(Path(error.filename), _output_dir(args))
        if message is not None:
            return message
    if isinstance(error, IsADirectoryError):
        return f"{where}: is a directory, expected a file"
    if isinstance(error, NotADirectoryError) and error.filename is not None:
        return f"{where}: not a directory"
    if isinstance(error, FileNotFoundError) and error.filename is not None:
        return f"{where}: no such file or directory"
    return f"{where}: {error.strerror or error}" if where else str(error)


def user_message(error: BaseException, args: argparse.Namespace) -> str | None:
    """One line for a user error, or None for an error that should keep its traceback."""
    from safetensors import SafetensorError

    from attnlab.train.trainer import NonFiniteLossError

    if isinstance(error, NonFiniteLossError):
        return (
            f"training stopped: {error}; try a lower learning rate, a longer warm-up, or fp32 instead of "
            "fp16/bf16"
        )
    if isinstance(error, SafetensorError):
        where = _damaged_file(error)
        return (
            f"{where or 'a weights file'}: not a valid safetensors file (damaged or truncated?): {error}; "
            "restore it or use an earlier checkpoint"
        )
    if type(error).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError (torch not imported here)
        return f"out of accelerator memory: {error}; try a smaller batch or --device cpu"
    if isinstance(error, UnicodeDecodeError):
        return f"an input file is not valid UTF-8 ({error.reason} at byte {error.start}); convert it to UTF-8"
    if isinstance(error, OSError):
        return _os_message(error, args)
    if isinstance(error, (ValueError, TypeError, KeyError)) and raised_in_attnlab(error):
        message = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        return message or type(error).__name__
    return None
