"""Bad input to the tokenizer commands and the corpus readers: a clear one-line error naming the file (or
standard input), the line and what was expected, and nothing lost: no input overwritten, no byte that is not
UTF-8 replaced or dropped without a word."""

from __future__ import annotations

import io

import pytest

from attnlab.cli import main
from attnlab.tokenizers import load_tokenizer
from attnlab.tokenizers.files import TokenizerFileError, read_vocab_txt, save_tokenizer_json

TEXT = "".join(f"the quick brown fox {i} jumps over the lazy dog number {i * 7}\n" for i in range(200))
LATIN1 = "the fox\nun caf\u00e9 noir\n".encode("latin-1")  # \xe9 at byte 14, on line 2


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def train(kind: str, corpus, out) -> list[str]:
    return ["tokenizer", "train", "--kind", kind, "--vocab-size", "100", "--files", str(corpus),
            "--output-dir", str(out), "--no-progress", "--processes", "1"]  # fmt: skip


@pytest.fixture()
def wordpiece_dir(corpus, tmp_path, capsys):
    assert main(train("wordpiece", corpus, tmp_path / "tok")) == 0
    capsys.readouterr()
    return tmp_path / "tok"


# --------------------------------------------------------------------------- tokenizer train --output-dir


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_train_never_overwrites_a_file_given_as_output_dir(kind, corpus, tmp_path, capsys):
    """The corpus given as --output-dir was overwritten with tokenizer.json; now nothing is written."""
    other = tmp_path / "notes.v2"
    other.write_text("keep me\n", encoding="utf-8")
    for target in (corpus, other, other / "sub"):
        assert main(train(kind, corpus, target)) == 2
        err = capsys.readouterr().err
        assert "exists and is not a directory" in err and str(target) in err and "Traceback" not in err
    assert corpus.read_text(encoding="utf-8") == TEXT and other.read_text(encoding="utf-8") == "keep me\n"


@pytest.mark.parametrize(("kind", "files"), [("wordpiece", {"tokenizer.json", "vocab.txt"}),
                                             ("unigram", {"tokenizer.json"})])  # fmt: skip
def test_train_output_dir_with_a_dot_is_a_directory(kind, files, corpus, tmp_path, capsys):
    """``--output-dir tok_v1.0`` was taken for a file name (unigram wrote a file called tok_v1.0)."""
    out = tmp_path / "tok_v1.0"
    assert main(train(kind, corpus, out)) == 0, capsys.readouterr().err
    assert out.is_dir() and {p.name for p in out.iterdir()} == files
    assert load_tokenizer(out).get_vocab_size() == 100


def test_save_tokenizer_json_refuses_to_overwrite_a_file_that_is_not_json(wordpiece_dir, tmp_path):
    tok = load_tokenizer(wordpiece_dir)
    precious = tmp_path / "data.txt"
    precious.write_text("keep me\n", encoding="utf-8")
    with pytest.raises(NotADirectoryError, match="data.txt: exists and is not a directory"):
        save_tokenizer_json(tok, precious)
    assert precious.read_text(encoding="utf-8") == "keep me\n"
    assert save_tokenizer_json(tok, tmp_path / "v1.0") == str(tmp_path / "v1.0" / "tokenizer.json")
    assert save_tokenizer_json(tok, tmp_path / "my.json") == str(tmp_path / "my.json")  # a file, as before


# --------------------------------------------------------------------------- text that is not UTF-8


def test_encode_standard_input_that_is_not_utf8_is_named(wordpiece_dir, capsys, monkeypatch):
    """``--file -`` printed U+FFFD ([UNK]) for a Latin-1 byte; now an error naming the line and byte."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(LATIN1), errors="surrogateescape"))
    assert main(["tokenizer", "encode", str(wordpiece_dir), "--file", "-"]) == 2
    out, err = capsys.readouterr()
    assert "standard input: not valid UTF-8 at line 2 (byte 14: invalid continuation byte)" in err
    assert "[UNK]" not in out and "Traceback" not in err


def test_encode_standard_input_line_ends(wordpiece_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"the fox\r\nthe dog\rlazy")))
    assert main(["tokenizer", "encode", str(wordpiece_dir), "--file", "-", "--no-special-tokens"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("\r" not in line for line in lines)


def test_vocab_txt_that_is_not_utf8_names_the_file_and_line(wordpiece_dir, capsys):
    vocab = wordpiece_dir / "vocab.txt"
    (wordpiece_dir / "tokenizer.json").unlink()  # load from vocab.txt
    n = len(vocab.read_bytes().splitlines())
    vocab.write_bytes(vocab.read_bytes() + b"caf\xe9\n")
    with pytest.raises(TokenizerFileError, match=rf"vocab.txt:{n + 1}: not valid UTF-8 \(byte \d+: invalid"):
        read_vocab_txt(vocab)
    assert main(["tokenizer", "encode", str(wordpiece_dir), "--text", "the fox"]) == 2
    err = capsys.readouterr().err
    assert f"{vocab}:{n + 1}: not valid UTF-8" in err and "codec can't decode" not in err


def test_pretrain_corpus_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    """The byte used to vanish (decoded with replacement, then dropped) and the run exited 0."""
    docs = [f"document {d} says the quick brown fox jumps. it is {d}." for d in range(12)]
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("\n\n".join(docs).encode() + b"\n\n" + LATIN1)
    argv = ["--corpus", str(corpus), "--max-steps", "2", "--batch-size", "2", "--output", str(tmp_path / "p")]
    code = main(["pretrain", *argv])  # before the fix: trained and exited 0
    err = capsys.readouterr().err
    line = 2 * len(docs) + 2
    assert code == 2 and f"{corpus}:{line}: not valid UTF-8 (byte " in err and "Traceback" not in err


# --------------------------------------------------------------------------- tokenizer files and the manifest


@pytest.mark.parametrize("name", ["vocab.txt", "tokenizer.json"])
def test_a_tokenizer_file_changed_after_the_manifest_is_named(wordpiece_dir, name):
    """A model directory's manifest lists its tokenizer files; another tokenizer's file put in its place
    (other ids for the same weights) used to load silently, and fill-mask then failed or answered wrongly."""
    from attnlab.manifest import IntegrityError, write_manifest

    write_manifest(wordpiece_dir, [p.name for p in wordpiece_dir.iterdir() if p.is_file()])
    assert load_tokenizer(wordpiece_dir).get_vocab_size() > 0
    path = wordpiece_dir / name
    data = path.read_bytes()
    path.write_bytes(data[1:] + data[:1])  # same size, other content
    with pytest.raises(IntegrityError, match=name.replace(".", r"\.")):
        load_tokenizer(wordpiece_dir)


def test_vocabulary_difference_names_the_first_differing_id():
    from attnlab.tokenizers.vocab_diff import vocabulary_difference

    class Vocab:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    same = Vocab({"[PAD]": 0, "a": 1})
    assert vocabulary_difference(same, Vocab({"[PAD]": 0, "a": 1}), "x", "y") is None
    other = vocabulary_difference(Vocab({"<unk>": 0, "a": 1}), same, "it", "the model's")
    assert other == "2 tokens against 2; id 0 is '<unk>' in it and '[PAD]' in the model's"
    shared = vocabulary_difference(Vocab({"a": 0, "b": 0}), Vocab({"b": 0}), "x", "y")
    assert shared == "2 tokens against 1"  # every id names the same token; two tokens share id 0
