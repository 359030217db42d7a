"""experiments/learning_curve.py: time-to-accuracy, the curve read from a run's log, run_mlm's grouping."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "learning_curve.py"
spec = importlib.util.spec_from_file_location("learning_curve", SCRIPT)
lc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lc)


def test_time_to_accuracy_interpolates_between_the_evaluations_around_the_crossing():
    curve = [(30.0, 0.10), (60.0, 0.20), (90.0, 0.40)]
    assert lc.time_to_accuracy(curve, 0.30) == pytest.approx(75.0)
    assert lc.time_to_accuracy(curve, 0.20) == 60.0  # reached exactly at an evaluation
    assert lc.time_to_accuracy(list(reversed(curve)), 0.30) == pytest.approx(75.0)  # order of the points


def test_time_to_accuracy_takes_the_first_crossing_and_says_when_there_is_none():
    curve = [(0.0, 0.0), (10.0, 0.5), (20.0, 0.3), (30.0, 0.6)]
    assert lc.time_to_accuracy(curve, 0.4) == pytest.approx(8.0)
    assert lc.time_to_accuracy(curve, 0.7) is None
    assert lc.time_to_accuracy([(12.0, 0.5), (24.0, 0.6)], 0.4) == 12.0  # first evaluation: an upper bound
    assert lc.time_to_accuracy([], 0.1) is None


def test_accuracy_at_is_linear_inside_the_evaluated_range_only():
    curve = [(0.0, 0.0), (60.0, 0.3), (120.0, 0.4)]
    assert lc.accuracy_at(curve, 30.0) == pytest.approx(0.15)
    assert lc.accuracy_at(curve, 120.0) == pytest.approx(0.4)
    assert lc.accuracy_at(curve, 121.0) is None
    assert lc.accuracy_at(curve[1:], 0.0) is None


def _write_log(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_attnlab_curve_adds_the_evaluation_after_a_time_limit_stop(tmp_path):
    _write_log(
        tmp_path / "log.jsonl",
        [
            {"kind": "train", "step": 10, "loss": 7.0, "train_seconds": 5.0},
            {"kind": "eval", "step": 10, "eval_mlm_accuracy": 0.1, "train_seconds": 5.5},
            {"kind": "train", "step": 17, "loss": 6.0, "train_seconds": 9.0},  # logged where it stopped
        ],
    )
    run = {"steps": 17, "eval": {"eval_mlm_accuracy": 0.2, "eval_mlm_tokens": 99.0}}
    curve, last = lc.read_attnlab_curve(tmp_path, run)
    assert curve == [(5.5, 0.1), (9.0, 0.2)]
    assert last["eval_mlm_tokens"] == 99.0
    curve, _ = lc.read_attnlab_curve(tmp_path, {"steps": 10, "eval": {"eval_mlm_accuracy": 0.1}})
    assert curve == [(5.5, 0.1)]  # the run's last evaluation is already in the log


def test_attnlab_curve_shifts_each_length_stage_by_the_ones_before(tmp_path):
    _write_log(
        tmp_path / "stage-1" / "log.jsonl",
        [
            {"kind": "eval", "step": 5, "eval_mlm_accuracy": 0.1, "train_seconds": 4.0},
            {"kind": "train", "step": 10, "loss": 1.0, "train_seconds": 8.0},
            {"kind": "eval", "step": 10, "eval_mlm_accuracy": 0.2, "train_seconds": 8.0},
        ],
    )
    _write_log(
        tmp_path / "stage-2" / "log.jsonl",
        [{"kind": "eval", "step": 12, "eval_mlm_accuracy": 0.3, "train_seconds": 3.0}],
    )
    curve, last = lc.read_attnlab_curve(tmp_path, {"steps": 12, "eval": {"eval_mlm_accuracy": 0.3}})
    assert curve == [(4.0, 0.1), (8.0, 0.2), (11.0, 0.3)]
    assert last["step"] == 12


def test_grouped_blocks_frame_documents_then_cut_like_run_mlm():
    cls, sep = 2, 3
    shard = SimpleNamespace(
        ids=np.array([10, 11, 12, 13, 14, 15, 16], dtype=np.uint16),
        sent_offsets=np.array([0, 2, 3, 7]),  # sentences [10 11] [12] [13 14 15 16]
        doc_offsets=np.array([0, 2, 3]),  # documents: sentences 0-1, sentence 2
    )
    blocks = lc.grouped_blocks(SimpleNamespace(shards=[shard, shard]), cls, sep, block_size=4)
    flat = [2, 10, 11, 12, 3, 2, 13, 14, 15, 16, 3]
    assert blocks.tolist() == np.array((flat + flat)[:20]).reshape(5, 4).tolist()  # 22 tokens: 2 dropped
    with pytest.raises(ValueError, match="less than one block"):
        lc.grouped_blocks(SimpleNamespace(shards=[shard]), cls, sep, block_size=64)
