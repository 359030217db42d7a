"""attnlab checkpoints: round trips, tied weights, dtypes, atomic writes and the errors on bad input."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from attnlab.io import CheckpointError, load, save
from attnlab.io.checkpoint import explain_shape, read_checkpoint_config
from attnlab.io.format import read_safetensors, tied_aliases
from attnlab.models import ARCHITECTURES, EncoderConfig, get_preset

TINY = EncoderConfig(
    vocab_size=99,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout=0.0,
    attention_dropout=0.0,
)

MODELS = {
    "encoder": ("Encoder", TINY, {}),
    "mlm": ("EncoderForPreTraining", TINY, {}),
    "mlm+nsp": ("EncoderForPreTraining", TINY, {"pair_head": True}),
    "albert-sop": (
        "EncoderForPreTraining",
        dataclasses.replace(TINY, embedding_size=16, sharing="all", activation="gelu_tanh"),
        {"pair_head": True},
    ),
    "shared-attention": ("Encoder", dataclasses.replace(TINY, sharing="attention"), {}),
    "shared-ffn-pre-ln": ("Encoder", dataclasses.replace(TINY, sharing="ffn", norm_first=True), {}),
    "electra-discriminator": ("ReplacedTokenDetection", dataclasses.replace(TINY, add_pooler=False), {}),
    "roberta-offset": (
        "EncoderForPreTraining",
        dataclasses.replace(TINY, pad_token_id=1, position_offset=2, type_vocab_size=1),
        {},
    ),
    "sinusoidal-no-segments": (
        "Encoder",
        dataclasses.replace(TINY, position_embedding="sinusoidal", type_vocab_size=0, add_pooler=False),
        {},
    ),
}


def _save_unsealed(model, directory: Path) -> Path:
    """A directory edited by hand (or from an older attnlab): no manifest, attnlab's tensor names (the
    layout of models without a HF form); the loader's own checks speak."""
    save(model, directory, hf_layout=False)
    (directory / "manifest.json").unlink()
    return directory


