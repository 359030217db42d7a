"""Runs keyed by their full configuration and seed, cached under the lab's output folder.

A `RunSpec` (kind, configuration, seed) is hashed to ``OUTPUT/runs/KEY`` (sha256 of its canonical JSON):
two tables that need the same run find the same folder, and a run is trained once. A run is done when its
``result.json`` exists and holds the spec it was made for; it is written atomically, last, so a killed run
leaves a folder without one, which the next ``attnlab ablate`` resumes (pre-training continues from its
checkpoints) or starts again.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic

RESULT_FILE = "result.json"
SPEC_FILE = "spec.json"


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: one text per configuration (floats as Python prints them)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain, allow_nan=False)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not part of a run's configuration: {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class RunSpec:
    """One run: ``kind`` (pretrain, distill, translate, features, finetune), everything that decides its
    result in ``config`` (upstream runs by their keys), and its seed."""

    kind: str
    config: Mapping[str, Any]
    seed: int
    needs: tuple[RunSpec, ...] = field(default=(), compare=False)  # runs whose outputs this one reads

    @property
    def key(self) -> str:
        text = canonical_json({"kind": self.kind, "config": self.config, "seed": self.seed})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        return json.loads(canonical_json({"kind": self.kind, "config": self.config, "seed": self.seed}))


class RunStore:
    """The run folders under ``root`` (OUTPUT/runs)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, spec: RunSpec) -> Path:
        return self.root / spec.key

    def result(self, spec: RunSpec) -> dict[str, Any] | None:
        """The finished run's result, or None if it is not done (no result.json, or one that does not
        parse or was written for another spec: such a folder is redone)."""
        path = self.folder(spec) / RESULT_FILE
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or record.get("spec") != spec.to_dict() or "result" not in record:
            return None
        return record["result"]

    def done(self, spec: RunSpec) -> bool:
        return self.result(spec) is not None

    def begin(self, spec: RunSpec, *, restart: bool = False) -> Path:
        """The run's folder, with its spec written; ``restart`` empties an interrupted run's folder first."""
        folder = self.folder(spec)
        if restart and folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(spec.to_dict(), folder / SPEC_FILE, indent=1)
        return folder

    def finish(self, spec: RunSpec, result: Mapping[str, Any]) -> dict[str, Any]:
        """Write result.json (atomically, last); non-finite numbers become null."""
        clean = json.loads(json.dumps(dict(result), default=_plain), parse_constant=lambda _: None)
        clean = _finite(clean)
        write_json_atomic(
            {"spec": spec.to_dict(), "result": clean}, self.folder(spec) / RESULT_FILE, indent=1
        )
        return clean


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
