"""Features: QA windows with answers straddling them, question truncation, NER alignment through offsets,
classification truncation, multiple choice, padding -- every cut counted."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.tasks import MultipleChoiceExample, QAExample, SentenceExample, TokenExample
from attnlab.tasks.features import (
    FeatureReport,
    answer_token_span,
    classification_features,
    collate,
    multiple_choice_features,
    qa_features,
    token_classification_features,
)
from attnlab.tokenizers import bert_wordpiece

WORDS = [f"w{i}" for i in range(60)] + [
    "what",
    "is",
    "the",
    "cat",
    "un",
    "##want",
    "##ed",
    "run",
    "##ning",
    ",",
]
VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}


def tokenizer():
    return bert_wordpiece(VOCAB)


PASSAGE = " ".join(f"w{i}" for i in range(40))  # 40 single-token words


def _span_of_words(i: int, j: int) -> tuple[str, int]:
    words = PASSAGE.split(" ")
    start = sum(len(w) + 1 for w in words[:i])
    text = " ".join(words[i : j + 1])
    assert PASSAGE[start : start + len(text)] == text
    return text, start


@settings(max_examples=40, deadline=None)
@given(
    first=st.integers(0, 39),
    length=st.integers(1, 4),
    max_length=st.integers(14, 20),
    stride=st.integers(4, 6),
)
def test_qa_windows_label_the_answer_exactly_where_it_fits(first, length, max_length, stride):
    last = min(first + length - 1, 39)
    text, start = _span_of_words(first, last)
    ex = QAExample("q", "", PASSAGE, "what is the cat", ((text, start),))
    report = FeatureReport("qa")
    feats = qa_features(tokenizer(), [ex], max_length=max_length, stride=stride, report=report)
    assert len(feats) > 1 and report.cut["split_into_windows"] == 1
    inside = 0
    for f in feats:
        s, e = f.inputs["start_positions"], f.inputs["end_positions"]
        ctx = [o for o in f.offsets if o is not None]
        holds = ctx[0][0] <= start and ctx[-1][1] >= start + len(text)
        if holds:
            inside += 1
            assert 0 < s <= e
            assert PASSAGE[f.offsets[s][0] : f.offsets[e][1]] == text  # offsets map back exactly
        else:
            assert s == e == f.cls_index == 0
        assert len(f.inputs["input_ids"]) <= max_length
    # windows overlap by `stride` tokens, so an answer no longer than the overlap is inside some window
    if last - first + 1 <= stride:
        assert inside >= 1
    assert report.cut["answer_outside_window"] == len(feats) - inside
    # consecutive windows overlap by exactly `stride` passage tokens
    for a, b in zip(feats, feats[1:]):
        ca = [o for o in a.offsets if o is not None]
        cb = [o for o in b.offsets if o is not None]
        assert ca[-stride:] == cb[:stride]


def test_answer_straddling_two_windows_is_cls_in_both_and_inside_a_third():
    # window passage room: 16 - 3 specials - 4 question tokens = 9 tokens; stride 2 -> steps of 7 tokens
    text, start = _span_of_words(7, 10)  # tokens 7..10: crosses the boundary of windows [0, 9) and [7, 16)
    ex = QAExample("q", "", PASSAGE, "what is the cat", ((text, start),))
    feats = qa_features(tokenizer(), [ex], max_length=16, stride=2)
    spans = [(f.inputs["start_positions"], f.inputs["end_positions"]) for f in feats]
    assert spans[0] == (0, 0)  # the answer starts in window 0 but ends after it
    assert spans[1] != (0, 0)
    f = feats[1]
    assert PASSAGE[f.offsets[spans[1][0]][0] : f.offsets[spans[1][1]][1]] == text


def test_impossible_questions_point_at_cls_and_are_counted():
    ex = QAExample("q", "", PASSAGE, "what is the cat", (), is_impossible=True)
    report = FeatureReport("qa")
    feats = qa_features(tokenizer(), [ex], max_length=20, stride=4, report=report)
    assert all(f.inputs["start_positions"] == f.inputs["end_positions"] == 0 for f in feats)
    assert report.cut["impossible"] == len(feats)


def test_long_questions_are_truncated_and_counted():
    question = " ".join(["what"] * 10)
    ex = QAExample("q", "", "w1 w2 w3", question, (("w2", 3),))
    report = FeatureReport("qa")
    (f,) = qa_features(tokenizer(), [ex], max_length=32, max_query_length=4, report=report)
    assert report.cut["question_truncated"] == 1
    question_tokens = [t for t, o in zip(f.inputs["token_type_ids"], f.offsets) if t == 0 and o is None]
    assert len(question_tokens) == 1 + 4 + 1  # [CLS] + 4 question tokens + [SEP]
    assert (f.inputs["start_positions"], f.inputs["end_positions"]) == (7, 7)


def test_no_room_for_the_passage_is_skipped_and_counted():
    ex = QAExample("q", "", PASSAGE, " ".join(["what"] * 10), ((("w1"), 3),))
    report = FeatureReport("qa")
    assert qa_features(tokenizer(), [ex], max_length=12, max_query_length=64, stride=1, report=report) == []
    assert report.skipped["no_room_for_passage"] == 1 and "skipped" in report.summary()


def test_answer_inside_a_token_is_widened_and_counted():
    context = "run running w1"  # running = run ##ning
    ex = QAExample("q", "", context, "what", (("run", 4),))  # a gold span on token boundaries
    report = FeatureReport("qa")
    (f,) = qa_features(tokenizer(), [ex], max_length=32, report=report)
    s, e = f.inputs["start_positions"], f.inputs["end_positions"]
    assert context[f.offsets[s][0] : f.offsets[e][1]] == "run" and not report.cut["answer_not_token_aligned"]
    ex = QAExample("q", "", context, "what", (("runn", 4),))  # ends inside ##ning
    (f,) = qa_features(tokenizer(), [ex], max_length=32, report=report)
    s, e = f.inputs["start_positions"], f.inputs["end_positions"]
    assert context[f.offsets[s][0] : f.offsets[e][1]] == "running"
    assert report.cut["answer_not_token_aligned"] == 1
    assert answer_token_span([None, (0, 3), (4, 7), (7, 11)], 5, 9) == (2, 3)
    assert answer_token_span([None, (0, 3)], 2, 9) is None


def test_classification_pairs_truncate_longest_first_and_count():
    examples = [
        SentenceExample(" ".join(["w1"] * 30), "w2 w3", "1", "a"),
        SentenceExample("w4", "w5", "0", "b"),
        SentenceExample("w4", None, None, "c"),
    ]
    report = FeatureReport("cls")
    feats = classification_features(tokenizer(), examples, 16, {"0": 0, "1": 1}, report=report)
    assert report.cut["truncated"] == 1
    assert len(feats[0].inputs["input_ids"]) == 16 and feats[0].inputs["token_type_ids"].count(1) == 3
    assert feats[0].inputs["labels"] == 1 and feats[1].inputs["labels"] == 0
    assert "labels" not in feats[2].inputs
    with pytest.raises(ValueError, match="unknown label '1'"):
        classification_features(tokenizer(), examples[:1], 16, {"0": 0})
    reg = classification_features(tokenizer(), [SentenceExample("w1", "w2", 3.5, "r")], 16, regression=True)
    assert reg[0].inputs["labels"] == 3.5


def test_ner_labels_the_first_sub_token_of_each_word():
    ex = TokenExample(("unwanted", ",", "running", "w1"), ("B-X", "O", "B-Y", "I-Y"))
    labels = {"O": 0, "B-X": 1, "B-Y": 2, "I-Y": 3, "I-X": 4}
    (f,) = token_classification_features(tokenizer(), [ex], labels, max_length=32)
    # [CLS] un ##want ##ed , run ##ning w1 [SEP]
    assert f.word_ids == [None, 0, 0, 0, 1, 2, 2, 3, None]
    assert f.inputs["labels"] == [-100, 1, -100, -100, 0, 2, -100, 3, -100]
    (g,) = token_classification_features(tokenizer(), [ex], labels, max_length=32, label_all_subtokens=True)
    assert g.inputs["labels"] == [-100, 1, 4, 4, 0, 2, 3, 3, -100]  # pieces of a B-X word are I-X


def test_long_sentences_become_windows_covering_every_word():
    words = tuple(f"w{i}" for i in range(30))
    ex = TokenExample(words, ("O",) * 30)
    report = FeatureReport("ner")
    feats = token_classification_features(tokenizer(), [ex], {"O": 0}, max_length=12, stride=3, report=report)
    assert len(feats) > 1 and report.cut["split_into_windows"] == 1
    covered = {w for f in feats for w in f.word_ids if w is not None}
    assert covered == set(range(30))
    unknown = TokenExample(("w1", "\u200b", "w2"), ("O", "O", "O"))  # a zero-width space: no token
    report = FeatureReport("ner")
    token_classification_features(tokenizer(), [unknown], {"O": 0}, report=report)
    assert report.cut["word_without_token"] == 1


def test_multiple_choice_features_and_collate_padding():
    ex = MultipleChoiceExample("w1 w2", ("w3", "w4 w5 w6", "w7"), 1, "m")
    (f,) = multiple_choice_features(tokenizer(), [ex], max_length=16)
    batch = collate([f, f])
    assert batch["input_ids"].shape == (2, 3, 8) and batch["labels"].tolist() == [1, 1]
    assert batch["attention_mask"][0, 0].tolist() == [1] * 6 + [0, 0]
    feats = token_classification_features(
        tokenizer(),
        [TokenExample(("w1",), ("O",)), TokenExample(("w1", "w2", "w3"), ("O", "O", "O"))],
        {"O": 0},
    )
    batch = collate(feats, pad_id=0)
    assert batch["labels"][0].tolist() == [-100, 0, -100, -100, -100]
    assert batch["input_ids"][0, 3:].tolist() == [0, 0] and batch["input_ids"].dtype == torch.long
    reg = classification_features(tokenizer(), [SentenceExample("w1", None, 1.5, "r")], 8, regression=True)
    assert collate(reg)["labels"].dtype == torch.float32
