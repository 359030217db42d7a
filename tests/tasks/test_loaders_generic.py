"""Generic CSV / TSV / JSON-lines loader and the optional HF datasets source."""

import sys
from pathlib import Path

import pytest

from attnlab.tasks.examples import DataFormatError, SentenceExample
from attnlab.tasks.loaders.generic import load_hf_dataset, load_table

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "generic"


def test_csv_with_quotes():
    exs = load_table(
        FIX / "pairs.csv", text_a="premise", text_b="hypothesis", guid="id", labels=["yes", "no"]
    )
    assert exs[0] == SentenceExample("A man, smiling, waves.", "A man waves.", "yes", "p1")
    assert exs[1].text_a == 'She said "no".'


def test_tsv_unquoted_float_labels():
    exs = load_table(FIX / "scores.tsv", text_a="text", label="score", label_type="float", guid="id")
    assert [(e.text_a, e.label) for e in exs] == [('good "film', 4.5), ("bad film", 1.0)]


def test_jsonl_blank_lines_counted():
    exs = load_table(FIX / "rows.jsonl", text_a="text", label_type="int", guid="uid")
    assert [(e.guid, e.label) for e in exs] == [("r1", 1), ("r2", 0)]
    assert exs.report.structural == {"blank": 1} and exs.report.lines_read == 3


def test_jsonl_errors_name_line_and_expectation():
    path = FIX / "bad.jsonl"
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: missing column\(s\) \['text'\]"):
        load_table(path, text_a="text", label_type="int")
    exs = load_table(path, text_a="text", label_type="int", labels=[0, 1], errors="skip")
    assert [e.text_a for e in exs] == ["great"]
    assert exs.report.skipped == {"missing_columns": 2, "unknown_label": 1}
    assert exs.report.samples["unknown_label"] == [f"{path}:4"]


def test_unknown_format_and_unlabelled(tmp_path):
    with pytest.raises(ValueError, match="format="):
        load_table(tmp_path / "data.txt", text_a="text")
    exs = load_table(FIX / "pairs.csv", text_a="premise", label=None)
    assert [e.label for e in exs] == [None, None] and exs[0].guid == "pairs.csv:2"


def test_hf_datasets_missing_gives_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(ImportError, match="pip install datasets"):
        load_hf_dataset("glue", "sst2", "validation")


class _FakeClassLabel:
    names = ["negative", "positive"]


class _FakeSplit:
    column_names = ["sentence", "label", "idx"]
    features = {"sentence": object(), "label": _FakeClassLabel(), "idx": object()}
    rows = [
        {"sentence": "a fine film", "label": 1, "idx": 7},
        {"sentence": "unlabelled test row", "label": -1, "idx": 8},
    ]

    def __iter__(self):
        return iter(self.rows)


def test_hf_datasets_rows_map_to_examples(monkeypatch):
    calls = []

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, config, split, **kwargs):
            calls.append((name, config, split, kwargs))
            return _FakeSplit()

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    exs = load_hf_dataset("glue", "sst2", "validation", revision="main")
    assert calls == [("glue", "sst2", "validation", {"revision": "main"})]
    assert exs == [
        SentenceExample("a fine film", None, "positive", "7"),
        SentenceExample("unlabelled test row", None, None, "8"),
    ]
    assert exs.report.path == "hf:glue/sst2[validation]" and exs.report.examples == 2
    with pytest.raises(DataFormatError, match=r"missing column\(s\) \['question'\]"):
        load_hf_dataset("glue", "sst2", "validation", text_a="question")
