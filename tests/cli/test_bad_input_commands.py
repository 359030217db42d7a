"""Bad input to ``translate``, ``translate-train`` and ``pretrain`` is one clear error, and a rejected
``--overwrite`` run loses nothing: its inputs are checked before the earlier run is removed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from attnlab.cli import main

EN = ["a dog runs .", "the cat sleeps .", "two men play .", "a woman sings ."] * 4
DE = ["ein hund rennt .", "die katze schläft .", "zwei männer spielen .", "eine frau singt ."] * 4

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# --------------------------------------------------------------------------- translate


@pytest.mark.parametrize("pre_ln", [False, True], ids=["marian-layout", "attnlab-layout"])
def test_translate_a_config_that_does_not_fit_the_weights_names_the_shapes(tmp_path, capsys, pre_ln) -> None:
    from attnlab.io import save
    from attnlab.translation.config import preset
    from attnlab.translation.data import special_ids, train_joint_bpe
    from attnlab.translation.model import build_model

    bpe = train_joint_bpe(EN + DE, 300)
    ids = special_ids(bpe)
    config = preset(
        "transformer-tiny", num_layers=1, d_model=64, d_ff=48, num_heads=2, vocab_size=bpe.vocab_size,
        pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=ids["eos"], norm_first=pre_ln,
    )  # fmt: skip
    torch.manual_seed(0)
    model_dir = save(build_model(config), tmp_path / "model", tokenizer=bpe)
    (model_dir / "manifest.json").unlink()  # a hand-made directory: nothing records the config's bytes
    text = (model_dir / "config.json").read_text()
    assert '"d_model": 64' in text
    (model_dir / "config.json").write_text(text.replace('"d_model": 64', '"d_model": 32'))  # every copy
    code, err = _run(["translate", model_dir, "--input", _lines(tmp_path / "in.en", ["a dog"])], capsys)
    assert code == 2
    assert "model.safetensors (with config.json): the weights do not fit Seq2Seq" in err
    assert "checkpoint shape" in err and "config d_model" in err and "more keys of other shapes" in err
    assert "Error(s) in loading state_dict" not in err and len(err.splitlines()) < 15


# --------------------------------------------------------------------------- translate-train --overwrite


def _translate_train(tmp_path: Path, *extra: str) -> list[str]:
    src, tgt = _lines(tmp_path / "a.en", EN), _lines(tmp_path / "a.de", DE)
    return [
        "translate-train", "--src-train", src, "--tgt-train", tgt, "--output-dir", tmp_path / "out",
        "--preset", "transformer-tiny", "--layers", "1", "--d-model", "32", "--d-ff", "64", "--heads", "2",
        "--vocab-size", "300", "--max-steps", "1", "--save-every", "1", "--warmup", "1", "--max-tokens", "64",
        "--no-progress", "--threads", "1", "--device", "cpu", *extra,
    ]  # fmt: skip


def test_translate_train_overwrite_with_bad_inputs_keeps_the_earlier_run(tmp_path, capsys) -> None:
    assert main([str(a) for a in _translate_train(tmp_path)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    code, err = _run(_translate_train(tmp_path, "--overwrite", "--max-length", "2"), capsys)
    assert code == 2 and "a.en / " in err and "max_length=2" in err
    code, err = _run(_translate_train(tmp_path, "--overwrite", "--vocab-size", "5"), capsys)
    assert code == 2 and "--vocab-size 5: expected at least 261" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_train_translation_with_a_bad_vocab_size_claims_no_directory(tmp_path) -> None:
    """Library callers too: nothing (no run.json to block the next attempt) before the BPE is learned."""
    from attnlab.translation.recipe import train_translation

    src, tgt = _lines(tmp_path / "a.en", EN), _lines(tmp_path / "a.de", DE)
    with pytest.raises(ValueError, match="vocab_size=5 leaves no room"):
        train_translation(src, tgt, tmp_path / "out", vocab_size=5, log=lambda m: None)
    assert not (tmp_path / "out").exists()


def test_translate_train_with_no_held_out_pair_that_fits_writes_nothing(tmp_path, capsys) -> None:
    """Held-out pairs are encoded with the new BPE before the output directory is claimed: when none fits
    --max-length, the error names the held-out files and no run.json is left to block the next attempt."""
    long_en = _lines(tmp_path / "v.en", [" ".join(["a dog runs ."] * 12)] * 2)
    long_de = _lines(tmp_path / "v.de", [" ".join(["ein hund rennt ."] * 12)] * 2)
    argv = _translate_train(tmp_path, "--src-valid", long_en, "--tgt-valid", long_de, "--max-length", "24")
    code, err = _run(argv, capsys)
    assert code == 2 and "v.en / " in err and "max_length=24" in err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- pretrain --overwrite


def test_pretrain_overwrite_with_a_bad_tokenizer_keeps_the_earlier_run(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    for name in ("train", "model", "hf", "tokenizer"):  # what an earlier run left
        (out / name).mkdir(parents=True)
        (out / name / "kept.txt").write_text("earlier run")
    (out / "run.json").write_text(json.dumps({"command": "pretrain", "run_id": "earlier"}))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    (tmp_path / "empty").mkdir()
    corpus = _lines(tmp_path / "c.txt", EN)
    argv = ["pretrain", "--corpus", corpus, "--output", out, "--overwrite", "--max-steps", "1"]
    code, err = _run([*argv, "--tokenizer", tmp_path / "empty"], capsys)
    assert code != 0 and f"{tmp_path / 'empty'}: no tokenizer files found" in err
    code, err = _run([*argv, "--tokenizer", corpus], capsys)
    assert code != 0 and "--tokenizer expects a tokenizer directory" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    shutil.rmtree(out)


def test_causal_corpus_that_is_not_utf8_names_the_file_and_line(tmp_path):
    """`attnlab pretrain --recipe gpt --format text` reads files as written; a Latin-1 byte used to become
    U+FFFD silently (and be learnt as a symbol)."""
    from attnlab.pretraining.causal_lm import causal_documents

    path = tmp_path / "book.txt"
    path.write_bytes("first line\nun caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"book\.txt:2: not valid UTF-8 \(byte 17"):
        list(causal_documents([path], "text")())


@pytest.mark.parametrize("command", [["translate-train"], ["translate", "model"]])
def test_translate_device_is_checked_when_parsed(command, capsys):
    from attnlab.cli import build_parser

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([*command, "--device", "foo"])
    assert stop.value.code == 2
    assert "foo: not a device" in capsys.readouterr().err
