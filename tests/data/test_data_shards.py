"""Shard preparation: contents, determinism across worker counts, resume, bad input, corrupt shards."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from shared_data import DATA, require
from test_data_tokenizer import TinyTokenizer

from attnlab.data.corpus import IngestStats, read_documents
from attnlab.data.shards import (
    INDEX_FILE,
    PROGRESS_FILE,
    CorruptShardError,
    ShardedCorpus,
    prepare_shards,
    tokenize_chunk,
)

WORDS = "the a cat dog ran sat on mat house river tree quickly slowly extraordinary under over".split()


def make_docs(n_docs: int, seed: int = 0, max_sents: int = 8) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) + "."
            for _ in range(rng.randint(1, max_sents))
        ]
        for _ in range(n_docs)
    ]


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != INDEX_FILE}


def test_tokenize_chunk_arrays_match_the_tokenizer():
    tok = TinyTokenizer()
    chunk = [["Unwanted running.", "A cat."], ["", "x"]]
    arr = tokenize_chunk(tok, chunk, max_sentence_tokens=None, vocab_size=500)
    expected = [tok.encode(s, add_special_tokens=False) for s in ("Unwanted running.", "A cat.", "x")]
    assert arr.ids.tolist() == [i for e in expected for i in e.ids]  # [CLS]/[SEP] (word id None) dropped
    assert arr.sent_lens.tolist() == [len(e.ids) for e in expected]
    assert arr.doc_sents.tolist() == [2, 1]
    assert arr.empty_sentences == 1
    # word starts from word ids: Unw|ant|ed run|nin|g . / A cat . / x
    assert arr.word_starts.tolist() == [1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1]


def test_truncation_is_counted():
    tok = TinyTokenizer()
    arr = tokenize_chunk(tok, [["a b c d e f g h", "a b"]], max_sentence_tokens=5, vocab_size=500)
    assert arr.sent_lens.tolist() == [5, 2]
    assert arr.truncated_sentences == 1


def test_prepare_and_read_back(tmp_path):
    tok = TinyTokenizer()
    docs = make_docs(60) + [[""]]  # plus a document that tokenises to nothing
    report = prepare_shards(docs, tok, tmp_path / "out", workers=1, chunk_chars=300, shard_tokens=400)
    corpus = ShardedCorpus(tmp_path / "out", tokenizer=tok)
    assert report.shards == len(corpus.shards) > 2
    assert report.documents == corpus.n_documents == 60
    assert report.empty_documents == 1
    assert corpus.shards[0].ids.dtype == np.uint16
    # every document comes back token for token, in order
    for d, doc in enumerate(docs[:60]):
        got = [s.tolist() for s in corpus.document(d)]
        assert got == [tok.encode(s, add_special_tokens=False).ids for s in doc]
    index = json.loads((tmp_path / "out" / INDEX_FILE).read_text())
    assert index["settings"]["vocab_size"] == 500
    assert index["settings"]["tokenizer_fingerprint"] == "tiny-500-3"
    assert index["totals"]["n_tokens"] == corpus.n_tokens == report.tokens
    assert not (tmp_path / "out" / PROGRESS_FILE).exists()
    assert report.peak_rss_mb > 0 and report.tokens_per_second > 0
    assert "tokens/s" in report.summary()


def test_uint32_for_large_vocabularies(tmp_path):
    tok = TinyTokenizer(vocab_size=70000)
    prepare_shards(make_docs(5), tok, tmp_path, workers=1)
    assert ShardedCorpus(tmp_path).shards[0].ids.dtype == np.uint32


def test_identical_with_one_and_two_workers(tmp_path):
    tok = TinyTokenizer()
    docs = make_docs(200, seed=1)
    prepare_shards(docs, tok, tmp_path / "w1", workers=1, chunk_chars=500, shard_tokens=1000)
    prepare_shards(iter(docs), tok, tmp_path / "w2", workers=2, chunk_chars=500, shard_tokens=1000)
    one, two = files_of(tmp_path / "w1"), files_of(tmp_path / "w2")
    assert len(one) > 8 and one == two
    i1 = json.loads((tmp_path / "w1" / INDEX_FILE).read_text())
    i2 = json.loads((tmp_path / "w2" / INDEX_FILE).read_text())
    assert i1 == i2


def test_resume_after_a_crash_skips_finished_shards(tmp_path):
    tok = TinyTokenizer()
    docs = make_docs(120, seed=2)
    prepare_shards(docs, tok, tmp_path / "ref", workers=1, chunk_chars=200, shard_tokens=500)

    def crashing():
        for i, d in enumerate(docs):
            if i == 70:
                raise KeyboardInterrupt("killed")
            yield d

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        prepare_shards(crashing(), tok, out, workers=1, chunk_chars=200, shard_tokens=500)
    progress = json.loads((out / PROGRESS_FILE).read_text())
    done = len(progress["shards"])
    assert done >= 2
    assert list(out.glob("*.tmp"))  # the half-written shard stayed under its temporary name
    with pytest.raises(FileNotFoundError, match="did not finish"):
        ShardedCorpus(out)
    report = prepare_shards(docs, tok, out, workers=1, chunk_chars=200, shard_tokens=500)
    assert report.shards_skipped == done
    assert not list(out.glob("*.tmp"))
    assert files_of(out) == files_of(tmp_path / "ref")
    # a third run has nothing left to do
    again = prepare_shards(docs, tok, out, workers=1, chunk_chars=200, shard_tokens=500)
    assert again.shards_skipped == again.shards and again.tokens_this_run == 0


def test_resume_refuses_changed_input_or_settings(tmp_path):
    tok = TinyTokenizer()
    docs = make_docs(40, seed=3)
    prepare_shards(docs, tok, tmp_path, workers=1, chunk_chars=200, shard_tokens=300)
    changed = [list(d) for d in docs]
    changed[0][0] = "something else entirely."
    with pytest.raises(ValueError, match="input of shard shard_00000 changed"):
        prepare_shards(changed, tok, tmp_path, workers=1, chunk_chars=200, shard_tokens=300)
    with pytest.raises(ValueError, match="other settings.*shard_tokens"):
        prepare_shards(docs, tok, tmp_path, workers=1, chunk_chars=200, shard_tokens=301)
    report = prepare_shards(
        changed, tok, tmp_path, workers=1, chunk_chars=200, shard_tokens=300, overwrite=True
    )
    assert report.shards_skipped == 0


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path):
    """A real kill -9 in the middle of a multi-process preparation, then a resumed run."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(d) for d in make_docs(3000, seed=4)))
    script = (
        "import sys; sys.path.insert(0, sys.argv[3]);"
        "from test_data_tokenizer import TinyTokenizer;"
        "from attnlab.data import read_documents, prepare_shards;"
        "prepare_shards(read_documents(sys.argv[1]), TinyTokenizer(), sys.argv[2], workers=2,"
        " chunk_chars=2000, shard_tokens=3000)"
    )
    tests_dir = str(Path(__file__).parent)
    ref = tmp_path / "ref"
    subprocess.run([sys.executable, "-c", script, str(corpus), str(ref), tests_dir], check=True)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", script, str(corpus), str(out), tests_dir])
    deadline = time.time() + 60
    while time.time() < deadline and not (out / PROGRESS_FILE).exists():
        time.sleep(0.005)
    os.kill(proc.pid, 9)
    proc.wait()
    assert not (out / INDEX_FILE).exists(), "finished before it could be killed"
    report = prepare_shards(
        read_documents(corpus), TinyTokenizer(), out, workers=2, chunk_chars=2000, shard_tokens=3000
    )
    assert report.shards_skipped >= 1
    assert files_of(out) == files_of(ref)


