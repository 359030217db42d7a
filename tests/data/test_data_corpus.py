"""Corpus ingestion formats and the rule-based sentence splitter."""

from __future__ import annotations

import builtins
import gzip
import json

import pytest
from shared_data import DATA, require

from attnlab.data.corpus import IngestStats, list_files, read_documents, read_hf_dataset
from attnlab.data.sentences import split_paragraphs, split_sentences


def test_bert_format_with_crlf_bom_and_blank_runs(tmp_path):
    p = tmp_path / "c.txt"
    p.write_bytes(b"\xef\xbb\xbfFirst one.\r\nSecond one.\r\n\r\n\r\nOther doc.\r\n  \r\nThird doc.")
    stats = IngestStats()
    docs = list(read_documents(p, "sentences", stats=stats))
    assert docs == [["First one.", "Second one."], ["Other doc."], ["Third doc."]]
    assert (stats.files, stats.documents, stats.sentences, stats.undecodable) == (1, 3, 4, {})


def test_lone_cr_line_ends(tmp_path):
    p = tmp_path / "mac.txt"
    p.write_bytes(b"a b.\rc d.\r\re f.")
    assert list(read_documents(p, "sentences")) == [["a b.", "c d."], ["e f."]]


def test_one_document_per_line_is_split_into_sentences(tmp_path):
    p = tmp_path / "docs.txt"
    p.write_text("Dr. Who came. He left at 3.30 p.m. today.\n\nIt rained! Did it?\n")
    assert list(read_documents(p, "lines")) == [
        ["Dr. Who came.", "He left at 3.30 p.m. today."],
        ["It rained!", "Did it?"],
    ]


