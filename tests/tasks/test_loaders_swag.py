"""SWAG CSV loader."""

from pathlib import Path

import pytest

from attnlab.tasks.examples import DataFormatError
from attnlab.tasks.loaders.swag import load_swag

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "swag"


def test_swag_rows_quotes_and_multiline_fields():
    exs = load_swag(FIX / "train.csv")
    assert len(exs) == 2
    first, second = exs
    assert (
        first.context
        == "Members of the procession walk down the street holding small horn brass instruments."
    )
    assert first.endings[0] == "A drum line passes by walking down the street playing their instruments."
    assert len(first.endings) == 4 and first.label == 0 and first.guid == "3416"
    assert second.context == 'He rides the motorcycle down the hall, "Someone" says'
    assert second.endings[3] == "Someone smiles, a line\nacross two rows."  # empty sent2: no leading space
    assert second.label == 3
    assert exs.report.lines_read == 4 and exs.report.structural["header"] == 1


def test_swag_bad_label_names_line():
    with pytest.raises(DataFormatError, match=r"bad_label.csv:2: label '4' must be one of 0..3"):
        load_swag(FIX / "bad_label.csv")
    skipped = load_swag(FIX / "bad_label.csv", errors="skip")
    assert len(skipped) == 0 and skipped.report.skipped == {"unknown_label": 1}


def test_swag_missing_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("sent1,sent2,ending0\na,b,c\n")
    with pytest.raises(DataFormatError, match=r"x.csv:1: header lacks \['ending1'"):
        load_swag(path)


def test_swag_unlabelled(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text(
        "sent1,sent2,ending0,ending1,ending2,ending3\nA man sits.,He,eats.,sleeps.,runs.,flies.\n"
    )
    exs = load_swag(path)
    assert exs[0].label is None and exs[0].endings[1] == "He sleeps."
    with pytest.raises(DataFormatError, match="'label' column"):
        load_swag(path, labelled=True)
