"""Where a model directory is expected, what a user may have passed instead: a run directory (``RUN/model``,
``RUN/best`` inside) or a training checkpoint (``RUN/checkpoints/step-N``). `check_model_dir` names the
directory to pass; every command and the server call it before loading."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TRAINER_STATE = "trainer_state.json"  # what marks a Trainer checkpoint (attnlab.train.checkpoint)
RESULTS = "results.json"  # what `attnlab finetune` writes into its output directory


def _is_checkpoint(d: Path) -> bool:
    return (d / TRAINER_STATE).is_file() and not (d / CONFIG).is_file()


def _run_of_checkpoint(d: Path) -> Path:
    """RUN for RUN/checkpoints/step-N (or RUN/.../step-N)."""
    parent = d.parent
    return parent.parent if parent.name == "checkpoints" else parent


def check_model_dir(path: str | os.PathLike, option: str = "--model") -> Path:
    """``path`` as a directory holding ``config.json``; otherwise an error naming what to pass instead."""
    d = Path(path)
    if not d.exists():
        raise FileNotFoundError(f"{option} {d}: no such directory")
    if not d.is_dir():
        raise NotADirectoryError(f"{option} {d}: expected a model directory (config.json + {WEIGHTS})")
    if (d / CONFIG).is_file():
        return d
    if _is_checkpoint(d):
        run = _run_of_checkpoint(d)
        inside = [run / name for name in ("model", "best") if (run / name / CONFIG).is_file()]
        hint = f"pass {' or '.join(map(str, inside))}" if inside else "pass the run's RUN/model or RUN/best"
        raise ValueError(
            f"{option} {d}: a training checkpoint (optimizer and trainer state), not a model directory; "
            + hint
        )
    inside = [d / name for name in ("model", "best") if (d / name / CONFIG).is_file()]
    if inside:
        raise ValueError(
            f"{option} {d}: a run directory, not a model directory; pass {' or '.join(map(str, inside))}"
        )
    raise FileNotFoundError(
        f"{option} {d}: no {CONFIG} there; expected a model directory ({CONFIG} + {WEIGHTS})"
    )
