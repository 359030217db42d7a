"""experiments/universal_transformer.py: the parity task, the length-scaled depth, the held-out selection."""

from __future__ import annotations

import argparse
import importlib.util
import random
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "universal_transformer.py"
spec = importlib.util.spec_from_file_location("universal_transformer", SCRIPT)
ut = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ut)


def test_parity_examples_label_the_one_blank_with_the_bits_sum_mod_2():
    rng = random.Random(0)
    for n in (1, 5, 17):
        ids, labels = ut.example("parity", n, rng)
        bits = [i - ut.DIGIT for i in ids[:n]]
        assert set(bits) <= {0, 1}
        assert ids[n:] == [ut.SEP, ut.BLANK] and len(ids) == ut.seq_len("parity", n)
        assert labels == [-100] * (n + 1) + [ut.DIGIT + sum(bits) % 2]
        assert len(ut.aligned_positions("parity", n)) == len(ids)


def test_length_depth_is_each_examples_tokens_less_one():
    b, _ = ut.batch("parity", [1, 4, 9], random.Random(1), offsets=True)
    assert ut.length_depth(b["attention_mask"]).tolist() == [2, 5, 10]  # n + 2 tokens


def _args(**changes) -> argparse.Namespace:
    args = dict(
        norm="post",
        ut_steps=6,
        ut_depth="length",
        no_act=False,
        halting_bias=1.0,
        ponder_weight=1e-3,
        inject_input=True,
        no_timestep_signal=True,
        ut_window=1,
        ut_window_causal=True,
        lr=1e-3,
        lr_decay=True,
        batch_size=8,
        seed=0,
        no_offsets=False,
        positions="sequential",
        curriculum=4,
        select_every=2,
        log_every=100,
        eval_examples=4,
    )
    args.update(changes)
    return argparse.Namespace(**args)


def test_the_length_scaled_ut_trains_and_keeps_its_best_held_out_state():
    torch.manual_seed(0)
    result = ut.train("ut", "parity", _args(), steps=4)
    assert result["steps"] == 4
    assert result["selected"]["step"] in (2, 4)
    # depth = tokens - 1 at every test length: n + 1 steps for parity's n + 2 tokens
    assert [result[f"n{n}"]["answer_ponder_steps"] for n in (5, 40)] == [6.0, 41.0]
    model = ut.build("ut", 100, _args(), "parity")
    assert model.stack.max_steps == ut.seq_len("parity", ut.TEST_LEN) - 1
    assert model.stack.layer.self_attn.layer.causal and model.stack.layer.self_attn.layer.window == 1


def test_selection_scores_the_last_state_when_steps_are_not_a_multiple(monkeypatch):
    calls = []

    def validate(model, task, args, by_length):  # each later state scores higher
        calls.append(len(calls))
        return 0.1 * len(calls), 1.0

    monkeypatch.setattr(ut, "validate", validate)
    result = ut.train("vanilla", "parity", _args(select_every=2), steps=3)
    assert len(calls) == 2 and result["selected"]["step"] == 3  # scored at step 2 and at the last, 3


def test_without_selection_the_last_state_is_tested():
    result = ut.train("vanilla", "parity", _args(select_every=0), steps=3)
    assert "selected" not in result and result["steps"] == 3


def test_a_causal_window_without_a_window_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["universal_transformer.py", "--ut-window-causal"])
    with pytest.raises(SystemExit):
        ut.main()
    assert "--ut-window-causal needs --ut-window W" in capsys.readouterr().err
