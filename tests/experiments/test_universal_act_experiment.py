"""experiments/universal_act.py: running parity's examples and batches, and a short run end to end."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "universal_act.py"
spec = importlib.util.spec_from_file_location("universal_act", SCRIPT)
ua = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ua)


def test_every_bit_is_labelled_with_the_parity_so_far():
    rng = random.Random(0)
    for n in (1, 6, 23):
        ids, labels = ua.example(n, rng)
        assert ids[0] == ua.BOS and labels[0] == -100 and len(ids) == len(labels) == n + 1
        bits = [i - ua.ZERO for i in ids[1:]]
        assert set(bits) <= {0, 1}
        assert [y - ua.ZERO for y in labels[1:]] == [sum(bits[: i + 1]) % 2 for i in range(n)]


def test_batches_pad_and_offset_positions_within_the_longest_test_sequence():
    rng = random.Random(1)
    for _ in range(20):
        b = ua.batch([3, 9, 1], longest=12, rng=rng, offsets=True)
        assert b["attention_mask"].sum(1).tolist() == [4, 10, 2]
        assert (b["labels"][b["attention_mask"] == 0] == -100).all()
        assert (b["input_ids"][b["attention_mask"] == 0] == ua.PAD).all()
        pos = b["positions"][0]
        assert pos[0] >= 0 and pos[-1] <= 12  # within a 12-bit example's 13 positions, 0..12
    assert ua.batch([4], longest=12, rng=rng, offsets=False)["positions"][0].tolist() == list(range(5))


def test_a_short_run_reports_accuracy_and_steps_by_length(tmp_path, monkeypatch, capsys):
    out = tmp_path / "act.json"
    argv = ["universal_act.py", "--steps", "3", "--train-n", "4", "--test-n", "6", "--curriculum", "2",
            "--eval-examples", "5", "--batch-size", "4", "--output", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    torch.manual_seed(0)
    ua.main()
    result = json.loads(out.read_text())
    assert [r["n"] for r in result["rows"]] == [2, 4, 5, 6]
    for r in result["rows"]:
        assert 0.0 <= r["accuracy"] <= 1.0 and len(r["answer_steps_all"]) == 5
        assert all(1 <= s <= 8 for s in r["answer_steps_all"])  # --test-n + 2 at most
    assert result["args"]["max_steps"] == 8 and "spearman_n_steps" in result
    assert result["selected"]["step"] == 3  # --select-every 250 > --steps: the last state is scored
    assert "steps at the last bit" in capsys.readouterr().out


def test_selection_keeps_the_state_that_scored_best_on_held_out_training_lengths(monkeypatch):
    scores = iter([(0.9, 0.5), (0.95, 0.4), (0.6, 2.0)])  # scored at steps 2, 4 and 5 (the last)
    snapshots = []

    def validate(model, args):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scores)

    monkeypatch.setattr(ua, "validate", validate)
    args = ua.argparse.Namespace(
        train_n=4,
        test_n=6,
        max_steps=8,
        no_act=False,
        halted="copy",
        halting_bias=1.0,
        ponder_weight=1e-2,
        steps=5,
        curriculum=0,
        batch_size=4,
        lr=1e-3,
        seed=0,
        select_every=2,
        log_every=100,
    )
    model, steps, _, kept = ua.train(args)
    assert steps == 5 and len(snapshots) == 3
    assert kept["step"] == 4 and kept["held_out_accuracy"] == 0.95
    final = model.state_dict()
    assert all(torch.equal(final[k], snapshots[1][k]) for k in final)  # step 4's weights, not the last
    assert not all(torch.equal(final[k], snapshots[2][k]) for k in final)


def test_bad_lengths_are_refused(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["universal_act.py", "--train-n", "30", "--test-n", "20"])
    with pytest.raises(SystemExit):
        ua.main()
