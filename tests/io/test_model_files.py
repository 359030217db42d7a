"""The frame the model families share (`attnlab.io.model_files`): written, read back, checked."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.io.format import CheckpointError
from attnlab.io.model_files import placed, read_model_directory, save_model_directory
from attnlab.manifest import IntegrityError
from attnlab.models.gpt import GPTConfig, build_gpt


def _tiny_gpt():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=30, max_positions=16, hidden_size=16, num_layers=1, num_heads=2,
                       intermediate_size=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    return build_gpt(config)


def _read(directory):
    raw = json.loads((directory / "config.json").read_text())
    return read_model_directory(
        directory, raw, "TinyGPT", lambda data, _: GPTConfig.from_dict(data), build_gpt
    )


def test_saved_model_reads_back_with_its_weights_and_tied_once(tmp_path) -> None:
    model = _tiny_gpt()
    save_model_directory(model, tmp_path, "TinyGPT", model.config.to_dict())
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architecture"] == "TinyGPT" and raw["tied"]  # the output projection stored once
    back = _read(tmp_path)
    state = model.state_dict()
    assert set(back.state_dict()) == set(state)
    assert all(torch.equal(back.state_dict()[k], v) for k, v in state.items())
    assert (tmp_path / "manifest.json").is_file()


def test_dtype_cast_on_save_and_placed_on_load(tmp_path) -> None:
    model = _tiny_gpt()
    save_model_directory(model, tmp_path, "TinyGPT", model.config.to_dict(), dtype="bfloat16")
    back = _read(tmp_path)
    assert next(back.parameters()).dtype == torch.float32  # built float32, bf16 values copied in
    placed_model = placed(back, "bfloat16", "cpu")
    assert next(placed_model.parameters()).dtype == torch.bfloat16 and not placed_model.training


def test_another_architecture_is_named_in_the_error(tmp_path) -> None:
    model = _tiny_gpt()
    save_model_directory(model, tmp_path, "OtherModel", model.config.to_dict())
    with pytest.raises(
        CheckpointError, match=r"config\.json: field 'architecture' is 'OtherModel', expected 'TinyGPT'"
    ):
        _read(tmp_path)


def test_a_changed_config_fails_the_manifest(tmp_path) -> None:
    model = _tiny_gpt()
    save_model_directory(model, tmp_path, "TinyGPT", model.config.to_dict())
    path = tmp_path / "config.json"
    path.write_text(path.read_text().replace('"num_layers": 1', '"num_layers": 2'))
    with pytest.raises(IntegrityError, match="config.json"):
        _read(tmp_path)
