"""NER label alignment: first sub-token labelled, the rest -100; and back from tokens to words."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.tasks.ner_alignment import (
    IGNORE_INDEX,
    align_labels,
    iob2_continuation,
    merge_window_predictions,
    word_predictions,
)

# "Schwarzenegger visited Wolfsburg" in many pieces:
# [CLS] schw ##arz ##ene ##gger visited wolf ##sburg [SEP]
WORD_IDS = [None, 0, 0, 0, 0, 1, 2, 2, None]
TAGS = ["B-PER", "O", "B-LOC"]


def test_first_subtoken_gets_the_label():
    assert align_labels(WORD_IDS, [1, 0, 5]) == [-100, 1, -100, -100, -100, 0, 5, -100, -100]
    assert align_labels(WORD_IDS, TAGS, ignore_index=None) == [
        None, "B-PER", None, None, None, "O", "B-LOC", None, None
    ]  # fmt: skip


def test_label_all_subtokens_with_continuation():
    out = align_labels(WORD_IDS, TAGS, label_all_subtokens=True, continuation=iob2_continuation)
    assert out == [-100, "B-PER", "I-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", -100]
    ids = align_labels(WORD_IDS, [1, 0, 5], label_all_subtokens=True, continuation={1: 2, 5: 6})
    assert ids == [-100, 1, 2, 2, 2, 0, 5, 6, -100]
    assert align_labels(WORD_IDS, [1, 0, 5], label_all_subtokens=True) == [-100, 1, 1, 1, 1, 0, 5, 5, -100]


def test_inverse_takes_first_subtoken_prediction():
    token_preds = ["O", "B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC", "I-LOC", "O"]
    assert word_predictions(WORD_IDS, token_preds) == ["B-PER", "O", "B-LOC"]


def test_truncated_words_need_a_default():
    word_ids = [None, 0, 0, 1, None]  # a 4-word sentence cut after word 1
    with pytest.raises(ValueError, match=r"word\(s\) \[2, 3\] have no token"):
        word_predictions(word_ids, [9, 1, 2, 3, 9], num_words=4)
    assert word_predictions(word_ids, [9, 1, 2, 3, 9], num_words=4, default=0) == [1, 3, 0, 0]


def test_window_that_starts_inside_a_word():
    # a long sentence split into two windows; the second starts in the middle of word 2
    w1 = ([None, 0, 1, 1, 2, None], ["x", "A", "B", "b", "C", "x"])
    w2 = ([None, 2, 3, 3, None], ["x", "c", "D", "d", "x"])
    assert align_labels(w2[0], ["t0", "t1", "t2", "t3"]) == [-100, "t2", "t3", -100, -100]
    assert merge_window_predictions([w1, w2], num_words=4) == ["A", "B", "C", "D"]
    with pytest.raises(ValueError, match=r"word\(s\) \[4\] are in no window"):
        merge_window_predictions([w1, w2], num_words=5)


def test_bad_word_ids():
    with pytest.raises(ValueError, match=r"token 2: word 0 appears again"):
        align_labels([0, 1, 0], ["a", "b"])
    with pytest.raises(ValueError, match=r"token 1: word id 3 must be in \[0, 2\)"):
        align_labels([0, 3], ["a", "b"])
    with pytest.raises(ValueError, match="3 word ids but 2 token predictions"):
        word_predictions([0, 1, None], ["a", "b"])


@settings(deadline=None)  # first example may pay a lazy import; shared CPUs
@given(st.lists(st.integers(1, 6), min_size=1, max_size=20), st.integers(0, 3))
def test_round_trip(pieces_per_word, n_special):
    """Words split into 1..6 pieces each: aligning then reading back gives the word labels."""
    word_ids = [None] * n_special
    for w, n in enumerate(pieces_per_word):
        word_ids += [w] * n
    word_ids += [None]
    labels = [f"L{w}" for w in range(len(pieces_per_word))]
    aligned = align_labels(word_ids, labels)
    assert sum(x != IGNORE_INDEX for x in aligned) == len(labels)  # exactly one label per word
    assert word_predictions(word_ids, aligned) == labels


def test_with_word_ids_from_a_real_tokenizer():
    """word_ids from HF `tokenizers` (test-only reference) on pre-split words, one piece per character."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, processors

    vocab = ["[UNK]", "[CLS]", "[SEP]"] + list(string.ascii_letters + string.punctuation)
    vocab += ["##" + c for c in string.ascii_letters]
    tok = tokenizers.Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    words = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    tags = ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    enc = tok.encode(words, is_pretokenized=True)
    assert enc.word_ids[:4] == [None, 0, 0, 1] and len(enc.word_ids) == 2 + sum(map(len, words))
    aligned = align_labels(enc.word_ids, tags)
    assert [t for t in aligned if t != IGNORE_INDEX] == tags
    assert word_predictions(enc.word_ids, aligned) == tags
