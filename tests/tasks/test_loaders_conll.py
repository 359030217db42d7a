"""CoNLL-2003 column loader: IOB1 → IOB2, -DOCSTART- handling, document boundaries, bad lines."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import DATA, require

from attnlab.tasks.examples import DataFormatError
from attnlab.tasks.loaders.conll import documents, iob1_to_iob2, iob2_violations, load_conll

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "conll"

EXPECTED_TAGS = [
    ("B-ORG", "O", "B-MISC", "O", "O"),
    ("B-PER", "I-PER"),
    ("B-PER", "B-PER", "O", "B-LOC", "I-LOC"),
]


def test_iob2_file():
    exs = load_conll(FIX / "iob2.txt")
    assert [e.tags for e in exs] == EXPECTED_TAGS
    assert exs[0].words == ("EU", "rejects", "German", "call", ".")
    assert exs[0].pos == ("NNP", "VBZ", "JJ", "NN", ".") and exs[0].chunk[0] == "B-NP"
    assert [e.document for e in exs] == [0, 0, 1]
    assert exs.report.structural == {"docstart": 2, "blank": 5}
    assert not exs.report.notes
    assert exs[0].guid == "iob2.txt:3"


def test_iob1_file_converts_to_iob2_and_counts():
    exs = load_conll(FIX / "iob1.txt")  # scheme="auto"
    assert [e.tags for e in exs] == EXPECTED_TAGS
    # rewritten: I-ORG, I-MISC, I-PER (Peter), I-PER (Hendrix), I-LOC (New)
    assert exs.report.notes["iob1_to_iob2"] == 5
    assert [len(d) for d in documents(exs)] == [2, 1]
    assert load_conll(FIX / "iob1.txt", scheme="iob1") == exs


def test_iob2_scheme_rejects_iob1_with_line():
    with pytest.raises(DataFormatError, match=r"iob1.txt:3: tag 'I-ORG'.*invalid IOB2"):
        load_conll(FIX / "iob1.txt", scheme="iob2")


def test_skipped_sentence_before_docstart_keeps_document_count(tmp_path, caplog):
    path = tmp_path / "x.txt"
    path.write_text("EU B-ORG\nrejects O extra\n\n-DOCSTART- O\n\nPeter B-PER\n")
    exs = load_conll(path, errors="skip")
    assert [(e.words, e.document) for e in exs] == [(("Peter",), 1)]
    assert "skipped rows" in caplog.text and "missing_columns" in caplog.text


def test_bad_columns_and_tags():
    with pytest.raises(DataFormatError, match=r"bad_columns.txt:2: expected 4 .*got 3"):
        load_conll(FIX / "bad_columns.txt")
    skipped = load_conll(FIX / "bad_columns.txt", errors="skip")
    assert [e.words for e in skipped] == [("Peter",)]
    assert skipped.report.skipped == {"missing_columns": 1}
    with pytest.raises(DataFormatError, match=r"bad_tag.txt:2: tag 'X-FOO'"):
        load_conll(FIX / "bad_tag.txt")


def test_allowed_labels():
    with pytest.raises(DataFormatError, match=r"unknown tag 'B-MISC'"):
        load_conll(FIX / "iob2.txt", labels=["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"])


TAGS = st.lists(st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]), max_size=12)


@settings(deadline=None)  # first example may pay a lazy import; shared CPUs
@given(TAGS)
def test_conversion_properties(tags):
    out = iob1_to_iob2(tags)
    assert iob2_violations(out) == []  # always valid IOB2
    assert iob1_to_iob2(out) == out  # idempotent
    assert [t[2:] for t in out] == [t[2:] for t in tags]  # types and O positions unchanged
    if not iob2_violations(tags):
        assert out == list(tags)  # valid IOB2 input is left alone


@pytest.mark.data
@pytest.mark.parametrize("split, count, docs", [("train", 14_041, 946), ("valid", 3_250, 216)])
def test_real_conll_counts(split, count, docs):
    path = DATA / "conll2003" / f"{split}.txt"
    require(path)
    exs = load_conll(path, scheme="iob2")
    assert len(exs) == count
    assert len(documents(exs)) == docs
    assert exs.report.structural["docstart"] == docs and exs.report.n_skipped == 0
    assert {t for e in exs for t in e.tags} == {
        "O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"
    }  # fmt: skip
