"""Atomic file writes: a crash while writing leaves the previous file intact, never a half-written one.

Every writer in attnlab that replaces a file others read (checkpoints, tokenizer files, shard indexes,
prediction files) goes through `atomic_write`: write a temporary file in the same directory, flush and
fsync it, ``os.replace`` it over the target, then fsync the directory so the rename itself is durable.
Temporary files and directories are created with the modes a plain ``open(path, "w")`` / ``mkdir`` would
give (0666 / 0777 less the umask), not `tempfile`'s private 0600 / 0700: the renamed result is what the
user expects to share. A write that fails for want of space or permission is a `WriteError`: one sentence
naming the folder (and, when known, the space needed). No torch import here: the tokenizers and metrics
layers use it too.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
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


# errno values of a write that the user can fix (space, quota, file size limit, permission, read-only)
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS)
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_OS_ERROR_IN_TEXT = re.compile(r"os error (\d+)")  # Rust's io::Error text (safetensors)
_SHORT_WRITE_TEXT = ("unexpected pos", "file write failed", "failed writing")  # torch.save's stream writer


class WriteError(OSError):
    """A write into ``folder`` failed for a reason the user can fix; ``str()`` is one sentence.

    An `OSError` (``errno``, ``filename`` = the folder) so that callers catching OSError still do;
    ``needed`` and ``free`` are byte counts when known."""

    def __init__(self, code: int, folder: Path, needed: int | None = None, free: int | None = None):
        super().__init__(code, os.strerror(code), str(folder))
        self.folder, self.needed, self.free = Path(folder), needed, free

    def __reduce__(self):  # across processes (a worker's failed write) with its own arguments, not OSError's
        return type(self), (self.errno, self.folder, self.needed, self.free)

    def __str__(self) -> str:
        if self.errno in _SPACE_ERRNOS:
            what = "no space left" if self.errno != errno.EFBIG else "the file size limit was reached"
            sizes = []
            if self.needed is not None:
                sizes.append(f"it needs about {format_bytes(self.needed)}")
            if self.free is not None:
                sizes.append(f"{format_bytes(self.free)} free")
            detail = f" ({', '.join(sizes)})" if sizes else ""
            return f"cannot write into {self.folder}: {what}{detail}"
        if self.errno == errno.EROFS:
            return f"cannot write into {self.folder}: it is on a read-only file system"
        return f"cannot write into {self.folder}: permission denied"


def format_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def free_bytes(folder: str | os.PathLike) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def write_failure(
    error: BaseException, folder: str | os.PathLike, needed: int | None = None, free: int | None = None
) -> WriteError | None:
    """The `WriteError` that ``error`` (raised while writing into ``folder``) amounts to, or None.

    Writers report a full disk in their own words: an `OSError` from Python's files, ``os error 28`` inside
    safetensors' message, ``unexpected pos`` from torch.save's stream writer (which loses the errno; then
    the free space decides: less than ``needed``, or under 1 MiB, is a full disk). ``free``: the space there
    was before the write began (a writer that failed may still hold its half-written file open)."""
    if isinstance(error, WriteError):
        return error
    folder = Path(folder)
    if isinstance(error, OSError) and error.filename is not None and not _inside(error.filename, folder):
        return None  # another file (an input the writer read) failed: not this write's fault
    code = error.errno if isinstance(error, OSError) else None
    if code is None:
        found = _OS_ERROR_IN_TEXT.search(str(error))
        code = int(found.group(1)) if found else None
    free = free if free is not None else free_bytes(folder)
    if code is None and any(text in str(error) for text in _SHORT_WRITE_TEXT):
        if free is not None and free < max(needed or 0, 1 << 20):
            code = errno.ENOSPC
    if code not in _WRITE_ERRNOS:
        return None
    return WriteError(code, folder, needed, free if code in _SPACE_ERRNOS else None)


def _inside(name: str | os.PathLike, folder: Path) -> bool:
    path = Path(os.fsdecode(name))
    return path == folder or folder in path.parents


def _unique_name(parent: Path, prefix: str, suffix: str, create) -> Path:
    """Create ``parent/<prefix><random><suffix>`` with ``create(path)``, retrying the rare name collision."""
    for _ in range(100):
        candidate = parent / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            create(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent / prefix))


def current_umask() -> int:
    """The process's umask: from /proc on Linux, else by setting and restoring it (a brief window in which
    another thread's new file would get mode 0o777 & ~0o022)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def widen_to_default_mode(path: str | os.PathLike) -> None:
    """Give ``path`` at least the permissions ``open(path, "w")`` would (0666 less the umask): some writers
    (safetensors' ``save_file``) create their files 0600 whatever the umask."""
    mode = os.stat(path).st_mode & 0o7777
    wanted = 0o666 & ~current_umask()
    if mode & wanted != wanted:
        os.chmod(path, mode | wanted)


def make_temporary_file(parent: Path, prefix: str, suffix: str = ".tmp") -> Path:
    """An empty new file in ``parent`` with the mode ``open(path, "w")`` gives (0666 less the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    return _unique_name(parent, prefix, suffix, lambda p: os.close(os.open(p, flags, 0o666)))


def make_temporary_directory(parent: Path, prefix: str) -> Path:
    """A new directory in ``parent`` with the mode ``mkdir`` gives (0777 less the umask)."""
    return _unique_name(parent, prefix, "", lambda p: os.mkdir(p, 0o777))


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that wants a file name (e.g. safetensors'
    ``save_file``); on success it is fsync-ed and renamed over ``path``, on error removed (a failure for
    want of space or permission becomes a `WriteError` naming the folder)."""
    path = Path(path)
    try:
        tmp = make_temporary_file(path.parent, f".{path.name}.")
    except OSError as e:
        raise (write_failure(e, path.parent) or e) from e
    try:
        yield tmp
        widen_to_default_mode(tmp)  # the writer may have replaced our file with a private one
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        failure = write_failure(e, path.parent) if isinstance(e, Exception) else None
        if failure is not None and failure is not e:
            raise failure from e
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
