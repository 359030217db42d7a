"""Golden values for the tokenizer pipeline (from google-research/bert's tests, the papers, and hand work)."""

from __future__ import annotations

import math

import pytest

from attnlab.tokenizers import BPE, Tokenizer, Unigram, WordPiece, bert_wordpiece
from attnlab.tokenizers import decoders as dec
from attnlab.tokenizers import normalizers as norm
from attnlab.tokenizers import pre_tokenizers as pre
from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.processors import TemplateProcessing, parse_template

# google-research/bert tokenization_test.py
BERT_TEST_VOCAB = [
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "want",
    "##want",
    "##ed",
    "wa",
    "un",
    "runn",
    "##ing",
    ",",
    "low",
]


def bert_test_tokenizer(lowercase: bool = True) -> Tokenizer:
    vocab = {t: i for i, t in enumerate([*BERT_TEST_VOCAB, "[PAD]", "[MASK]", "lowest"])}
    return bert_wordpiece(vocab, lowercase=lowercase)


def test_bert_golden_unwanted_running():
    tok = bert_test_tokenizer()
    enc = tok.encode("UNwant\u00e9d,running")
    assert enc.tokens == ["[CLS]", "un", "##want", "##ed", ",", "runn", "##ing", "[SEP]"]
    # Offsets point into the original text, through lowercasing and accent stripping.
    assert enc.offsets == [(0, 0), (0, 2), (2, 6), (6, 8), (8, 9), (9, 13), (13, 16), (0, 0)]
    assert enc.word_ids == [None, 0, 0, 0, 1, 2, 2, None]
    assert enc.special_tokens_mask == [1, 0, 0, 0, 0, 0, 0, 1]
    assert tok.decode(enc.ids) == "unwanted, running"


def test_wordpiece_unknown_and_overlong_words():
    wp = WordPiece({t: i for i, t in enumerate(BERT_TEST_VOCAB)}, max_input_chars_per_word=8)
    assert [t for _, t, _ in wp.tokenize("unwanted")] == ["un", "##want", "##ed"]
    assert wp.tokenize("unwantedx") == [(0, "[UNK]", (0, 9))]  # over-long: one [UNK] for the word
    assert wp.tokenize("unwantedz"[:7] + "z") == [(0, "[UNK]", (0, 8))]  # no cover: one [UNK]
    with pytest.raises(ValueError, match="unknown token"):
        WordPiece({"a": 0})


def test_bert_normalizer_golden():
    uncased = norm.BertNormalizer(lowercase=True)
    assert uncased.normalize_str(" \tHeLLo!how  \n Are yoU?  ") == "  hello!how    are you?  "
    assert uncased.normalize_str("H\u00e9llo") == "hello"
    cased = norm.BertNormalizer(lowercase=False)
    assert cased.normalize_str("H\u00e9llo") == "H\u00e9llo"  # cased: no accent stripping
    assert uncased.normalize_str("ah\u535a\u63a8zz") == "ah \u535a  \u63a8 zz"  # CJK split out
    assert uncased.normalize_str("a\x00b\u200bc\ufffdd\x0be") == "abcde"  # control / zero-width removed
    ns = uncased.normalize(norm.NormalizedString("Ça\u535a"))
    assert ns.normalized == "ca \u535a "
    spans = [ns.original_span(i, i + 1) for i in range(len(ns.normalized))]
    assert spans == [(0, 1), (1, 2), (2, 3), (2, 3), (2, 3)]  # the spaces around 博 point at it


def test_bert_pre_tokenizer_punctuation_by_category():
    words = pre.BertPreTokenizer().pre_tokenize_str("Hello,  world!¿Qué $5+3?")
    assert words == [
        ("Hello", (0, 5)),
        (",", (5, 6)),
        ("world", (8, 13)),
        ("!", (13, 14)),
        ("¿", (14, 15)),
        ("Qué", (15, 18)),
        ("$", (19, 20)),
        ("5", (20, 21)),
        ("+", (21, 22)),
        ("3", (22, 23)),
        ("?", (23, 24)),
    ]


def test_bytes_to_unicode_table():
    table = pre.bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"
    assert all(not c.isspace() and c.isprintable() for c in table.values())