def _build(name: str) -> torch.nn.Module:
    architecture, config, options = MODELS[name]
    torch.manual_seed(0)
    model = ARCHITECTURES[architecture].from_config(config, **options).eval()
    with torch.no_grad():  # move every parameter off its initial value (LayerNorm 1/0, biases 0)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _outputs(model: torch.nn.Module) -> list[torch.Tensor]:
    with torch.inference_mode():
        out = model(**_batch())
    return [v for v in vars(out).values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip_is_exact(name: str, tmp_path: Path) -> None:
    model = _build(name)
    save(model, tmp_path)
    loaded = load(tmp_path)
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    assert not loaded.training
    expected, got = model.state_dict(), loaded.state_dict()
    assert set(expected) == set(got)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    for a, b in zip(_outputs(model), _outputs(loaded)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_every_registered_architecture_round_trips(architecture: str, tmp_path: Path) -> None:
    """Whatever attnlab.models registers (task heads included) saves and loads with default options."""
    model = ARCHITECTURES[architecture].from_config(TINY).eval()
    save(model, tmp_path)
    loaded = load(tmp_path)
    assert type(loaded) is type(model)
    expected, got = model.state_dict(), loaded.state_dict()
    assert set(expected) == set(got) and all(torch.equal(expected[k], got[k]) for k in expected)


def test_config_json_names_architecture_options_and_config(tmp_path: Path) -> None:
    save(_build("mlm+nsp"), tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["format"] == "attnlab"
    assert raw["architecture"] == "EncoderForPreTraining"
    assert raw["options"]["pair_head"] is True
    assert raw["config"] == TINY.to_dict()
    assert raw["dtype"] == "float32"
    assert raw["tied"] == {"mlm_head.decoder.weight": "encoder.embeddings.word.weight"}


def test_tied_weights_saved_once_and_retied(tmp_path: Path) -> None:
    model = _build("mlm")
    save(model, tmp_path, hf_layout=False)
    stored = load_file(tmp_path / "model.safetensors")
    assert "mlm_head.decoder.weight" not in stored
    assert "encoder.embeddings.word.weight" in stored
    loaded = load(tmp_path)
    assert loaded.mlm_head.decoder.weight is loaded.encoder.embeddings.word.weight
    assert tied_aliases(loaded) == {"mlm_head.decoder.weight": "encoder.embeddings.word.weight"}


def test_untied_model_round_trips_untied(tmp_path: Path) -> None:
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(TINY, tie_weights=False)
    save(model, tmp_path, hf_layout=False)
    assert "mlm_head.decoder.weight" in load_file(tmp_path / "model.safetensors")
    loaded = load(tmp_path)
    assert loaded.mlm_head.decoder.weight is not loaded.encoder.embeddings.word.weight
    assert torch.equal(loaded.mlm_head.decoder.weight, model.mlm_head.decoder.weight)


def test_shared_layers_stay_shared(tmp_path: Path) -> None:
    model = _build("albert-sop")
    save(model, tmp_path)
    loaded = load(tmp_path)
    assert len(loaded.encoder.attention) == 1 and len(loaded.encoder.feed_forward) == 1
    assert loaded.encoder.layer_plan == ((0, 0), (0, 0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dtype_on_save_and_on_load(dtype: torch.dtype, tmp_path: Path) -> None:
    model = _build("mlm+nsp")
    name = str(dtype).removeprefix("torch.")
    save(model, tmp_path, dtype=name)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == name
    assert {t.dtype for t in load_file(tmp_path / "model.safetensors").values()} == {dtype}
    loaded = load(tmp_path)  # keeps the stored dtype
    assert {p.dtype for p in loaded.parameters()} == {dtype}
    assert torch.equal(loaded.encoder.embeddings.word.weight, model.encoder.embeddings.word.weight.to(dtype))
    as_float = load(tmp_path, dtype="float32")
    assert {p.dtype for p in as_float.parameters()} == {torch.float32}
    assert as_float.mlm_head.decoder.weight is as_float.encoder.embeddings.word.weight


def test_save_leaves_no_temporary_files_and_overwrites(tmp_path: Path) -> None:
    save(_build("encoder"), tmp_path)
    model = _build("mlm")
    save(model, tmp_path)  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == ["config.json", "manifest.json", "model.safetensors"]
    assert type(load(tmp_path)).__name__ == "EncoderForPreTraining"


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(_build("encoder"), tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("attnlab.io.format.save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        save(_build("encoder"), tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["config.json", "manifest.json", "model.safetensors"]


def test_unregistered_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no EncoderConfig|not a registered architecture"):
        save(torch.nn.Linear(2, 2), tmp_path)


# ---------------------------------------------------------------------------------------------------
# errors on load


def test_missing_directory_and_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        load(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json: missing"):
        load(tmp_path)
    save(_build("encoder"), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors: missing weights file"):
        load(tmp_path)


def test_pickle_instead_of_safetensors_is_named_and_not_loaded(tmp_path: Path) -> None:
    model = _build("encoder")
    save(model, tmp_path)
    torch.save(model.state_dict(), tmp_path / "model.safetensors")
    with pytest.raises(
        CheckpointError, match="found a zip archive as written by torch.save; attnlab never unpickles"
    ):
        load(tmp_path)


def test_pytorch_bin_alone_is_pointed_out(tmp_path: Path) -> None:
    model = _build("encoder")
    save(model, tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match=r"found pytorch_model\.bin: attnlab never unpickles"):
        load(tmp_path)


@pytest.mark.parametrize("keep", [0, 5, 100, -10])
def test_truncated_or_corrupt_safetensors_names_the_file(keep: int, tmp_path: Path) -> None:
    _save_unsealed(_build("encoder"), tmp_path)
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:keep])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: not a valid safetensors file"):
        load(tmp_path)


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    _save_unsealed(_build("encoder"), tmp_path)
    (tmp_path / "config.json").write_text('{\n  "format": "attnlab",\n  "architecture": \n}')
    with pytest.raises(CheckpointError, match=r"config\.json:4:1: invalid JSON"):
        load(tmp_path)


def test_unknown_config_key_and_bad_value(tmp_path: Path) -> None:
    _save_unsealed(_build("encoder"), tmp_path)
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw["config"]["num_experts"] = 8
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"field 'config'.*num_experts"):
        load(tmp_path)
    del raw["config"]["num_experts"]
    raw["config"]["activation"] = "swish"
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"activation.*gelu"):
        load(tmp_path)


def test_unknown_architecture_lists_the_valid_ones(tmp_path: Path) -> None:
    _save_unsealed(_build("encoder"), tmp_path)
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw["architecture"] = "Decoder"
    path.write_text(json.dumps(raw))
    with pytest.raises(
        CheckpointError, match=r"unknown architecture 'Decoder'; valid: Encoder, .*EncoderForPreTraining"
    ):
        load(tmp_path)


def test_hf_directory_is_recognised(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match="HF transformers checkpoint.*attnlab.io.load"):
        read_checkpoint_config(tmp_path)  # attnlab's encoder config, for callers that need one
    with pytest.raises(FileNotFoundError, match="no weights found"):
        load(tmp_path)  # read as the HF directory it is


def test_missing_and_unexpected_keys_are_listed_with_the_architecture(tmp_path: Path) -> None:
    _save_unsealed(_build("mlm+nsp"), tmp_path)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    del tensors["pair_head.classifier.weight"]
    tensors["encoder.attention.7.norm.weight"] = torch.ones(32)
    save_file(tensors, path)
    with pytest.raises(CheckpointError) as info:
        load(tmp_path)
    message = str(info.value)
    assert "missing keys that EncoderForPreTraining expects: pair_head.classifier.weight" in message
    assert (
        "unexpected keys that EncoderForPreTraining does not have: encoder.attention.7.norm.weight" in message
    )
    assert "num_layers = 2" in message and "sharing = 'none'" in message


def test_options_disagreeing_with_weights(tmp_path: Path) -> None:
    """config.json says no pair head, the weights have one: the unexpected keys are named."""
    _save_unsealed(_build("mlm+nsp"), tmp_path)
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw["options"]["pair_head"] = False
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"unexpected keys.*pair_head\.classifier\.bias"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "vocab_size",
            100,
            "embeddings.word.weight: checkpoint shape (99, 32) but the config builds (100, 32) "
            "(dim 0: config vocab_size = 100, checkpoint has 99)",
        ),
        (
            "intermediate_size",
            40,
            "feed_forward.0.layer.up.weight: checkpoint shape (37, 32) but the config "
            "builds (40, 32) (dim 0: config intermediate_size = 40, checkpoint has 37)",
        ),
        ("max_position_embeddings", 128, "embeddings.position.weight: checkpoint shape (64, 32)"),
        (
            "embedding_size",
            16,
            "dim 1: config embedding_size (or hidden_size when embedding_size is None) = 16",
        ),
    ],
)
def test_shape_mismatch_names_key_shapes_and_field(
    field: str, value: int, expected: str, tmp_path: Path
) -> None:
    _save_unsealed(_build("encoder"), tmp_path)
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw["config"][field] = value
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as info:
        load(tmp_path)
    assert expected in str(info.value)
    assert "model.safetensors" in str(info.value)


def test_tied_alias_with_different_values_is_refused(tmp_path: Path) -> None:
    _save_unsealed(_build("mlm"), tmp_path)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    tensors["mlm_head.decoder.weight"] = torch.zeros_like(tensors["encoder.embeddings.word.weight"])
    save_file(tensors, path)
    with pytest.raises(
        CheckpointError, match="mlm_head.decoder.weight is tied to encoder.embeddings.word.weight"
    ):
        load(tmp_path)


def test_explain_shape_without_a_table_entry_guesses_by_value() -> None:
    text = explain_shape("classifier.weight", (3, 32), (3, 64), TINY)
    assert "dim 1: config hidden_size = 32, checkpoint has 64" in text


def test_explain_shape_mlm_head_norm_blames_the_embedding_size() -> None:
    config = dataclasses.replace(TINY, embedding_size=16)
    text = explain_shape("mlm_head.norm.weight", (16,), (32,), config)
    expected = "config embedding_size (or hidden_size when embedding_size is None) = 16, checkpoint has 32"
    assert expected in text


def test_read_safetensors_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such weights file"):
        read_safetensors(tmp_path / "x.safetensors")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    heads=st.sampled_from([1, 2, 4]),
    layers=st.integers(1, 3),
    embedding=st.sampled_from([None, 8]),
    sharing=st.sampled_from(["none", "all", "attention", "ffn"]),
    norm_first=st.booleans(),
    pooler=st.booleans(),
    architecture=st.sampled_from(["Encoder", "EncoderForPreTraining", "ReplacedTokenDetection"]),
)
def test_any_config_round_trips(
    tmp_path_factory, heads, layers, embedding, sharing, norm_first, pooler, architecture
) -> None:
    config = EncoderConfig(
        vocab_size=31,
        hidden_size=16,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=20,
        embedding_size=embedding,
        max_position_embeddings=16,
        sharing=sharing,
        norm_first=norm_first,
        add_pooler=pooler,
    )
    options = {"pair_head": pooler} if architecture == "EncoderForPreTraining" else {}
    model = ARCHITECTURES[architecture].from_config(config, **options).eval()
    directory = tmp_path_factory.mktemp("ckpt")
    save(model, directory)
    loaded = load(directory)
    assert loaded.config == config
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key


@pytest.mark.slow
def test_bert_base_preset_round_trip_in_bfloat16(tmp_path: Path) -> None:
    """A full-size model: 110M parameters stored in bfloat16 (about 220 MB on disk)."""
    model = ARCHITECTURES["Encoder"].from_config(get_preset("bert-base-uncased"))
    save(model, tmp_path, dtype="bfloat16")
    size = (tmp_path / "model.safetensors").stat().st_size
    assert 2 * 109_482_240 <= size < 2 * 109_482_240 + 100_000
    loaded = load(tmp_path, dtype="float32")
    assert torch.equal(loaded.pooler.dense.weight, model.pooler.dense.weight.to(torch.bfloat16).float())
