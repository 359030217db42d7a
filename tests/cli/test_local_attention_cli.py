"""Local attention through the existing trainer: ``attnlab pretrain --attention local --window 16``."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main
from attnlab.io import load
from attnlab.nn.local_attention import LocalSelfAttention


def test_pretrain_with_local_attention_on_the_builtin_corpus(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "pretrain", "--attention", "local", "--window", "16", "--global-tokens", "1", "--output", str(out),
        "--max-steps", "3", "--batch-size", "4", "--max-length", "64", "--workers", "1", "--no-progress",
        "--eval-examples", "8", "--set", "model.hidden_size=32", "--set", "model.num_layers=2",
        "--set", "model.num_heads=2", "--set", "model.intermediate_size=64",
        "--set", "trainer.tensorboard=false",
    ]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "trained 3 steps" in printed
    config = json.loads((out / "model" / "config.json").read_text())
    config = config.get("config", config)
    assert (config["attention"], config["attention_window"], config["global_tokens"]) == ("local", 16, 1)
    model = load(out / "model")
    layers = [m for m in model.modules() if isinstance(m, LocalSelfAttention)]
    assert len(layers) == 2 and layers[0].window == 16 and layers[0].global_tokens == 1
    assert not (out / "hf" / "config.json").exists()  # HF BERT has no local attention: no export


def test_bad_window_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["pretrain", "--attention", "local", "--window", "0"])
    assert stop.value.code == 2 and "--window: expected a positive integer" in capsys.readouterr().err
    assert main(["pretrain", "--set", "model.global_tokens=-1", "--output", "unused"]) == 2
    assert "EncoderConfig.global_tokens: expected an int >= 0" in capsys.readouterr().err