def test_byte_level_pre_tokenizer_gpt2_regex():
    words = pre.ByteLevel(add_prefix_space=False).pre_tokenize_str("Hello world's  \u00e9t\u00e9!")
    assert [w for w, _ in words] == ["Hello", "Ġworld", "'s", "Ġ", "ĠÃ©tÃ©", "!"]


def test_metaspace_marks_spaces():
    words = pre.Metaspace().pre_tokenize_str("Hey  friend")
    assert words == [("▁Hey", (0, 3)), ("▁", (3, 4)), ("▁friend", (4, 11))]


def test_bpe_with_end_of_word_suffix():
    # Sennrich et al. (2016), Fig. 1 vocabulary: merges r·, l o, lo w, e r· (here "r</w>")
    vocab = {c: i for i, c in enumerate(["l", "o", "w", "e", "r", "n", "s", "t", "i", "d", "r</w>", "w</w>"])}
    merges = [("l", "o"), ("lo", "w"), ("e", "r</w>"), ("n", "e"), ("ne", "w"), ("low", "er</w>")]
    for m in ("lo", "low", "er</w>", "ne", "new", "lower</w>"):
        vocab[m] = len(vocab)
    bpe = BPE(vocab, merges, end_of_word_suffix="</w>")
    assert [t for _, t, _ in bpe.tokenize("lower")] == ["lower</w>"]
    assert [(t, o) for _, t, o in bpe.tokenize("newer")] == [("new", (0, 3)), ("er</w>", (3, 5))]
    # "w</w>" (word-final w) does not merge with "lo": the learnt merge is for a word-internal w.
    assert [t for _, t, _ in bpe.tokenize("low")] == ["lo", "w</w>"]
    # "t</w>" is not in the vocabulary and there is no unknown token: dropped, as HF tokenizers does.
    assert [t for _, t, _ in bpe.tokenize("lowest")] == ["low", "e", "s"]
    assert dec.BPEDecoder().decode(["new", "er</w>", "low", "er</w>"]) == "newer lower"


def test_bpe_unknown_characters():
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
    bpe = BPE(vocab, [("a", "b")], unk_token="<unk>", fuse_unk=True)
    assert [(t, o) for _, t, o in bpe.tokenize("abxyb")] == [("ab", (0, 2)), ("<unk>", (2, 4)), ("b", (4, 5))]
    with pytest.raises(ValueError, match="merge 0"):
        BPE({"a": 0}, [("a", "b")])


def test_unigram_viterbi_golden():
    # log-probabilities chosen so that the best path is hand-checkable:
    # "abc": a+b+c = -6, ab+c = -3.5, a+bc = -3.2 (best), abc missing.
    pieces = [("<unk>", 0.0), ("a", -2.0), ("b", -2.0), ("c", -2.0), ("ab", -1.5), ("bc", -1.2)]
    uni = Unigram(pieces, unk_id=0)
    assert [(t, o) for _, t, o in uni.tokenize("abc")] == [("a", (0, 1)), ("bc", (1, 3))]
    # Unknown characters: one fused unknown token whose text is the characters themselves.
    assert uni.tokenize("xxa") == [(0, "xx", (0, 2)), (1, "a", (2, 3))]
    assert uni.unk_score == pytest.approx(-2.0 - 10.0)


