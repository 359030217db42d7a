"""An empty label, text or column is an error naming the file and line in every loader (never a class ""),
and with ``errors="skip"`` a counted skip."""

from __future__ import annotations

import json

import pytest

from attnlab.tasks.examples import DataFormatError
from attnlab.tasks.loaders import (
    load_glue,
    load_hf_dataset,
    load_kbert_classification,
    load_kbert_ner,
    load_squad,
    load_swag,
    load_table,
)


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("t.csv", "sentence,label\ngood film,pos\nbad film,\n", 3),
        ("t.tsv", "sentence\tlabel\ngood film\tpos\nbad film\t \n", 3),
        ("t.jsonl", '{"sentence": "good film", "label": "pos"}\n{"sentence": "bad film", "label": ""}\n', 2),
    ],
)
def test_an_empty_label_cell_is_an_error_naming_file_and_line_not_a_class(tmp_path, name, text, line):
    path = _write(tmp_path / name, text)
    with pytest.raises(DataFormatError, match=rf"{name}:{line}: empty column\(s\) 'label'"):
        load_table(path, "sentence")
    kept = load_table(path, "sentence", errors="skip")
    assert [ex.label for ex in kept] == ["pos"] and kept.report.skipped["empty_field"] == 1


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("t.csv", 'sentence,label\n"",neg\n', 2),
        ("t.tsv", "sentence\tlabel\n  \tneg\n", 2),
        ("t.jsonl", '{"sentence": "", "label": "neg"}\n', 1),
    ],
)
def test_an_empty_text_is_an_error_naming_the_column(tmp_path, name, text, line):
    path = _write(tmp_path / name, text)
    with pytest.raises(DataFormatError, match=rf"{name}:{line}: empty column\(s\) 'sentence'"):
        load_table(path, "sentence")


def test_glue_empty_label_and_empty_sentence_name_file_and_line(tmp_path):
    path = _write(tmp_path / "train.tsv", "sentence\tlabel\ngood\t1\nbad\t\n")
    with pytest.raises(DataFormatError, match=r"train.tsv:3: sst2: empty column\(s\) 'label'"):
        load_glue("sst2", path)
    path = _write(tmp_path / "dev.tsv", "sentence1\tsentence2\tlabel\tindex\na\t\tentailment\t0\n")
    with pytest.raises(DataFormatError, match=r"dev.tsv:2: rte: empty column\(s\) 'sentence2'"):
        load_glue("rte", path)
    assert load_glue("rte", path, errors="skip").report.skipped["empty_field"] == 1
    # a test file has no label column: its examples load unlabelled
    test = _write(tmp_path / "test.tsv", "index\tsentence\n0\tfine\n")
    assert [ex.label for ex in load_glue("sst2", test)] == [None]


def test_swag_empty_ending_or_label_is_an_error(tmp_path):
    header = "fold-ind,sent1,sent2,ending0,ending1,ending2,ending3,label\n"
    path = _write(tmp_path / "train.csv", header + "1,He sat.,He,ran,,ate,slept,0\n")
    with pytest.raises(DataFormatError, match=r"train.csv:2: empty column\(s\) 'ending1'"):
        load_swag(path)
    path = _write(tmp_path / "dev.csv", header + "1,He sat.,He,ran,sat,ate,slept,\n")
    with pytest.raises(DataFormatError, match=r"dev.csv:2: empty column\(s\) 'label'"):
        load_swag(path)


def test_kbert_empty_label_or_text_is_an_error(tmp_path):
    path = _write(tmp_path / "train.tsv", "label\ttext_a\n1\t很好\n\t不好\n")
    with pytest.raises(DataFormatError, match=r"train.tsv:3: empty column\(s\) 'label'"):
        load_kbert_classification(path)
    path = _write(tmp_path / "ner.tsv", "text_a\tlabel\n\tO\n")
    with pytest.raises(DataFormatError, match=r"ner.tsv:2: empty column\(s\) 'text_a'"):
        load_kbert_ner(path)


def test_squad_empty_question_is_an_error(tmp_path):
    data = {"data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "q1", "question": " ", "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}  # fmt: skip
    path = _write(tmp_path / "dev.json", json.dumps(data))
    with pytest.raises(DataFormatError, match=r"qas\[0\]: empty question"):
        load_squad(path)


def test_hf_dataset_empty_text_is_an_error_naming_the_row(monkeypatch):
    import sys

    class Split:
        column_names = ["sentence", "label"]
        features: dict = {}

        def __iter__(self):
            return iter([{"sentence": "fine", "label": "pos"}, {"sentence": " ", "label": "neg"}])

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, config, split, **kwargs):
            return Split()

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    with pytest.raises(DataFormatError, match=r"hf:toy\[train\]: row 1: empty column\(s\) 'sentence'"):
        load_hf_dataset("toy", None, "train", guid=None)
