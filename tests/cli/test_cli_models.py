"""``attnlab info`` and ``attnlab convert``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.io import load, save
from attnlab.io.hf_encoders import load_hf
from attnlab.models import ARCHITECTURES, EncoderConfig, count_parameters, get_preset

TINY = EncoderConfig(
    vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37, max_position_embeddings=64
)


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_preset_prints_config_and_the_papers_parameter_count(capsys) -> None:
    code, out, _ = _run(capsys, "info", "bert-base-uncased")
    assert code == 0
    assert "source        preset bert-base-uncased" in out
    assert "hidden_size              768" in out
    # 110M in Devlin et al. (2019); the exact count of the encoder with pooler:
    assert "encoder parameters  109,482,240" in out
    assert count_parameters(get_preset("bert-base-uncased")) == 109_482_240


def test_info_json(capsys) -> None:
    code, out, _ = _run(capsys, "info", "albert-base", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["config"]["sharing"] == "all" and info["config"]["embedding_size"] == 128
    assert info["encoder_parameters"] == count_parameters(get_preset("albert-base"))


def test_info_unknown_preset_lists_valid_ones(capsys) -> None:
    code, _, err = _run(capsys, "info", "bert-huge")
    assert code == 1
    assert "unknown preset 'bert-huge'" in err and "bert-base-uncased" in err


def test_info_attnlab_checkpoint(tmp_path: Path, capsys) -> None:
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(TINY, pair_head=True)
    save(model, tmp_path)
    code, out, _ = _run(capsys, "info", str(tmp_path))
    assert code == 0
    assert 'EncoderForPreTraining {"pair_head": true' in out
    unique = sum(p.numel() for p in model.parameters())  # tied decoder counted once
    assert f"model parameters    {unique:,}" in out
    assert f"encoder parameters  {count_parameters(TINY):,}" in out


def test_convert_round_trip_through_hf(tmp_path: Path, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
    )
    hf_model = transformers.BertForPreTraining(hf_config).eval()
    hf_model.save_pretrained(tmp_path / "hf")

    code, out, _ = _run(capsys, "info", str(tmp_path / "hf"))
    assert code == 0 and "BertForPreTraining (weights present; attnlab EncoderForPreTraining)" in out

    code, out, _ = _run(capsys, "convert", str(tmp_path / "hf"), str(tmp_path / "ours"))
    assert code == 0 and "-> attnlab" in out
    ours = load(tmp_path / "ours")
    assert ours.pair_head is not None

    code, out, _ = _run(
        capsys, "convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--dtype", "bfloat16"
    )
    assert code == 0 and "-> hf" in out
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"
    ]
    back = load_hf(tmp_path / "back")
    assert back.encoder.embeddings.word.weight.dtype == torch.bfloat16
    expected = hf_model.bert.embeddings.word_embeddings.weight.to(torch.bfloat16)
    assert torch.equal(back.encoder.embeddings.word.weight, expected)

    # --to overrides detection: HF -> HF keeps the layout, attnlab -> attnlab re-saves.
    code, _, _ = _run(capsys, "convert", str(tmp_path / "back"), str(tmp_path / "hf2"), "--to", "hf")
    assert code == 0 and json.loads((tmp_path / "hf2" / "config.json").read_text())["model_type"] == "bert"
    code, _, _ = _run(
        capsys, "convert", str(tmp_path / "hf"), str(tmp_path / "enc"), "--architecture", "Encoder"
    )
    assert code == 0 and type(load(tmp_path / "enc")).__name__ == "Encoder"


def test_convert_errors_are_one_line_messages(tmp_path: Path, capsys) -> None:
    code, _, err = _run(capsys, "convert", str(tmp_path / "missing"), str(tmp_path / "out"))
    assert code == 1 and "no such checkpoint directory" in err
    config = EncoderConfig(**{**TINY.to_dict(), "sharing": "ffn"})
    save(ARCHITECTURES["Encoder"].from_config(config), tmp_path / "ffn")
    code, _, err = _run(capsys, "convert", str(tmp_path / "ffn"), str(tmp_path / "out"))
    assert code == 1 and "sharing='ffn' has no HF counterpart" in err
    code, _, err = _run(
        capsys, "convert", str(tmp_path / "ffn"), str(tmp_path / "o"), "--to", "attnlab", "--family", "bert"
    )
    assert code == 1 and "--family applies to exports to HF" in err