def test_jsonl_with_configurable_field_and_errors(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"body": "One. Two.\n\nThree."}) + "\n\n" + json.dumps({"body": "Four."}) + "\n")
    assert list(read_documents(p, "jsonl", text_field="body")) == [["One.", "Two.", "Three."], ["Four."]]
    with pytest.raises(
        ValueError, match=r"d\.jsonl:1: expected an object with a 'text' field, got \['body'\]"
    ):
        list(read_documents(p, "jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok."}\n{"text": oops}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: invalid JSON"):
        list(read_documents(bad, "jsonl"))
    num = tmp_path / "num.jsonl"
    num.write_text('{"text": 3}\n')
    with pytest.raises(ValueError, match=r"num\.jsonl:1: field 'text' must be a string, got int"):
        list(read_documents(num, "jsonl"))


def test_directories_recursive_sorted_hidden_skipped_and_gz(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "2.txt").write_text("B2.\n")
    (tmp_path / "a" / "9.txt").write_text("A9.\n")
    (tmp_path / "a" / ".hidden.txt").write_text("hidden.\n")
    (tmp_path / ".git" / "x.txt").write_text("git.\n")
    with gzip.open(tmp_path / "a" / "1.txt.gz", "wb") as f:
        f.write(b"A1 first.\nA1 second.\n")
    files = list_files(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["a/1.txt.gz", "a/9.txt", "b/2.txt"]
    assert list(read_documents(tmp_path, "sentences")) == [["A1 first.", "A1 second."], ["A9."], ["B2."]]


def test_bytes_that_are_not_utf8_are_an_error_naming_file_line_and_byte(tmp_path):
    """By default nothing is replaced: the file, line and byte offset are named (pretraining used to drop the
    byte without a word)."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xef\xbb\xbffirst.\r\nsecond.\rthird.\ncaf\xe9 ok.\n")  # BOM, CRLF, lone CR
    with pytest.raises(ValueError, match=r"bad.txt:3: not valid UTF-8 \(byte 29: invalid continuation"):
        list(read_documents(bad, "sentences"))
    packed = tmp_path / "bad.jsonl.gz"
    with gzip.open(packed, "wb") as f:
        f.write(b'{"text": "fine."}\n{"text": "\xff"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl.gz:2: not valid UTF-8 \(byte 28: invalid start byte\)"):
        list(read_documents(packed, "jsonl"))
    with pytest.raises(ValueError, match="unknown errors='ignore'; expected one of strict, replace"):
        list(read_documents(packed, "jsonl", errors="ignore"))


def test_undecodable_bytes_are_replaced_and_counted_per_file(tmp_path):
    bad = tmp_path / "bad.txt"
    # two invalid sequences; a genuine U+FFFD in the text is not counted
    bad.write_bytes(b"caf\xe9 ok.\nfine \xef\xbf\xbd here.\n\xff\xfe end.\n")
    good = tmp_path / "good.txt"
    good.write_text("all good.\n")
    stats = IngestStats()
    docs = list(read_documents([bad, good], "sentences", stats=stats, errors="replace"))
    assert docs[0][0] == "caf\ufffd ok."
    assert stats.undecodable == {str(bad): 3}  # \xe9, \xff, \xfe
    assert stats.undecodable_total == 3


def test_text_format_joins_wrapped_lines_one_document_per_file(tmp_path):
    p = tmp_path / "book.txt"
    p.write_text("CHAPTER I.\n\nIt was a dark\nnight. Mr. Holmes\nsat down.\n\n\u201cWell?\u201d he said.\n")
    assert list(read_documents(p, "text")) == [
        ["CHAPTER I.", "It was a dark night.", "Mr. Holmes sat down.", "\u201cWell?\u201d he said."]
    ]


def test_empty_corpus_and_errors(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("\n\n  \n")
    stats = IngestStats()
    assert list(read_documents(p, "sentences", stats=stats, allow_empty=True)) == []
    assert stats.documents == 0
    assert list(read_documents(p, "text", stats=stats, allow_empty=True)) == []
    assert stats.empty_documents == 1
    with pytest.raises(ValueError, match="unknown corpus format 'csv'; expected one of sentences, lines"):
        list(read_documents(p, "csv"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(read_documents(tmp_path / "missing.txt"))
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match=r"broken\.txt\.gz: cannot read"):
        list(read_documents(broken))


def test_hf_datasets_missing_gives_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("No module named 'datasets'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="optional 'datasets' package"):
        next(read_hf_dataset("wikitext"))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Mr. Smith paid $3.50. He left!", ["Mr. Smith paid $3.50.", "He left!"]),
        ("J. R. R. Tolkien wrote it. It sold.", ["J. R. R. Tolkien wrote it.", "It sold."]),
        ("See e.g. the U.S.A. today. Fine.", ["See e.g. the U.S.A. today.", "Fine."]),
        (
            "\u201cStop!\u201d she cried. \u201cNow.\u201d",
            ["\u201cStop!\u201d she cried.", "\u201cNow.\u201d"],
        ),
        ('He said "go." Then went.', ['He said "go."', "Then went."]),
        ("Wait... and see. Pi is 3.14159. Done?", ["Wait... and see.", "Pi is 3.14159.", "Done?"]),
        ("It costs 5 vs. 6 etc. in total.", ["It costs 5 vs. 6 etc. in total."]),
        ("Chapter 1. 2 cats sat.", ["Chapter 1.", "2 cats sat."]),
        ("no end here", ["no end here"]),
        ("   ", []),
    ],
)
def test_sentence_splitter(text, expected):
    assert split_sentences(text) == expected


def test_split_paragraphs():
    assert list(split_paragraphs(["a", "b", "", "  ", "c", ""])) == ["a b", "c"]


@pytest.mark.data
def test_real_books_ingest():

    root = DATA / "books" / "en"
    require(root)
    stats = IngestStats()
    first = next(read_documents(sorted(root.iterdir())[0], "text", stats=stats))
    assert len(first) > 100
    assert all("\r" not in s and "\n" not in s for s in first)


def test_unsplit_documents_split_later(tmp_path):
    from attnlab.data.corpus import Paragraphs, as_sentences

    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"text": "One. Two.\n\nThree."}) + "\n")
    (doc,) = read_documents(p, "jsonl", split=False)
    assert isinstance(doc, Paragraphs) and doc == ["One. Two.", "Three."]
    assert as_sentences(doc) == ["One.", "Two.", "Three."]
    lines = tmp_path / "l.txt"
    lines.write_text("A  b. C d.\n")
    assert [as_sentences(d) for d in read_documents(lines, "lines", split=False)] == [["A b.", "C d."]]
    sentences = tmp_path / "s.txt"
    sentences.write_text("Kept. As is.\n")
    assert list(read_documents(sentences, "sentences", split=False)) == [["Kept. As is."]]


def test_hf_datasets_records_become_documents(monkeypatch):
    import sys
    import types

    calls = {}

    def load_dataset(name, config, split, streaming, **kwargs):
        calls.update(name=name, config=config, split=split, streaming=streaming, **kwargs)
        return [{"text": "One. Two.\n\nThree."}, {"text": "  "}, {"text": "Four."}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    stats = IngestStats()
    docs = list(read_hf_dataset("wikitext", config="wikitext-103-raw-v1", stats=stats, revision="main"))
    assert docs == [["One.", "Two.", "Three."], ["Four."]]
    assert calls == {
        "name": "wikitext",
        "config": "wikitext-103-raw-v1",
        "split": "train",
        "streaming": True,
        "revision": "main",
    }
    assert (stats.documents, stats.empty_documents) == (2, 1)
    with pytest.raises(ValueError, match=r"wikitext\[train\] record 0: no field 'body'; fields: \['text'\]"):
        next(read_hf_dataset("wikitext", text_field="body"))


def test_a_corpus_without_text_names_the_paths_and_what_they_hold(tmp_path):
    """An empty file, a file of blank lines, a folder without files: errors naming the path and what was
    found there, not the reader's internals."""
    empty, blank, folder = tmp_path / "empty.txt", tmp_path / "blank.txt", tmp_path / "nothing"
    empty.write_text("")
    blank.write_text("\n  \n\n")
    folder.mkdir()
    (folder / ".hidden").write_text("skipped")
    with pytest.raises(ValueError, match=rf"^{empty}: no text to read \(the file is empty\)$"):
        list(read_documents(empty))
    blank_message = rf"^{blank}: no text to read \(the file's 5 bytes are blank lines only\)"
    with pytest.raises(ValueError, match=blank_message):
        list(read_documents(blank, "lines"))
    with pytest.raises(ValueError, match=r"2 files: 1 empty, 1 with blank lines or empty documents only"):
        list(read_documents([empty, blank], "jsonl"))
    with pytest.raises(FileNotFoundError, match=rf"^corpus folder {folder}: holds no files to read"):
        list(read_documents(folder))


@pytest.mark.parametrize("recipe", [[], ["--recipe", "gpt", "--format", "text"], ["--recipe", "elmo"]])
def test_pretrain_on_an_empty_corpus_names_the_file(tmp_path, capsys, recipe):
    from attnlab.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("")
    argv = ["pretrain", *recipe, "--corpus", str(corpus), "--output", str(tmp_path / "o"), "--max-steps", "1"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{corpus}: no text to read (the file is empty)" in err and "iterator" not in err