def test_empty_and_tiny_corpora(tmp_path):
    tok = TinyTokenizer()
    report = prepare_shards([], tok, tmp_path / "empty", workers=1)
    assert (report.shards, report.tokens) == (0, 0)
    corpus = ShardedCorpus(tmp_path / "empty")
    assert (corpus.n_documents, corpus.n_tokens) == (0, 0)
    prepare_shards([["Hi."]], tok, tmp_path / "tiny", workers=2)
    tiny = ShardedCorpus(tmp_path / "tiny")
    assert tiny.n_documents == 1 and tiny.n_sentences == 1


def test_ingest_stats_recorded_in_index(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"caf\xe9 one.\ntwo.\n\nthree.\n")
    stats = IngestStats()
    docs = read_documents(src, stats=stats, errors="replace")  # data.prepare's choice: replace and count
    prepare_shards(docs, TinyTokenizer(), tmp_path / "out", workers=1, ingest_stats=stats)
    index = json.loads((tmp_path / "out" / INDEX_FILE).read_text())
    assert index["ingest"]["undecodable"] == {str(src): 1}
    assert index["ingest"]["documents"] == 2


def test_prepare_command_stops_at_bytes_that_are_not_utf8_unless_told_to_replace(tmp_path, capsys):
    """`python -m attnlab.data.prepare`: strict by default (one line naming file, line and byte, nothing
    prepared); ``--errors replace`` replaces and counts them in the index and the report."""
    from attnlab.data.prepare import run
    from attnlab.tokenizers.trainers import train_tokenizer

    good = tmp_path / "good.txt"
    good.write_text("\n".join(" ".join(d) for d in make_docs(20)) + "\n", encoding="utf-8")
    train_tokenizer("wordpiece", [str(good)], 200, show_progress=False).save(str(tmp_path / "tok.json"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"one cat.\ntwo dogs.\nthe caf\xe9 sat.\n")
    argv = [str(bad), "--tokenizer", str(tmp_path / "tok.json"), "--workers", "1", "--format", "lines"]
    assert run([*argv, "--out", str(tmp_path / "strict")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3" in err and "byte" in err and "Traceback" not in err
    assert not (tmp_path / "strict" / INDEX_FILE).exists()
    assert run([*argv, "--out", str(tmp_path / "replace"), "--errors", "replace"]) == 0
    index = json.loads((tmp_path / "replace" / INDEX_FILE).read_text())
    assert index["ingest"]["undecodable"] == {str(bad): 1}
    assert "replaced: 1 in 1 files" in capsys.readouterr().out


@pytest.fixture
def prepared(tmp_path):
    out = tmp_path / "shards"
    prepare_shards(make_docs(30, seed=5), TinyTokenizer(), out, workers=1, shard_tokens=10**6)
    return out


def test_vocab_or_tokenizer_mismatch_is_an_error(prepared):
    with pytest.raises(ValueError, match="vocabulary of 500 tokens, the tokenizer given has 600"):
        ShardedCorpus(prepared, tokenizer=TinyTokenizer(vocab_size=600))
    other = TinyTokenizer()
    other.fingerprint = "something-else"
    with pytest.raises(
        ValueError, match="tokenizer tiny-500-3, the tokenizer given has fingerprint something-else"
    ):
        ShardedCorpus(prepared, tokenizer=other)


def test_truncated_file_is_reported_with_its_name(prepared):
    path = prepared / "shard_00000.ids.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(
        CorruptShardError, match=r"shard_00000\.ids\.bin: \d+ bytes, expected \d+ \(\d+ x uint16\)"
    ):
        ShardedCorpus(prepared)


def test_missing_file_is_reported(prepared):
    (prepared / "shard_00000.word_starts.bin").unlink()
    with pytest.raises(CorruptShardError, match=r"shard_00000\.word_starts\.bin: missing"):
        ShardedCorpus(prepared)


def test_inconsistent_offsets_are_reported(prepared):
    path = prepared / "shard_00000.sent_offsets.bin"
    offsets = np.fromfile(path, dtype=np.int64)
    offsets[3], offsets[4] = offsets[4], offsets[3]
    offsets.tofile(path)
    with pytest.raises(CorruptShardError, match=r"sent_offsets\.bin: not strictly increasing at sentence 3"):
        ShardedCorpus(prepared)


def test_out_of_vocabulary_ids_are_reported(prepared):
    path = prepared / "shard_00000.ids.bin"
    ids = np.fromfile(path, dtype=np.uint16)
    ids[7] = 999
    ids.tofile(path)
    with pytest.raises(
        CorruptShardError, match=r"ids\.bin: token 7 has id 999, outside the vocabulary of 500"
    ):
        ShardedCorpus(prepared)
    ShardedCorpus(prepared, check_ids=False)  # the scan can be skipped for huge corpora


def test_corrupt_index_is_reported(prepared):
    (prepared / INDEX_FILE).write_text("{not json")
    with pytest.raises(CorruptShardError, match=r"index\.json: invalid JSON"):
        ShardedCorpus(prepared)


@pytest.mark.data
def test_prepare_real_books_sample(tmp_path):
    root = DATA / "books" / "en"
    require(root)
    files = sorted(root.iterdir())[:2]
    stats = IngestStats()
    report = prepare_shards(
        read_documents(files, "text", stats=stats), TinyTokenizer(), tmp_path, workers=2, ingest_stats=stats
    )
    assert report.documents == 2 and report.tokens > 10_000
    ShardedCorpus(tmp_path, tokenizer=TinyTokenizer())


def test_splitting_in_workers_gives_the_same_shards(tmp_path):
    src = tmp_path / "book.txt"
    src.write_text("A first line\nwrapped. Mr. Smith came.\n\nA new paragraph! Is it?\n\n" * 50)
    tok = TinyTokenizer()
    prepare_shards(read_documents(src, "text"), tok, tmp_path / "main", workers=1)
    unsplit = list(read_documents(src, "text", split=False))
    assert type(unsplit[0]).__name__ == "Paragraphs" and len(unsplit[0]) == 100
    prepare_shards(unsplit, tok, tmp_path / "workers", workers=2, chunk_chars=100)
    assert files_of(tmp_path / "main") == files_of(tmp_path / "workers")
    assert ShardedCorpus(tmp_path / "workers").n_sentences == 200


def test_pickling_maps_the_files_again(prepared):
    import pickle

    corpus = ShardedCorpus(prepared)
    blob = pickle.dumps(corpus)
    assert len(blob) < 1000  # the directory, not the token arrays
    again = pickle.loads(blob)
    assert isinstance(again.shards[0].ids, np.memmap)
    assert np.array_equal(again.shards[0].ids, corpus.shards[0].ids)
    assert np.array_equal(again.doc_start, corpus.doc_start)


def test_spawned_workers_give_the_same_shards(tmp_path):
    tok = TinyTokenizer()
    docs = make_docs(60, seed=6)
    prepare_shards(docs, tok, tmp_path / "fork", workers=1, chunk_chars=300, shard_tokens=500)
    prepare_shards(
        docs, tok, tmp_path / "spawn", workers=2, chunk_chars=300, shard_tokens=500, start_method="spawn"
    )
    assert files_of(tmp_path / "fork") == files_of(tmp_path / "spawn")


@pytest.fixture(scope="module")
def attnlab_tokenizers():
    """attnlab WordPiece (BERT pipeline) and byte-level BPE tokenizers trained on generated text."""
    from test_tokenizers_parity import corpus_lines

    from attnlab.tokenizers.trainers import train_tokenizer

    lines = corpus_lines(2000)
    return {
        "wordpiece": train_tokenizer("wordpiece", iter(lines), 600, show_progress=False, processes=1),
        "byte_level_bpe": train_tokenizer(
            "byte_level_bpe", iter(lines), 600, show_progress=False, processes=1
        ),
    }


def lean_test_docs() -> list[list[str]]:
    """Generated documents with the adversarial generator's sentences, with their emoji (split by
    ``regex``) and without (split by the standard library's ``re``), special tokens, newlines, empty ones."""
    from test_tokenizers_parity import adversarial_texts

    adversarial = adversarial_texts(800, seed=3)
    bmp = [re.sub("[\U00010000-\U0010ffff]", "", t) for t in adversarial]
    sentences = adversarial + bmp + [" ".join(s) for s in make_docs(100, seed=4)]
    sentences += ["[CLS] x [SEP] y", "a\nb", "", "<s>x</s>", "Hello <mask> world"]
    rng = random.Random(5)
    rng.shuffle(sentences)
    docs, i = [], 0
    while i < len(sentences):
        k = rng.randint(1, 12)
        docs.append(sentences[i : i + k])
        i += k
    return docs


@pytest.mark.parametrize("kind", ["wordpiece", "byte_level_bpe"])
def test_lean_path_gives_the_same_shards_as_encodings(tmp_path, monkeypatch, attnlab_tokenizers, kind):
    """An attnlab Tokenizer takes the ids-only path (ids and word starts without encodings); its shards are
    byte for byte those of the encodings' path, truncation included."""
    from attnlab.tokenizers import ids_only

    tok = attnlab_tokenizers[kind]
    docs = lean_test_docs()
    calls = []
    lean = ids_only.encode_ids_and_word_starts
    monkeypatch.setattr(
        ids_only, "encode_ids_and_word_starts", lambda *a, **k: calls.append(1) or lean(*a, **k)
    )
    kwargs = {"workers": 1, "chunk_chars": 3000, "shard_tokens": 4000, "max_sentence_tokens": 40}
    prepare_shards(docs, tok, tmp_path / "lean", **kwargs)
    assert calls, "the ids-only path was not taken"
    monkeypatch.setattr(ids_only, "supports_ids_only", lambda *a, **k: False)
    calls.clear()
    prepare_shards(docs, tok, tmp_path / "full", **kwargs)
    assert not calls
    lean_files, full_files = files_of(tmp_path / "lean"), files_of(tmp_path / "full")
    assert len(lean_files) > 8 and lean_files == full_files
    assert (tmp_path / "lean" / INDEX_FILE).read_bytes() == (tmp_path / "full" / INDEX_FILE).read_bytes()
    corpus = ShardedCorpus(tmp_path / "lean")
    assert 0 < corpus.shards[0].word_starts.sum() < corpus.shards[0].ids.size  # words of several tokens
    assert sum(info["truncated_sentences"] for info in corpus.index["shards"]) > 0
