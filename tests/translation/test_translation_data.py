"""Parallel text: bad input, joint BPE with byte fallback, token-count batching bounds, resumable loader;
and the `attnlab translate-train / translate / bleu` commands end to end on a tiny corpus."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import DATA as SHARED_DATA
from shared_data import require

from attnlab.translation.data import (
    TokenBatchLoader,
    encode_pairs,
    read_parallel,
    special_ids,
    token_batches,
    train_joint_bpe,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


DATA = SHARED_DATA / "multi30k"

EN = [
    "a dog runs .",
    "two men play football .",
    "a woman reads a book .",
    "the cat sleeps .",
    "a boy jumps .",
]
DE = ["ein hund rennt .", "zwei männer spielen fußball .", "eine frau liest ein buch .",
      "die katze schläft .", "ein junge springt ."]  # fmt: skip


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- reading


def test_length_mismatch_names_both_files(tmp_path) -> None:
    src = write(tmp_path / "a.en", EN)
    tgt = write(tmp_path / "a.de", DE[:3])
    with pytest.raises(ValueError) as err:
        read_parallel(src, tgt)
    msg = str(err.value)
    assert str(src) in msg and str(tgt) in msg and "5 lines" in msg and "has 3" in msg


def test_empty_lines_skipped_and_counted(tmp_path) -> None:
    src = write(tmp_path / "a.en", ["a dog", "", "a cat", "  ", "a man"])
    tgt = write(tmp_path / "a.de", ["ein hund", "nichts", "", "x", "ein mann"])
    data = read_parallel(src, tgt)
    assert data.source == ["a dog", "a man"] and data.target == ["ein hund", "ein mann"]
    assert data.lines == 5 and data.skipped_empty == 3 and data.empty_lines == [2, 3, 4]
    assert "3 skipped" in data.report()


def test_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.en"):
        read_parallel(tmp_path / "nope.en", tmp_path / "nope.de")


def test_long_pairs_filtered_and_counted(tmp_path) -> None:
    tok = train_joint_bpe(EN + DE, vocab_size=320)
    src = write(tmp_path / "a.en", [*EN, "a " * 40])
    tgt = write(tmp_path / "a.de", [*DE, "kurz"])
    encoded = encode_pairs(tok, read_parallel(src, tgt), max_length=20)
    assert len(encoded) == 5 and encoded.too_long == 1
    eos = special_ids(tok)["eos"]
    assert all(s[-1] == eos and t[-1] == eos for s, t in encoded.examples)


# ----------------------------------------------------------------------------------------------- BPE


def test_joint_bpe_layout_and_unseen_characters() -> None:
    tok = train_joint_bpe(EN + DE, vocab_size=420)
    assert special_ids(tok) == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert tok.vocab_size <= 420
    text = "Ein Hund — 犬 🐕 läuft."  # capitals, a dash, CJK and an emoji never seen in training
    enc = tok.encode(text, add_special_tokens=False)
    assert special_ids(tok)["unk"] not in enc.ids  # byte fallback instead of <unk>
    assert tok.decode(enc.ids) == text  # detokenised exactly
    # joint: words of both languages are single pieces
    assert tok.encode("hund", add_special_tokens=False).tokens == ["▁hund"]
    assert tok.encode("dog", add_special_tokens=False).tokens == ["▁dog"]


def test_bpe_vocab_too_small() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        train_joint_bpe(EN, vocab_size=100)


# ----------------------------------------------------------------------------------------------- batching

lengths_strategy = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_strategy, max_tokens=st.integers(1, 400))
def test_token_batches_bounds(lengths: list[tuple[int, int]], max_tokens: int) -> None:
    batches = token_batches(lengths, max_tokens)
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(len(lengths)))  # every pair exactly once
    for b in batches:
        padded_src = len(b) * max(lengths[i][0] for i in b)
        padded_tgt = len(b) * max(lengths[i][1] for i in b)
        assert (padded_src <= max_tokens and padded_tgt <= max_tokens) or len(b) == 1
    # batches are contiguous in length order: the sorted order read batch after batch is sorted
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)


def test_token_batches_fill_up() -> None:
    # 10 pairs of length 10 with max_tokens 35: 3 per batch (30 <= 35, 40 > 35)
    assert [len(b) for b in token_batches([(10, 10)] * 10, 35)] == [3, 3, 3, 1]
    # the target side binds as well
    assert [len(b) for b in token_batches([(2, 10)] * 4, 20)] == [2, 2]


def _examples(n: int = 50):
    return [([5] * (1 + i % 7) + [3], [6] * (1 + i % 5) + [3]) for i in range(n)]


def test_loader_batches_and_collate() -> None:
    loader = TokenBatchLoader(_examples(), max_tokens=24, pad_id=0, start_id=2, seed=1)
    batch = next(iter(loader))
    b, s = batch["input_ids"].shape
    assert b * s <= 24 and batch["attention_mask"].sum() == (batch["input_ids"] != 0).sum()
    labels, dec = batch["labels"], batch["decoder_input_ids"]
    assert (dec[:, 0] == 2).all()
    real = labels != -100
    assert (dec[:, 1:][real[:, 1:]] == labels[:, :-1][real[:, 1:]]).all()  # teacher forcing: shifted labels


def test_loader_resumes_exactly_and_reshuffles() -> None:
    full = TokenBatchLoader(_examples(), max_tokens=24, pad_id=0, start_id=2, seed=3)
    n = len(full)
    epoch0 = [b["input_ids"].tolist() for b in full]
    epoch1 = [b["input_ids"].tolist() for b in full]
    assert epoch0 != epoch1 and sorted(map(str, epoch0)) == sorted(map(str, epoch1))
    partial = TokenBatchLoader(_examples(), max_tokens=24, pad_id=0, start_id=2, seed=3)
    it = iter(partial)
    for _ in range(n // 2):
        next(it)
    state = partial.state_dict()
    resumed = TokenBatchLoader(_examples(), max_tokens=24, pad_id=0, start_id=2, seed=3)
    resumed.load_state_dict(state)
    assert [b["input_ids"].tolist() for b in resumed] == epoch0[n // 2 :]
    other = TokenBatchLoader(_examples(), max_tokens=24, pad_id=0, start_id=2, seed=4)
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(state)


def test_loader_rejects_no_examples() -> None:
    with pytest.raises(ValueError, match="no examples"):
        TokenBatchLoader([], 100, 0, 2)


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_end_to_end(tmp_path, monkeypatch, capsys) -> None:
    from attnlab.cli import main

    data = tmp_path / "data"
    data.mkdir()
    write(data / "train.en", EN * 4 + [""])  # one empty line: skipped and counted
    write(data / "train.de", DE * 4 + ["leer"])
    write(data / "val.en", EN[:2])
    write(data / "val.de", DE[:2])
    out = tmp_path / "run"
    code = main([
        "translate-train", "--data-dir", str(data), "--output-dir", str(out), "--preset", "transformer-tiny",
        "--layers", "1", "--d-model", "32", "--d-ff", "64", "--heads", "2", "--vocab-size", "330",
        "--max-steps", "4", "--save-every", "2", "--average-last", "2", "--warmup", "2", "--max-tokens", "64",
        "--no-progress",
    ])  # fmt: skip
    assert code == 0
    # at the end it says what the model can do: validation BLEU and translations beside their references
    printed = capsys.readouterr().out
    assert "validation BLEU on the first 2 pairs" in printed and printed.count("reference: ") == 2
    report = json.loads((out / "data_report.json").read_text())
    assert report["skipped_empty"] == 1 and report["pairs"] == 20 and report["steps"] == 4
    assert report["averaged"] == ["step-000002", "step-000004"] and "eval_loss" in report["eval"]
    raw = json.loads((out / "model" / "config.json").read_text())
    config = raw["config"]  # attnlab's own config beside MarianMT's fields (attnlab.translation.hf_layout)
    assert raw["model_type"] == "marian" and raw["encoder_layers"] == 1
    assert config["num_layers"] == 1 and config["d_model"] == 32 and config["vocab_size"] == 330

    monkeypatch.setattr("sys.stdin", io.StringIO("a dog runs .\n\nthe cat\n"))
    capsys.readouterr()
    assert main(["translate", str(out / "model"), "--beam", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""

    hyp = write(tmp_path / "hyp.de", ["ein hund rennt .", "zwei männer spielen"])
    assert main(["bleu", str(hyp), str(data / "val.de")]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("BLEU = ") and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in printed
    )

    assert main(["translate-average", str(out), "--last", "2", "--output", str(tmp_path / "avg")]) == 0
    assert (tmp_path / "avg" / "model.safetensors").is_file()


def test_cli_train_needs_data(tmp_path, capsys) -> None:
    from attnlab.cli import main

    assert main(["translate-train", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--src-train and --tgt-train" in err and "Traceback" not in err
    # a --data-dir without the training files: the message names the file it lacks
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("a house\n", encoding="utf-8")
    assert main(["translate-train", "--data-dir", str(data), "--output-dir", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert f"{data / 'train.de'}: no such file" in err and f"{data / 'train.en'}:" not in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.data
def test_multi30k_reads_cleanly() -> None:
    require(DATA)
    train = read_parallel(DATA / "train.en", DATA / "train.de")
    assert train.lines == 29_000 and len(train) + train.skipped_empty == 29_000
    test = read_parallel(DATA / "test_2016_flickr.en", DATA / "test_2016_flickr.de")
    assert len(test) == 1000
