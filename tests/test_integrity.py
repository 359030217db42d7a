"""Damaged or stale files are never used silently.

Every file kind of a training checkpoint and of a model directory is damaged three ways (one flipped bit,
a zeroed 4 KiB block, a truncation): loading names the file; ``Trainer.resume("latest")`` falls back to
the newest checkpoint that verifies, says which and why, and then ends bit-identical to the run that was
never damaged. Non-finite weights are refused by name; a broken manifest names its line.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from test_train_tiny import lm_trainer

from attnlab.cli import main
from attnlab.io import CheckpointError, load, save
from attnlab.manifest import (
    MANIFEST_NAME,
    IntegrityError,
    add_to_manifest,
    read_manifest,
    verify_directory,
    write_manifest,
)
from attnlab.models import EncoderForPreTraining, get_preset
from attnlab.tasks.finetune import save_model_dir
from attnlab.tokenizers import bert_wordpiece
from attnlab.train.checkpoint import CHECKPOINT_FILES, read_checkpoint, read_model_file, verify_checkpoint

DAMAGES = ("flip-bit", "zero-4k", "truncate")


def damage(path: Path, how: str) -> None:
    """Damage ``path`` in place; the bytes really change (a zeroed block that was already zero would not)."""
    data = bytearray(path.read_bytes())
    before = bytes(data)
    if how == "flip-bit":
        data[len(data) // 2] ^= 0x10
    elif how == "zero-4k":
        start = max(0, len(data) // 2 - 2048)
        data[start : start + 4096] = bytes(min(4096, len(data) - start))
    elif how == "truncate":
        data = data[: len(data) * 2 // 3]
    else:
        raise ValueError(how)
    assert bytes(data) != before, f"{how} did not change {path.name}"
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------- the manifest itself


def test_manifest_round_trip_and_each_damage_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 64)  # 16 KiB
    (tmp_path / "b.json").write_text('{"x": 1}\n')
    (tmp_path / ".hidden.tmp").write_text("ignored")
    manifest = write_manifest(tmp_path, run_id="abc123")
    assert sorted(manifest.files) == ["a.bin", "b.json"] and manifest.run_id == "abc123"
    assert read_manifest(tmp_path).files == manifest.files
    assert verify_directory(tmp_path).run_id == "abc123"
    for how, message in (("flip-bit", "SHA-256"), ("zero-4k", "SHA-256"), ("truncate", "truncated")):
        shutil.copy(tmp_path / "a.bin", tmp_path / "keep")
        damage(tmp_path / "a.bin", how)
        with pytest.raises(IntegrityError, match=rf"a\.bin: .*{message}"):
            verify_directory(tmp_path)
        shutil.move(tmp_path / "keep", tmp_path / "a.bin")
        verify_directory(tmp_path)
    (tmp_path / "b.json").unlink()
    with pytest.raises(IntegrityError, match=r"b\.json: missing, but .*manifest\.json lists it"):
        verify_directory(tmp_path)


def test_a_broken_manifest_names_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x")
    write_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text('{\n  "format": "attnlab-manifest",\n  "files": \n}')
    with pytest.raises(IntegrityError, match=r"manifest\.json:4:1: invalid JSON"):
        verify_directory(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text('{"format": "attnlab-manifest", "files": {"../x": {}}}')
    with pytest.raises(IntegrityError, match=r"files\['\.\./x'\]"):
        verify_directory(tmp_path)


def test_add_to_manifest_keeps_the_other_entries(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    write_manifest(tmp_path, ["a"], run_id="r1")
    (tmp_path / "b").write_text("2")
    manifest = add_to_manifest(tmp_path, ["b"])
    assert sorted(manifest.files) == ["a", "b"] and manifest.run_id == "r1"
    (tmp_path / "b").write_text("3")
    with pytest.raises(IntegrityError, match=r"[/\\]b: SHA-256"):
        verify_directory(tmp_path)


# --------------------------------------------------------------------------- training checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 6-step run saving at 2, 4, 6 (the last 2 kept) and its final weights and optimizer state."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("run")
        trainer = lm_trainer(root / "run", 6)
        trainer.train()
        final = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        optimizer = trainer.optimizer.state_dict()
        yield root / "run", final, optimizer, trainer.run_id
    finally:
        torch.set_num_threads(threads)


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def test_checkpoints_hold_a_manifest_with_the_run_id(trained) -> None:
    run, _, _, run_id = trained
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step-000004", "step-000006"]  # keep_last=2: always one to fall back to
    for name in names:
        manifest = read_manifest(run / "checkpoints" / name)
        assert sorted(manifest.files) == sorted(CHECKPOINT_FILES) and manifest.run_id == run_id
        assert verify_checkpoint(run / "checkpoints" / name) == run_id


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("file", CHECKPOINT_FILES)
def test_a_damaged_checkpoint_is_named_and_resume_falls_back(
    trained, tmp_path: Path, file: str, how: str, capsys
) -> None:
    run, final, optimizer, run_id = trained
    run = _copy(run, tmp_path)
    newest = run / "checkpoints" / "step-000006"
    damage(newest / file, how)
    with pytest.raises(IntegrityError, match=rf"step-000006[/\\]{re.escape(file)}: "):
        read_checkpoint(newest)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        named = lm_trainer(run, 6)
        with pytest.raises(IntegrityError, match=rf"step-000006[/\\]{re.escape(file)}"):
            named.resume(newest)  # a named checkpoint: no fallback
        resumed = lm_trainer(run, 6)
        assert resumed.resume("latest").name == "step-000004"
        err = capsys.readouterr().err
        assert "resuming from step-000004" in err and f"step-000006: {newest / file}" in err, err
        assert resumed.run_id == run_id and len(resumed.resume_notes) == 1
        assert resumed.train().step == 6
    finally:
        torch.set_num_threads(threads)
    for key, value in resumed.model.state_dict().items():
        assert torch.equal(value, final[key]), f"{key} differs after the fallback resume"
    assert resumed.optimizer.state_dict()["state"].keys() == optimizer["state"].keys()
    for index, state in optimizer["state"].items():
        for name, value in state.items():
            assert torch.equal(resumed.optimizer.state_dict()["state"][index][name], value), (index, name)
    verify_checkpoint(newest)  # re-saved whole at step 6


def test_when_no_checkpoint_verifies_every_reason_is_listed(trained, tmp_path: Path) -> None:
    run = _copy(trained[0], tmp_path)
    damage(run / "checkpoints" / "step-000004" / "model.safetensors", "flip-bit")
    damage(run / "checkpoints" / "step-000006" / "training_state.pt", "truncate")
    with pytest.raises(IntegrityError) as info:
        lm_trainer(run, 6).resume("latest")
    message = str(info.value)
    assert "no checkpoint under" in message
    assert "step-000006: " in message and "training_state.pt: truncated" in message
    assert "step-000004: " in message and "model.safetensors: SHA-256" in message


def test_a_checkpoint_without_manifest_is_not_trusted(trained, tmp_path: Path) -> None:
    run = _copy(trained[0], tmp_path)
    (run / "checkpoints" / "step-000006" / MANIFEST_NAME).unlink()
    with pytest.raises(IntegrityError, match=r"step-000006: no manifest\.json.*attnlab verify --update"):
        read_checkpoint(run / "checkpoints" / "step-000006")
    assert main(["verify", "--update", str(run / "checkpoints" / "step-000006")]) == 0  # trusted: sealed
    assert read_checkpoint(run / "checkpoints" / "step-000006").run_id is None


def test_a_fresh_run_refuses_another_runs_checkpoints(trained, tmp_path: Path) -> None:
    run = _copy(trained[0], tmp_path)
    with pytest.raises(ValueError, match=r"holds checkpoints of another run \(step-000004, step-000006"):
        lm_trainer(run, 2).train()


# --------------------------------------------------------------------------- model directories


def _vocab() -> dict[str, int]:
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "."]
    return {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    vocab = _vocab()
    config = get_preset("bert-tiny", vocab_size=len(vocab), max_position_embeddings=32)
    return save_model_dir(EncoderForPreTraining.from_config(config), bert_wordpiece(vocab), tmp_path / "m")


def test_a_model_directory_is_sealed_after_its_tokenizer(model_dir: Path) -> None:
    manifest = read_manifest(model_dir)
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(manifest.files)
    load(model_dir)


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("file", ["model.safetensors", "config.json"])
def test_a_damaged_model_directory_is_named(model_dir: Path, file: str, how: str) -> None:
    damage(model_dir / file, how)
    with pytest.raises(IntegrityError, match=rf"m[/\\]{re.escape(file)}: "):
        load(model_dir)


def test_non_finite_weights_are_refused_naming_directory_and_tensor(tmp_path: Path) -> None:
    config = get_preset("bert-tiny", vocab_size=13, max_position_embeddings=32)
    model = EncoderForPreTraining.from_config(config)
    name, param = next((n, p) for n, p in model.named_parameters() if n.endswith("0.layer.up.weight"))
    with torch.no_grad():
        param[1, 2] = float("nan")
    save(model, tmp_path / "m")  # a faithful copy of bad weights: the manifest verifies
    with pytest.raises(
        CheckpointError, match=rf"m \(model\.safetensors\): tensor '{name}' holds 1 non-finite"
    ):
        load(tmp_path / "m")


def test_fill_mask_on_a_damaged_model_is_an_error_not_nan(model_dir: Path, capsys) -> None:
    assert main(["predict", "fill-mask", str(model_dir), "--text", "the cat [MASK] on the mat ."]) == 0
    capsys.readouterr()
    damage(model_dir / "model.safetensors", "zero-4k")
    code = main(["predict", "fill-mask", str(model_dir), "--text", "the cat [MASK] on the mat ."])
    out, err = capsys.readouterr()
    assert code != 0 and out == "", out
    assert "model.safetensors" in err and "Traceback" not in err and "nan" not in err.lower(), err


def test_trainer_state_json_is_listed(trained) -> None:
    manifest = json.loads((trained[0] / "checkpoints" / "step-000006" / MANIFEST_NAME).read_text())
    assert manifest["format"] == "attnlab-manifest" and "trainer_state.json" in manifest["files"]


# --------------------------------------------------------------------------- translation model directories


def _seq2seq_dir(tmp_path: Path) -> Path:
    from attnlab.translation import build_model
    from attnlab.translation.config import transformer_tiny
    from attnlab.translation.data import train_joint_bpe

    tokenizer = train_joint_bpe(["a dog runs", "ein hund rennt", "two cats", "zwei katzen"], vocab_size=280)
    torch.manual_seed(0)
    model = build_model(transformer_tiny(vocab_size=tokenizer.vocab_size, d_model=32, d_ff=64, num_layers=1))
    return save(model, tmp_path / "mt", run_id="r1", tokenizer=tokenizer)


@pytest.mark.parametrize("file", ["model.safetensors", "config.json", "tokenizer.json"])
def test_a_damaged_translation_model_is_named(tmp_path: Path, file: str) -> None:

    directory = _seq2seq_dir(tmp_path)
    assert read_manifest(directory).run_id == "r1"
    load(directory)
    damage(directory / file, "flip-bit")
    with pytest.raises(IntegrityError, match=rf"mt[/\\]{re.escape(file)}: SHA-256"):
        load(directory)


def test_a_translation_model_with_nan_weights_is_refused(tmp_path: Path) -> None:

    directory = _seq2seq_dir(tmp_path)
    tensors = read_model_file(directory / "model.safetensors")
    name = sorted(k for k, v in tensors.items() if v.is_floating_point())[0]
    (directory / MANIFEST_NAME).unlink()  # as a hand-made directory: no manifest, still checked
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(directory / "model.safetensors", framework="pt") as f:
        metadata = f.metadata()  # the tied names stay as written
    raw = load_file(directory / "model.safetensors")
    raw[name] = raw[name].clone()
    raw[name].view(-1)[0] = float("inf")
    save_file(raw, directory / "model.safetensors", metadata=metadata)
    expected = rf"mt \(model\.safetensors\): tensor '{re.escape(name)}' holds 1 non-finite"
    with pytest.raises(CheckpointError, match=expected):
        load(directory)


# --------------------------------------------------------------------------- attnlab verify


def test_cli_verify_names_the_damaged_checkpoint_and_update_reseals(trained, tmp_path: Path, capsys) -> None:
    run = _copy(trained[0], tmp_path)
    (run / "data").mkdir()
    (run / "data" / MANIFEST_NAME).write_text('{"key": "a shard cache, not ours"}')  # skipped
    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == 2 and f"run id {trained[3]}" in out
    damage(run / "checkpoints" / "step-000004" / "training_state.pt", "zero-4k")
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "step-000004" in out and "training_state.pt: SHA-256" in out
    assert main(["verify", "--update", str(run / "checkpoints" / "step-000004")]) == 0
    assert "re-hashed ['training_state.pt']" in capsys.readouterr().out
    assert main(["verify", str(run)]) == 0
    assert main(["verify", str(tmp_path / "nothing-here")]) == 2  # a user error, one line
    assert "not a directory" in capsys.readouterr().err


def test_an_edited_json_file_is_named_changed_with_the_way_to_record_it(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"dropout": 0.1}\n')
    write_manifest(tmp_path)
    (tmp_path / "config.json").write_text('{\n    "dropout": 0.25\n}\n')  # re-saved by an editor
    with pytest.raises(IntegrityError, match=r"config\.json: changed since it was written .*verify --update"):
        verify_directory(tmp_path)
    (tmp_path / "config.json").write_text('{"dropout": 0.2}\n')  # the same size: only the digest differs
    with pytest.raises(IntegrityError, match=r"config\.json: SHA-256 .*verify --update"):
        verify_directory(tmp_path)
    (tmp_path / "config.json").write_text('{"drop')  # cut short: damaged, not edited
    with pytest.raises(IntegrityError, match=r"config\.json: truncated: .*damaged"):
        verify_directory(tmp_path)


def test_cli_verify_a_manifest_not_an_object_and_a_directory_without_one(tmp_path: Path, capsys) -> None:
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / MANIFEST_NAME).write_text("[]")
    assert main(["verify", str(tmp_path / "list")]) == 1
    out, err = capsys.readouterr()
    assert "manifest.json: not an attnlab manifest" in out and "1 directory checked, 1 damaged" in err
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "no attnlab manifest.json at or under it" in err
    assert "0 directories checked, 0 damaged, 1 path without a manifest" in err
