"""The one rule for every command that writes a run directory (finetune, translate-train; pretrain too):
an output directory holding another run is refused unless ``--resume`` (continue it) or ``--overwrite``
(remove what that run wrote, then start afresh) is given.

A run directory holds ``run.json`` (written atomically) with the run's id, which every checkpoint's
manifest repeats (`attnlab.manifest`): checkpoint averaging and resuming then take only the current run's
checkpoints, never a stale run's.

An earlier run is one that left something to keep: a finished checkpoint or a saved model (a
``.safetensors`` file) among the command's outputs. A run that stopped before either (a bad option, a
corpus it could not read) leaves only run.json and empty folders; the next run removes those and starts.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.manifest import new_run_id

RUN_FILE = "run.json"


class RunDirectoryError(ValueError):
    """The output directory holds another run and neither resume nor overwrite was asked for."""


@dataclass
class RunDirectory:
    path: Path
    run_id: str  # this run's id (an earlier run's when resuming it)
    resuming: bool  # an earlier run was found and is continued
    info: dict[str, Any] = field(default_factory=dict)  # the content of run.json

    def update(self, **fields: Any) -> None:
        """Add ``fields`` to run.json (atomically)."""
        self.info.update(fields)
        write_json_atomic(self.info, self.path / RUN_FILE)


def read_run_file(directory: str | os.PathLike) -> dict[str, Any] | None:
    """``run.json`` of a run directory (None when absent); broken JSON is an error naming file and line."""
    path = Path(directory) / RUN_FILE
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RunDirectoryError(f"{path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg})") from e
    if not isinstance(info, dict):
        raise RunDirectoryError(f"{path}: expected a JSON object, found {type(info).__name__}")
    return info


def prepare_run_directory(
    directory: str | os.PathLike,
    command: str,
    outputs: Iterable[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    settings: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> RunDirectory:
    """Claim ``directory`` for a run of ``command``.

    ``outputs`` are the names (files or directories) a run of this command writes there; any of them
    present, or a ``run.json``, means an earlier run. Then: ``resume`` continues it (its run id is kept),
    ``overwrite`` deletes those outputs and ``run.json`` first (nothing else in the directory is touched),
    and neither is a `RunDirectoryError` that says both ways out. ``settings`` go into run.json; resuming a
    run whose run.json holds settings with other ``settings`` is a `RunDirectoryError` naming each that
    differs (the checkpoints were made under the first ones: a model with another head, a schedule of
    another length). A run.json without settings (an older run's) is not compared.
    """
    if resume and overwrite:
        raise RunDirectoryError(f"{command}: give --resume or --overwrite, not both")
    path = Path(directory)
    outputs = list(outputs)
    present = [name for name in [RUN_FILE, *outputs] if (path / name).exists()]
    if present and not holds_results(path, present):
        _remove(path, present)
        log(f"{command}: {path} held only what a run that stopped before saving a checkpoint or a model "
            f"left ({', '.join(present)}); removed it, starting afresh")  # fmt: skip
        present = []
    previous = read_run_file(path) if present and not overwrite else None
    if present and not resume and not overwrite:
        what = f"run id {previous.get('run_id')}, " if previous and previous.get("run_id") else ""
        raise RunDirectoryError(
            f"{path} holds an earlier run ({what}{', '.join(present)}); continue it with --resume, "
            "replace it with --overwrite, or choose another output directory"
        )
    if present and overwrite:
        _remove(path, present)
        log(f"{command}: --overwrite: removed {', '.join(present)} of the earlier run in {path}")
    resuming = bool(present) and resume
    if resuming and previous and settings is not None and isinstance(previous.get("settings"), dict):
        changed = settings_changed(previous["settings"], settings)
        if changed:
            raise RunDirectoryError(
                f"{path / RUN_FILE}: --resume with other settings than the run was started with: "
                + "; ".join(changed)
                + ". Resume with the first settings, or start afresh (--overwrite, or another output folder)"
            )
    path.mkdir(parents=True, exist_ok=True)
    run_id = str(previous["run_id"]) if resuming and previous and previous.get("run_id") else new_run_id()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info = dict(previous or {}) if resuming else {}
    info.update(command=command, run_id=run_id, **({"settings": settings} if settings is not None else {}))
    info.setdefault("started", now)
    if resuming:
        info["resumed"] = [*info.get("resumed", []), now]
    run = RunDirectory(path, run_id, resuming, info)
    run.update()
    return run


def holds_results(path: Path, names: Iterable[str]) -> bool:
    """Whether any of ``names`` in ``path`` is or holds a finished checkpoint (``trainer_state.json``) or a
    saved model (a ``.safetensors`` file): what makes a directory an earlier run worth keeping."""
    for name in names:
        target = path / name
        if target.is_file() and target.suffix == ".safetensors":
            return True
        if target.is_dir() and not target.is_symlink():
            for _ in itertools.chain(target.rglob("*.safetensors"), target.rglob("trainer_state.json")):
                return True
    return False


def _remove(path: Path, names: Iterable[str]) -> None:
    for name in names:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()


def settings_changed(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``name: A when the run started, B now`` for each setting the run recorded that differs (compared as
    JSON values, as run.json holds them: a tuple equals the list it was written as). A setting the run did
    not record (one a later version of the command added) is not compared: it cannot tell."""
    as_json = json.loads(json.dumps(now, default=str))
    changed = []
    for name in sorted(before):
        if before.get(name) != as_json.get(name):
            changed.append(f"{name}: {before.get(name)!r} when the run started, {as_json.get(name)!r} now")
    return changed
