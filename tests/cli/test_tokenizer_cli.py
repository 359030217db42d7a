"""``attnlab tokenizer train|encode``: files written, round trips through load_tokenizer, errors."""

from __future__ import annotations

import json
import random

import pytest

from attnlab.cli import main
from attnlab.tokenizers import load_tokenizer

WORDS = (
    "the quick brown fox jumps over lazy dogs while seven wizards quietly judge boxing matches "
    "running runner runs walked walking talks talked reading readers café naïve"
).split()
SYLLABLES = "ka lo mi nu pe ra si to vu ze bra cle dri fla gno".split()


@pytest.fixture()
def corpus(tmp_path):
    rng = random.Random(0)
    made = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(300)]
    lines = []
    for _ in range(400):
        words = rng.choices(WORDS, k=rng.randint(2, 8)) + rng.choices(made, k=rng.randint(1, 6))
        rng.shuffle(words)
        lines.append(" ".join(words) + rng.choice([".", "!", "?"]))
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("kind", "files"),
    [
        ("wordpiece", {"tokenizer.json", "vocab.txt"}),
        ("bpe", {"tokenizer.json", "vocab.json", "merges.txt"}),
        ("byte_level_bpe", {"tokenizer.json", "vocab.json", "merges.txt"}),
        ("unigram", {"tokenizer.json"}),
    ],
)
def test_train_writes_the_field_files_and_encode_reads_them(kind, files, corpus, tmp_path, capsys):
    out = tmp_path / kind
    size = 300
    rc = main(
        [
            "tokenizer",
            "train",
            "--kind",
            kind,
            "--vocab-size",
            str(size),
            "--files",
            str(corpus),
            "--out",
            str(out),
            "--no-progress",
            "--processes",
            "1",
            "--special-tokens",
            "<extra>",
        ]
    )
    assert rc == 0
    assert {p.name for p in out.iterdir()} == files
    assert f"{size} tokens" in capsys.readouterr().out
    tok = load_tokenizer(out)
    assert tok.get_vocab_size() == size
    assert tok.token_to_id("<extra>") == 0  # the user's special token comes first
    text = "the quick brown fox jumps"
    rc = main(["tokenizer", "encode", str(out), "--text", text, "--json"])
    assert rc == 0
    record = json.loads(capsys.readouterr().out)
    assert record["ids"] == tok.encode(text).ids
    assert record["tokens"] == tok.encode(text).tokens
    for (s, e), special in zip(record["offsets"], record["special_tokens_mask"]):
        if not special:
            assert 0 <= s <= e <= len(text)


def test_wordpiece_files_reload_identically(corpus, tmp_path, capsys):
    out = tmp_path / "wp"
    assert (
        main(
            [
                "tokenizer",
                "train",
                "--kind",
                "wordpiece",
                "--vocab-size",
                "200",
                "--files",
                str(corpus),
                "--out",
                str(out),
                "--no-progress",
                "--processes",
                "1",
            ]
        )
        == 0
    )
    from_json = load_tokenizer(out)
    (out / "tokenizer.json").unlink()
    from_vocab = load_tokenizer(out)  # vocab.txt alone: BERT's layout
    text = "The walking readers talked quietly, naïve café!"
    assert from_vocab.encode(text).ids == from_json.encode(text).ids
    assert from_json.encode(text).tokens[0] == "[CLS]"
    assert "walking" in from_json.decode(from_json.encode(text).ids)


def test_encode_file_pairs_truncation_and_plain_output(corpus, tmp_path, capsys):
    out = tmp_path / "bl"
    assert (
        main(
            [
                "tokenizer",
                "train",
                "--kind",
                "byte_level_bpe",
                "--vocab-size",
                "400",
                "--files",
                str(corpus),
                "--out",
                str(out),
                "--no-progress",
                "--processes",
                "1",
            ]
        )
        == 0
    )
    capsys.readouterr()
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the fox\tjumps over\nwizards judge\tboxing matches quietly\n", encoding="utf-8")
    assert (
        main(
            [
                "tokenizer",
                "encode",
                str(out),
                "--file",
                str(pairs),
                "--pair",
                "--json",
                "--max-length",
                "6",
                "--no-progress",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2
    for r in records:
        assert len(r["ids"]) <= 6
        assert r["tokens"][0] == "<s>" and r["tokens"][-1] == "</s>"
    assert main(["tokenizer", "encode", str(out), "--text", "the fox"]) == 0
    tokens, ids = capsys.readouterr().out.rstrip("\n").split("\t")
    tok = load_tokenizer(out)
    assert tokens.split() == tok.encode("the fox").tokens
    assert tokens.split()[-2:] == ["Ġfox", "</s>"]  # a frequent word is one token, with its space
    assert [int(i) for i in ids.split()] == tok.encode("the fox").ids


def test_train_errors_are_reported_not_raised(corpus, tmp_path, capsys):
    rc = main(
        [
            "tokenizer",
            "train",
            "--kind",
            "bpe",
            "--vocab-size",
            "10",
            "--files",
            str(corpus),
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
            "--processes",
            "1",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "vocab_size=10" in err and "special tokens" in err
    rc = main(
        [
            "tokenizer",
            "train",
            "--kind",
            "bpe",
            "--vocab-size",
            "100",
            "--files",
            str(tmp_path / "nope.txt"),
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ]
    )
    assert rc == 2 and "nope.txt" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    rc = main(
        [
            "tokenizer",
            "train",
            "--kind",
            "unigram",
            "--vocab-size",
            "100",
            "--files",
            str(empty),
            "--out",
            str(tmp_path / "x"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "empty corpus" in err and "empty.txt" in err
    assert main(["tokenizer", "encode", str(tmp_path / "missing"), "--text", "x"]) == 2
    assert "missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            [
                "tokenizer",
                "train",
                "--kind",
                "sentencepiece",
                "--vocab-size",
                "10",
                "--files",
                "a",
                "--out",
                "b",
            ]
        )
