"""Atomic file writes: a crash while writing leaves the previous file intact, never a half-written one.

Every writer in attnlab that replaces a file others read (checkpoints, tokenizer files, shard indexes,
prediction files) goes through `atomic_write`: write a temporary file in the same directory, flush and
fsync it, ``os.replace`` it over the target, then fsync the directory so the rename itself is durable.
No torch import here: the tokenizers and metrics layers use it too.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def fsync_dir(directory: str | os.PathLike) -> None:
    """Persist a rename inside ``directory``; platforms that cannot open a directory (Windows) skip it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that wants a file name (e.g. safetensors'
    ``save_file``); on success it is fsync-ed and renamed over ``path``, on error removed."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


@contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"
) -> Iterator[IO[Any]]:
    """``with atomic_write(path) as f: f.write(...)``: the same as `open`, but all or nothing."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f


def write_json_atomic(
    obj: Any, path: str | os.PathLike, indent: int | None = 2, ensure_ascii: bool = True
) -> None:
    """Write ``obj`` as JSON (a trailing newline) to ``path`` atomically."""
    with atomic_write(path) as f:
        json.dump(obj, f, indent=indent, ensure_ascii=ensure_ascii)
        f.write("\n")
