"""Bad task data and options end in one clear error naming the file, line, field or option at fault.

Each test is one defect an audit found: a raw traceback (JSONDecodeError, csv.Error, torch's RuntimeError or
AssertionError) or a silent wrong result (repeated SQuAD ids, NaN regression targets, a foreign tokenizer).
"""

from __future__ import annotations

import argparse
import csv
import json

import pytest
import torch

from attnlab.cli import main
from attnlab.cli.finetune import _check_same_vocabulary
from attnlab.cli.predict import _inputs
from attnlab.tasks import TokenExample
from attnlab.tasks.examples import DataFormatError
from attnlab.tasks.features import token_classification_features
from attnlab.tasks.loaders import _lines as lines_module
from attnlab.tasks.loaders import load_glue, load_squad, load_table
from attnlab.tokenizers import bert_wordpiece
from attnlab.tokenizers.files import save_tokenizer_json
from attnlab.train.distributed import resolve_device

VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "mat", "cat"])}

# ------------------------------------------------------------------------------ predict qa: JSON inputs


def _qa_args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"kind": "qa", "text": None, "file": None, "question": None, **kw})


def test_predict_qa_names_the_line_of_malformed_json(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "who", "context": "the mat"}\n{"question": "where", "context": "the mat"\n')
    with pytest.raises(ValueError, match=r"q\.jsonl:2: not valid JSON \("):
        _inputs(_qa_args(file=str(path)))
    with pytest.raises(ValueError, match=r"^--text: not valid JSON"):
        _inputs(_qa_args(text='{"question": "x"'))


def test_predict_qa_names_a_field_that_is_not_a_string(tmp_path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": 5, "context": "the mat"}\n')
    with pytest.raises(ValueError, match=r"q\.jsonl:1: question must be a string, got int"):
        _inputs(_qa_args(file=str(path)))


# ------------------------------------------------------------------------------------------- --device


def test_an_unknown_device_is_named() -> None:
    with pytest.raises(ValueError, match=r"--device foo: not a device \(cpu, cuda, cuda:N, mps, auto\)"):
        resolve_device("foo")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda")


def test_cuda_on_a_machine_without_it_is_named(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ValueError, match="--device cuda: CUDA is not available on this machine"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


COMMANDS = [
    ["predict", "qa", "MODEL", "--text", "x"],
    ["finetune", "--task", "sst2", "--data-dir", "D", "--model", "M"],
]


@pytest.mark.parametrize("command", COMMANDS)
def test_device_option_is_checked_when_parsed(command, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--device", "foo"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --device: foo: not a device (cpu, cuda, cuda:N, mps, auto)" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------------------------------ generic CSV


def test_csv_field_over_128_kib_loads(tmp_path) -> None:
    long_text = "word " * 40_000  # 200 KB: over the csv module's default field limit of 128 KiB
    path = tmp_path / "train.csv"
    path.write_text(f'sentence,label\n"{long_text}",pos\nshort,neg\n')
    examples = load_table(path, "sentence")
    assert [e.label for e in examples] == ["pos", "neg"]
    assert examples[0].text_a == long_text


def test_csv_error_names_file_and_line(tmp_path, monkeypatch) -> None:
    path = tmp_path / "train.csv"
    path.write_text("sentence,label\nfine,pos\n" + "x" * 50 + ",neg\n")
    old = csv.field_size_limit()
    monkeypatch.setattr(lines_module, "_CSV_FIELD_LIMIT", 10)
    csv.field_size_limit(10)  # stands in for any csv.Error: a field past the limit is one
    try:
        with pytest.raises(DataFormatError, match=r"train\.csv:3: not valid CSV \(field larger than"):
            load_table(path, "sentence")
    finally:
        csv.field_size_limit(old)


def test_csv_not_utf8_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "train.csv"
    path.write_bytes("sentence,label\ngood,pos\ncaf\xe9 cr\xe8me,neg\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"train\.csv:3: not valid UTF-8"):
        load_table(path, "sentence")


# ------------------------------------------------------------------------------------------------ SQuAD


def _squad(tmp_path, qas: list[dict], name: str = "dev.json"):
    context = "the cat sat on the mat"
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


ANSWER = [{"text": "the mat", "answer_start": 15}]


def test_squad_repeated_id_is_an_error(tmp_path) -> None:
    qas = [
        {"id": "q1", "question": "where?", "answers": ANSWER},
        {"id": "q1", "question": "how?", "answers": ANSWER},
    ]
    path = _squad(tmp_path, qas)
    expected = r"dev\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]\.id 'q1' repeats data\[0\]\.paragraphs\[0\]"
    with pytest.raises(DataFormatError, match=expected):
        load_squad(path)
    assert len(load_squad(path, errors="skip")) == 1


def test_squad_training_question_without_answers_is_an_error(tmp_path) -> None:
    path = _squad(tmp_path, [{"id": "q1", "question": "where?", "answers": []}], "train.json")
    expected = r"train\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers: a training question needs"
    with pytest.raises(DataFormatError, match=expected):
        load_squad(path, require_answers=True)
    assert load_squad(path)[0].answers == ()  # a test-style file still loads
    impossible = [{"id": "q1", "question": "where?", "answers": [], "is_impossible": True}]
    assert load_squad(_squad(tmp_path, impossible, "v2.json"), require_answers=True)[0].is_impossible


def test_squad_is_impossible_must_be_a_boolean(tmp_path) -> None:
    path = _squad(tmp_path, [{"id": "q1", "question": "where?", "answers": ANSWER, "is_impossible": "false"}])
    with pytest.raises(DataFormatError, match=r"qas\[0\]\.is_impossible must be a boolean \(true or false\)"):
        load_squad(path)


def test_squad_answers_must_be_a_list(tmp_path) -> None:
    path = _squad(tmp_path, [{"id": "q1", "question": "where?", "answers": ANSWER[0]}])
    with pytest.raises(DataFormatError, match=r"qas\[0\]\.answers must be a list"):
        load_squad(path)


# --------------------------------------------------------------------------------- regression targets


@pytest.mark.parametrize("score", ["nan", "-inf", "inf"])
def test_stsb_score_must_be_finite(tmp_path, score) -> None:
    path = tmp_path / "train.tsv"
    path.write_text(f"index\tsentence1\tsentence2\tscore\n0\ta\tb\t{score}\n")
    expected = rf"train\.tsv:2: stsb: column 'score' must be a finite number, got '{score}'"
    with pytest.raises(DataFormatError, match=expected):
        load_glue("stsb", path)


def test_generic_regression_label_must_be_finite(tmp_path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("sentence,label\na,1.5\nb,nan\n")
    with pytest.raises(DataFormatError, match=r"train\.csv:3: label 'nan' in column 'label' is not a finite"):
        load_table(path, "sentence", label_type="float")


# --------------------------------------------------------------------------------------- CoNLL dev tags


def test_unknown_dev_tag_names_file_and_line() -> None:
    ex = TokenExample(("the", "cat", "mat"), ("O", "B-PER", "B-LOC"), guid="valid.txt:7")
    labels = {"O": 0, "B-PER": 1, "I-PER": 2}
    with pytest.raises(ValueError, match=r"^valid\.txt:9: unknown label 'B-LOC' \(word 'mat'\)"):
        token_classification_features(bert_wordpiece(VOCAB), [ex], labels, max_length=16)


# ------------------------------------------------------------------------------- finetune --tokenizer


def test_a_tokenizer_other_than_the_models_is_refused(tmp_path) -> None:
    model_dir = tmp_path / "model"
    save_tokenizer_json(bert_wordpiece(VOCAB), model_dir)
    smaller = {t: i for i, t in enumerate(["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]", "the"])}
    expected = (
        r"--tokenizer other: its vocabulary differs .*id 0 is '\[UNK\]' in it and '\[PAD\]' in the model's"
    )
    with pytest.raises(ValueError, match=expected):
        _check_same_vocabulary(model_dir, bert_wordpiece(smaller), "other")
    _check_same_vocabulary(model_dir, bert_wordpiece(VOCAB), "same")  # the model's own: accepted