def test_unigram_sampling_gives_valid_segmentations():
    import random

    random.seed(0)
    pieces = [("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -1.5), ("ba", -1.5), ("aba", -2.5)]
    uni = Unigram(pieces)
    seen = set()
    for _ in range(200):
        toks = uni.tokenize("abab", sample=True, alpha=0.5)
        assert "".join(t for _, t, _ in toks) == "abab"
        assert [o for _, _, o in toks][0][0] == 0 and toks[-1][2][1] == 4
        seen.add(tuple(t for _, t, _ in toks))
    assert len(seen) > 3
    # Frequencies follow P(seg)^alpha: the best path is the most frequent.
    assert uni.tokenize("abab") == uni.tokenize("abab")
    best = tuple(t for _, t, _ in uni.tokenize("abab"))
    assert best in seen and math.isfinite(uni.min_score)


def test_decoders():
    assert dec.WordPiece().decode(["un", "##want", "##ed", ",", "running", "."]) == "unwanted, running."
    assert dec.Metaspace().decode(["▁Hey", "▁", "▁friend"]) == "Hey  friend"
    assert dec.ByteLevel().decode(["Hello", "Ġw", "Ã©"]) == "Hello wé"
    assert dec.ByteFallback().decode(["a", "<0xE2>", "<0x82>", "<0xAC>", "b", "<0xFF>"]) == "a€b\ufffd"
    assert dec.ByteFallback().decode(["<0xE2>", "<0x82>", "<0xFF>"]) == "\ufffd" * 3  # one per byte, as HF


def test_template_parsing_as_hf():
    assert parse_template("[CLS] $A [SEP] $B:1 [SEP]:1") == [
        ("special", "[CLS]", 0),
        ("sequence", 0, 0),
        ("special", "[SEP]", 0),
        ("sequence", 1, 1),
        ("special", "[SEP]", 1),
    ]
    assert parse_template("$1") == [("sequence", 0, 1)]
    with pytest.raises(ValueError, match=r"\$C"):
        parse_template("$C")
    with pytest.raises(ValueError, match="not among the special tokens"):
        TemplateProcessing("[CLS] $A", None, [])


def test_truncate_windows_with_stride():
    e = Encoding(list(range(10)), [str(i) for i in range(10)], [(i, i + 1) for i in range(10)])
    e.type_ids = [0] * 10
    e.special_tokens_mask = [0] * 10
    e.attention_mask = [1] * 10
    e.word_ids = list(range(10))
    e.sequence_ids = [0] * 10
    e.truncate(4, stride=1)
    windows = [e.ids] + [o.ids for o in e.overflowing]
    assert windows == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert e.overflowing[1].offsets == [(6, 7), (7, 8), (8, 9), (9, 10)]
    with pytest.raises(ValueError, match="stride"):
        Encoding(
            list(range(5)), ["x"] * 5, [(0, 0)] * 5, [0] * 5, [0] * 5, [1] * 5, [0] * 5, [0] * 5
        ).truncate(2, stride=2)


def test_qa_windows_over_long_context():
    tok = bert_test_tokenizer()
    tok.enable_truncation(12, stride=2, strategy="only_second")
    tok.enable_padding(length=12)
    enc = tok.encode("want", "running running running running running running running")
    windows = [enc, *enc.overflowing]
    assert len(windows) == 2  # 14 context tokens, 9 per window, step 9 - 2
    for w in windows:
        assert len(w.ids) == 12
        assert w.tokens[:3] == ["[CLS]", "want", "[SEP]"]
        ctx = [o for o, s in zip(w.offsets, w.sequence_ids) if s == 1]
        text = "running running running running running running running"
        assert all(text[a:b] in ("runn", "ing") for a, b in ctx)
    # consecutive windows share `stride` context tokens
    ctx0 = [o for o, s in zip(windows[0].offsets, windows[0].sequence_ids) if s == 1]
    ctx1 = [o for o, s in zip(windows[1].offsets, windows[1].sequence_ids) if s == 1]
    assert ctx0[-2:] == ctx1[:2]


def test_padding_left_and_batch_longest():
    tok = bert_test_tokenizer()
    tok.enable_padding(direction="left")
    a, b = tok.encode_batch(["want", "want want want"])
    assert len(a.ids) == len(b.ids) == 5
    assert a.attention_mask == [0, 0, 1, 1, 1] and a.tokens[:2] == ["[PAD]", "[PAD]"]
    assert a.offsets[:2] == [(0, 0), (0, 0)] and a.word_ids[:2] == [None, None]


def test_added_special_tokens_are_matched_whole():
    tok = bert_test_tokenizer()
    enc = tok.encode("want [MASK] low", add_special_tokens=False)
    assert enc.tokens == ["want", "[MASK]", "low"]
    assert enc.offsets == [(0, 4), (5, 11), (12, 15)]
    assert (
        tok.decode(enc.ids) == "want low"
        and tok.decode(enc.ids, skip_special_tokens=False) == "want [MASK] low"
    )


def test_pre_tokenize_str_for_trainers():
    tok = bert_test_tokenizer()
    assert tok.pre_tokenize_str("H\u00e9llo, World") == [("hello", (0, 5)), (",", (5, 6)), ("world", (7, 12))]
