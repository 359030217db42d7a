"""Checksum manifests: a damaged or stale file in a checkpoint or model directory is never used silently.

A directory written by attnlab (a training checkpoint ``step-NNNNNN/``, a model directory) carries
``manifest.json``, written atomically *after* the files it lists::

    {"format": "attnlab-manifest", "version": 1, "run_id": "3f2a...",
     "files": {"model.safetensors": {"sha256": "...", "size": 1234}, "config.json": {...}}}

Loading verifies each listed file: a missing file, a different size (a truncated copy) or a different
SHA-256 (a flipped bit, a zeroed block) is an `IntegrityError` naming the file and what differs. Files the
manifest does not list are not checked (a directory from HF transformers has no manifest and loads as it
is). The ``run_id`` ties a checkpoint to the run that wrote it, so that checkpoint averaging and resuming
never mix in a stale run's files.

Hashing reads each file once (``hashlib.sha256``, ~1 s for 400 MB); a verified file is remembered by
(path, size, mtime, inode) so that the same process does not hash it twice. No torch import here.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "attnlab-manifest"
MANIFEST_VERSION = 1
_CHUNK = 1 << 20


class IntegrityError(ValueError):
    """A file does not match its directory's manifest (missing, truncated or changed), or the manifest
    itself is unreadable."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str  # hex digest of the whole file
    size: int  # bytes; checked first, so a truncated file is named as such


@dataclass
class Manifest:
    files: dict[str, FileEntry]  # name relative to the directory -> checksum
    run_id: str | None = None  # the run that wrote the directory (checkpoints, model directories of a run)
    extra: dict[str, Any] = field(default_factory=dict)  # anything else a writer records

    def to_dict(self) -> dict[str, Any]:
        files = {name: {"sha256": e.sha256, "size": e.size} for name, e in sorted(self.files.items())}
        out: dict[str, Any] = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "run_id": self.run_id}
        return {**out, **self.extra, "files": files}


def new_run_id() -> str:
    """A fresh random run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# (resolved path, size, mtime_ns, inode) -> sha256 of files already verified or hashed in this process
_VERIFIED: dict[tuple[str, int, int, int], str] = {}


def _stat_key(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def _entry(path: Path) -> FileEntry:
    digest = file_sha256(path)
    _VERIFIED[_stat_key(path)] = digest
    return FileEntry(digest, path.stat().st_size)


def default_files(directory: str | os.PathLike) -> list[str]:
    """The regular files directly in ``directory``, except the manifest and hidden (temporary) files."""
    directory = Path(directory)
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name != MANIFEST_NAME
    )


def write_manifest(
    directory: str | os.PathLike,
    files: Iterable[str] | None = None,
    *,
    run_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Manifest:
    """Hash ``files`` (names in ``directory``; default: `default_files`) and write ``manifest.json``
    atomically. Call it after the files are complete; an earlier manifest is replaced."""
    directory = Path(directory)
    names = default_files(directory) if files is None else sorted(set(files))
    entries = {}
    for name in names:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: cannot list it in {MANIFEST_NAME}: no such file")
        entries[name] = _entry(path)
    manifest = Manifest(entries, run_id, dict(extra or {}))
    write_json_atomic(manifest.to_dict(), directory / MANIFEST_NAME)
    return manifest


def add_to_manifest(directory: str | os.PathLike, files: Iterable[str]) -> Manifest:
    """Hash ``files`` into the existing manifest of ``directory`` (written after them), keeping its other
    entries and run id; a directory without a manifest gets one listing only ``files``."""
    directory = Path(directory)
    manifest = read_manifest(directory) or Manifest({})
    for name in files:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: cannot list it in {MANIFEST_NAME}: no such file")
        manifest.files[name] = _entry(path)
    write_json_atomic(manifest.to_dict(), directory / MANIFEST_NAME)
    return manifest


def read_manifest(directory: str | os.PathLike) -> Manifest | None:
    """The manifest of ``directory``, or None when it has none. A broken one is an `IntegrityError`
    naming the file, line and field."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise IntegrityError(
            f"{path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg}); the manifest is damaged"
        ) from e
    except (OSError, UnicodeDecodeError) as e:
        raise IntegrityError(f"{path}: unreadable manifest: {e}") from e
    if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
        raise IntegrityError(f'{path}: not an attnlab manifest (expected "format": "{MANIFEST_FORMAT}")')
    files = raw.get("files")
    if not isinstance(files, dict):
        raise IntegrityError(f"{path}: field 'files' must be an object of name -> {{sha256, size}}")
    entries = {}
    for name, entry in files.items():
        ok = isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
        ok = ok and isinstance(entry.get("size"), int)
        if not ok or os.path.isabs(name) or ".." in Path(name).parts:
            raise IntegrityError(
                f"{path}: files[{name!r}] must be {{'sha256': hex, 'size': int}} under a relative name"
            )
        entries[name] = FileEntry(entry["sha256"], entry["size"])
    run_id = raw.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise IntegrityError(f"{path}: field 'run_id' must be a string or null, got {run_id!r}")
    extra = {k: v for k, v in raw.items() if k not in ("format", "version", "run_id", "files")}
    return Manifest(entries, run_id, extra)


def _parses(path: Path) -> bool:
    """Whether ``path`` is a JSON file that still parses (edited by hand rather than cut short)."""
    if path.suffix != ".json":
        return False
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
    return True


def _check(directory: Path, name: str, entry: FileEntry) -> None:
    path = directory / name
    if not path.is_file():
        raise IntegrityError(f"{path}: missing, but {directory / MANIFEST_NAME} lists it")
    size = path.stat().st_size
    update = f"if the change was on purpose, `attnlab verify --update {directory}` records it"
    if size != entry.size and _parses(path):  # an edited file, not a cut one
        raise IntegrityError(
            f"{path}: changed since it was written ({size} bytes, the manifest says {entry.size}); {update}"
        )
    if size != entry.size:
        what = "truncated" if size < entry.size else "longer than written"
        raise IntegrityError(
            f"{path}: {what}: {size} bytes, the manifest says {entry.size}; the file is damaged "
            "(restore it from a copy)"
        )
    key = _stat_key(path)
    if _VERIFIED.get(key) == entry.sha256:
        return
    digest = file_sha256(path)
    if digest != entry.sha256:
        raise IntegrityError(
            f"{path}: SHA-256 {digest[:16]}... differs from the manifest's {entry.sha256[:16]}...; the file "
            f"is damaged or was changed after it was written; {update}"
        )
    _VERIFIED[key] = digest


def verify_directory(
    directory: str | os.PathLike, files: Iterable[str] | None = None, *, required: bool = False
) -> Manifest | None:
    """Check the files of ``directory`` against its manifest: all listed files, or only those of ``files``
    that it lists. Returns the manifest (None when there is none and not ``required``)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        if required:
            raise IntegrityError(
                f"{directory}: no {MANIFEST_NAME}, so its files cannot be verified (written by an older "
                f"attnlab?); if you trust them, `attnlab verify --update {directory}` writes one"
            )
        return None
    names = manifest.files if files is None else [n for n in files if n in manifest.files]
    for name in names:
        _check(directory, name, manifest.files[name])
    return manifest


def verify_file(path: str | os.PathLike) -> bool:
    """Check one file against the manifest of its directory; False when no manifest lists it."""
    path = Path(path)
    manifest = read_manifest(path.parent)
    if manifest is None or path.name not in manifest.files:
        return False
    _check(path.parent, path.name, manifest.files[path.name])
    return True
