"""SQuAD v1.1 / v2.0 JSON loader."""

import json
from pathlib import Path

import pytest
from shared_data import DATA, require

from attnlab.tasks.examples import DataFormatError
from attnlab.tasks.loaders.squad import load_squad

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "squad"
SQUAD_DEV = DATA / "squad" / "v1.1" / "dev-v1.1.json"


def test_v1_answers_and_offsets():
    exs = load_squad(FIX / "v1.json")
    assert [e.id for e in exs] == ["q1", "q2"]
    q1 = exs[0]
    assert q1.title == "Super_Bowl_50" and q1.question == "Who won Super Bowl 50?"
    assert q1.answers == (("The Denver Broncos", 45), ("Denver Broncos", 49))
    assert not q1.is_impossible and q1.plausible_answers == ()
    for text, start in exs[1].answers:  # a non-ASCII en dash: offsets are in characters, not bytes
        assert exs[1].context[start : start + len(text)] == text == "24\u201310"


def test_v2_impossible_and_plausible_answers():
    exs = load_squad(FIX / "v2.json")
    a1, a2 = exs
    assert not a1.is_impossible and a1.answers == (("France", 24),)
    assert a2.is_impossible and a2.answers == ()
    assert a2.plausible_answers == (("The Normans", 32),)
    assert a2.context[32:43] == "The Normans"


def test_bad_offset_raises_with_json_path():
    with pytest.raises(
        DataFormatError, match=r"bad_offset.json: data\[0\].paragraphs\[0\].qas\[1\].answers\[0\]"
    ):
        load_squad(FIX / "bad_offset.json")


def test_bad_offset_skip_is_counted():
    exs = load_squad(FIX / "bad_offset.json", errors="skip")
    assert [e.id for e in exs] == ["q1"]
    assert exs.report.skipped == {"answer_offset_mismatch": 1, "no_valid_answer": 1}


def test_missing_field_names_it(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(
        json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [{"id": "x"}]}]}]})
    )
    with pytest.raises(DataFormatError, match=r"qas\[0\]: missing field 'question'"):
        load_squad(path)
    path.write_text("{not json")
    with pytest.raises(DataFormatError, match="not valid JSON"):
        load_squad(path)


@pytest.mark.data
def test_real_squad_dev_count():
    require(SQUAD_DEV)
    exs = load_squad(SQUAD_DEV)
    assert len(exs) == 10_570
    assert exs.report.n_skipped == 0
    assert len({e.title for e in exs}) == 48
    assert all(e.answers for e in exs)
