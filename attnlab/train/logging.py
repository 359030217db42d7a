"""Run logs: JSON lines (``log.jsonl``), TensorBoard events (``tensorboard/``) and ``loss_curve.png``.

Only the main process (rank 0) creates a `RunLogger`. Every record is one JSON object per line with a
``step`` key; a resumed run appends to the same file, and `read_log` keeps the last record written for
each (step, kind) so that steps replayed after an interruption are not counted twice.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

LOG_FILE = "log.jsonl"
PLOT_FILE = "loss_curve.png"


class RunLogger:
    """Append records to ``<output_dir>/log.jsonl`` and, optionally, TensorBoard."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.output_dir / LOG_FILE
        self._file = self.path.open("a", encoding="utf-8")
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # imported lazily: it is slow to import

            self._writer = SummaryWriter(log_dir=str(self.output_dir / "tensorboard"))

    def log(self, record: dict[str, Any], kind: str = "train") -> None:
        """Write ``record`` (which must hold ``step``); numbers also go to TensorBoard as ``kind/key``."""
        if "step" not in record:
            raise ValueError(f"RunLogger.log: a record needs a 'step' key, got keys {sorted(record)}")
        record = {"kind": kind, **record}
        self._file.write(json.dumps(record, sort_keys=False, allow_nan=True) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in record.items():
                if (
                    key not in ("step", "kind")
                    and isinstance(value, (int, float))
                    and not isinstance(value, bool)
                ):
                    self._writer.add_scalar(f"{kind}/{key}", value, global_step=record["step"])

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """Records of a ``log.jsonl``, the last one per (kind, step), sorted by step.

    A line cut short by a crash is skipped; any other malformed line raises naming its line number.
    """
    path = Path(path)
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                continue  # the last line was being written when the process died
            raise ValueError(f"{path}:{number}: not a JSON object ({error})") from None
        latest[(record.get("kind", "train"), int(record["step"]))] = record
    return sorted(latest.values(), key=lambda r: (r["step"], r.get("kind", "")))


def plot_loss_curve(log_path: str | Path, out_path: str | Path) -> Path | None:
    """Plot training (and evaluation) loss against step from a ``log.jsonl``; None if it holds no loss."""
    records = read_log(log_path)
    train = [(r["step"], r["loss"]) for r in records if r.get("kind") == "train" and _finite(r.get("loss"))]
    evals = [
        (r["step"], r["eval_loss"])
        for r in records
        if r.get("kind") == "eval" and _finite(r.get("eval_loss"))
    ]
    if not train and not evals:
        return None
    # The Agg canvas directly, not pyplot: no display needed and no global backend switched under the user.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1.2)
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss", linewidth=1.2, markersize=3)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=120)
    return out_path


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
