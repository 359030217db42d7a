"""The ids-only path (``Tokenizer.encode_ids_batch`` / ``encode_ids_flat``, used by corpus encoding) gives
exactly the ids of the full ``encode_batch`` and of HF tokenizers: on the adversarial generator's strings, on
whitespace at text ends (where GPT-2's split looks ahead), on texts holding newlines or added tokens, across
block and cache boundaries, and on real books when ../shared/data is present."""

from __future__ import annotations

import pickle
import random
import re

import numpy as np
import pytest
import regex
from shared_data import needs
from test_tokenizers_fuzz_parity import adversarial_texts as every_category_texts
from test_tokenizers_parity import BOOKS, adversarial_texts, corpus_lines, hf_bert, hf_roberta, vocab_dir
from test_tokenizers_precompiled import RULES, compile_charsmap

from attnlab.tokenizers import Tokenizer, WordPiece, byte_level_bpe, ids_only, load_tokenizer
from attnlab.tokenizers import normalizers as norm
from attnlab.tokenizers import pre_tokenizers as pre
from attnlab.tokenizers import processors as proc
from attnlab.tokenizers.parallel import encode_texts, encode_texts_flat
from attnlab.tokenizers.precompiled import Precompiled

__all__ = ["vocab_dir"]  # the parity tests' vocabularies (a module-scoped fixture)

# Text ends where a byte-level split could merge whitespace across texts, newlines inside texts, empty texts,
# added tokens, and the generator's adversarial strings.
EDGES = [
    "trail  ",
    "  lead",
    " ",
    "",
    "\t",
    "a \t",
    "\t b",
    "x\n",
    "\ny",
    "a\n\nb",
    "\r\n",
    " \n ",
    "c  ",
    "Hello <mask> world",
    "a  <mask>b",
    "<s>x</s>",
    "[CLS] x [SEP]",
    "don't  ",
    "'s",
    "'",
    "ab'",
]
TEXTS = EDGES + adversarial_texts(1500) + corpus_lines(300) + EDGES[::-1]
# The generator draws emoji, which send a whole block to ``regex``: without them the standard library's ``re``
# splits (see ``ids_only._splitter``).
BMP_TEXTS = [re.sub("[\U00010000-\U0010ffff]", "", t) for t in TEXTS]


def full_ids(tok: Tokenizer, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens)]


def assert_lean_is_exact(tok: Tokenizer, texts: list[str], expect_lean: bool = True) -> None:
    for specials in (True, False):
        assert ids_only.supports_ids_only(tok, specials) is expect_lean
        expected = full_ids(tok, texts, specials)
        got = tok.encode_ids_batch(texts, specials)
        for text, a, b in zip(texts, got, expected):
            assert a == b, (text, specials)
        assert len(got) == len(expected)
        ids, lengths = tok.encode_ids_flat(texts, specials)
        assert ids.dtype == np.int64 and lengths.dtype == np.int64
        assert lengths.tolist() == [len(x) for x in expected]
        assert ids.tolist() == [i for x in expected for i in x]


def pipelines(vocab_dir) -> dict[str, Tokenizer]:
    bert = load_tokenizer(vocab_dir / "bert_uncased")
    wp: WordPiece = bert.model  # type: ignore[assignment]
    roberta = load_tokenizer(vocab_dir / "roberta")
    out = {
        "bert_uncased": bert,
        "bert_cased": load_tokenizer(vocab_dir / "bert_cased"),
        "roberta": roberta,
        "gpt2": byte_level_bpe(roberta.model, template="gpt2", special_tokens=["</s>"]),  # type: ignore[arg-type]
        "whitespace_lowercase": Tokenizer(wp, norm.Lowercase(), pre.Whitespace(), special_tokens=["[UNK]"]),
        "split_nfkd": Tokenizer(
            wp,
            norm.Sequence([norm.NFKD(), norm.StripAccents(), norm.Lowercase()]),
            pre.WhitespaceSplit(),
            proc.TemplateProcessing("[CLS] [CLS] $A [SEP]", None, [("[CLS]", 2), ("[SEP]", 3)]),
        ),
        "bert_no_clean": Tokenizer(
            wp,
            norm.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True),
            pre.BertPreTokenizer(),
            proc.BertProcessing(("[SEP]", 3), ("[CLS]", 2)),
        ),
    }
    out["byte_level_normalized"] = Tokenizer(
        roberta.model, norm.NFKC(), pre.ByteLevel(add_prefix_space=False), roberta.post_processor
    )
    return out


@pytest.mark.parametrize(
    "name",
    [
        "bert_uncased",
        "bert_cased",
        "roberta",
        "gpt2",
        "whitespace_lowercase",
        "split_nfkd",
        "bert_no_clean",
        "byte_level_normalized",
    ],
)
def test_ids_only_equals_full_encode(vocab_dir, name):
    tok = pipelines(vocab_dir)[name]
    assert_lean_is_exact(tok, TEXTS)
    assert_lean_is_exact(tok, BMP_TEXTS)
    assert_word_starts_are_exact(tok, TEXTS + BMP_TEXTS)


# The inputs: every Unicode category (unassigned and private-use code points included), marks that NFD
# reorders, and SentencePiece's Precompiled normaliser.
EVERY_CATEGORY = every_category_texts(600, seed=7) + [
    "\u0378 \U00081eed\ue000",
    "a\u09fe\u05b1b \u00e9\u0323 \U0001e024\u0c56\u203a na\u00efve",
    "\ufb01\u0301 \x01x AB\t\u3000",
]


@pytest.mark.parametrize(
    "name", ["bert_uncased", "bert_cased", "roberta", "split_nfkd", "byte_level_normalized"]
)
def test_ids_only_equals_full_encode_on_every_category(vocab_dir, name):
    tok = pipelines(vocab_dir)[name]
    assert_lean_is_exact(tok, EVERY_CATEGORY)
    assert_word_starts_are_exact(tok, EVERY_CATEGORY)


def test_ids_only_equals_full_encode_behind_precompiled(vocab_dir):
    wp: WordPiece = load_tokenizer(vocab_dir / "bert_uncased").model  # type: ignore[assignment]
    n = norm.Sequence([Precompiled(compile_charsmap(RULES)), norm.Replace(" {2,}", " ", is_regex=True)])
    tok = Tokenizer(wp, n, pre.Metaspace(), special_tokens=["[UNK]"])
    assert_lean_is_exact(tok, EVERY_CATEGORY + TEXTS[:300], expect_lean=ids_only.supports_ids_only(tok, True))
    assert_word_starts_are_exact(tok, EVERY_CATEGORY)


def word_starts_of(word_ids: list[int | None]) -> list[bool]:
    """A token starts a word when its word id differs from the previous token's or is None (data.shards)."""
    return [i == 0 or w is None or w != word_ids[i - 1] for i, w in enumerate(word_ids)]


def assert_word_starts_are_exact(tok: Tokenizer, texts: list[str]) -> None:
    for specials in (True, False):
        encs = tok.encode_batch(texts, specials)
        ids, lengths, starts = ids_only.encode_ids_and_word_starts(tok, texts, specials)
        assert starts.dtype == bool and starts.shape == ids.shape
        assert ids.tolist() == [i for e in encs for i in e.ids]
        assert lengths.tolist() == [len(e.ids) for e in encs]
        expected = [s for e in encs for s in word_starts_of(e.word_ids)]
        assert starts.tolist() == expected, specials


# Character classes of the pre-tokenisers' patterns, as ``regex`` writes them.
CLASSES = [r"\s", pre._PUNCT, r"\p{L}", r"\p{N}", r"\w", pre._LETTER, pre._NUMBER, pre._WORD]
BMP = "".join(map(chr, range(0x10000)))
EVERY = "".join(map(chr, range(0x110000)))


@pytest.mark.parametrize("expr", CLASSES)
def test_re_classes_hold_what_regex_matches_on_every_code_point(expr):
    ours = re.compile(ids_only.re_class(ids_only.bmp_ranges(expr)))
    assert ours.findall(BMP) == regex.findall(f"[{expr}]", BMP, regex.V1)
    assert not ours.search(EVERY[0x10000:])  # the BMP only: text above it is split by ``regex``


def split_probes() -> list[str]:
    """Every BMP code point alone, between letters, digits, spaces, apostrophes and newlines, and shuffled
    runs of them; the adversarial generator's texts (emoji removed) joined as the blocks join them."""
    cps = list(BMP)
    rng = random.Random(0)
    shuffled = cps[:]
    rng.shuffle(shuffled)
    contexts = "".join(f"a{c}b {c}1'{c}s\n{c} \t{c}{c}." for c in cps)
    runs = "".join(c + rng.choice(["", " ", "  ", "\n", "a", "'", " 1", "\u3000"]) for c in shuffled)
    return [BMP, contexts, "".join(shuffled), runs, "\n".join(BMP_TEXTS) + "\n"]


PATTERNS = [
    (pre._BERT_RE, False),
    (pre._WHITESPACE_RE, False),
    (pre._WHITESPACE_SPLIT_RE, False),
    (pre._GPT2_RE, True),
]


@pytest.mark.parametrize("pattern, byte_level", PATTERNS)
def test_re_split_gives_regex_words(pattern, byte_level):
    marked = ids_only._with_end_marker(pattern, byte_level)
    fast = ids_only._stdlib_pattern(pattern)
    split = ids_only._splitter(pattern, byte_level)
    assert fast is not None
    for text in split_probes():
        expected = marked.findall(text)
        assert fast.findall(text) == expected
        assert split(text) == expected
    # Above the BMP (here every code point of Unicode, and the generator's texts with their emoji) the
    # split is ``regex``'s own.
    for text in (EVERY, "".join(f"a{c}b {c}1 \n" for c in EVERY[0x1F000:0x1F700]), "\n".join(TEXTS)):
        assert split(text) == marked.findall(text)


def test_ids_only_equals_hf_tokenizers(vocab_dir):
    for ours, ref in (
        (load_tokenizer(vocab_dir / "bert_uncased"), hf_bert(vocab_dir / "bert_uncased", True)),
        (load_tokenizer(vocab_dir / "roberta"), hf_roberta(vocab_dir / "roberta")),
    ):
        expected = [e.ids for e in ref.encode_batch(TEXTS)]
        assert ours.encode_ids_batch(TEXTS) == expected


def test_block_and_cache_boundaries(vocab_dir, monkeypatch):
    monkeypatch.setattr(ids_only, "BLOCK_TEXTS", 7)
    monkeypatch.setattr(ids_only, "CACHE_CAPACITY", 50)
    for name in ("bert_uncased", "roberta"):
        tok = pipelines(vocab_dir)[name]
        assert_lean_is_exact(tok, TEXTS[:400])
        assert len(tok.__dict__["_ids_cache"]) <= 50 + 400
        assert_word_starts_are_exact(tok, TEXTS[:400] + BMP_TEXTS[:400])


def test_newline_written_by_a_normalizer_falls_back(vocab_dir):
    bert = load_tokenizer(vocab_dir / "bert_uncased")
    tok = Tokenizer(bert.model, norm.Replace("x", "\n"), pre.BertPreTokenizer(), bert.post_processor)
    assert_lean_is_exact(tok, ["axb", "x", "b x"] + TEXTS[:100])
    assert_word_starts_are_exact(tok, ["axb", "x", "b x"] + TEXTS[:100])


def test_unsupported_pipelines_fall_back_to_encode(vocab_dir):
    bert = load_tokenizer(vocab_dir / "bert_uncased")
    bert.enable_truncation(8, stride=2)
    assert_lean_is_exact(bert, TEXTS[:200], expect_lean=False)
    bert.no_truncation()
    bert.enable_padding()
    assert_lean_is_exact(bert, TEXTS[:200], expect_lean=False)
    bert.no_padding()
    bert.add_tokens(["hello"])  # normalised added tokens are matched after normalisation: the full path
    assert_lean_is_exact(bert, TEXTS[:200] + ["HELLO world"], expect_lean=False)
    roberta = load_tokenizer(vocab_dir / "roberta")
    spaced = Tokenizer(roberta.model, None, pre.ByteLevel(add_prefix_space=True), roberta.post_processor)
    assert_lean_is_exact(spaced, TEXTS[:200], expect_lean=False)
    unigram = Tokenizer.from_file(vocab_dir / "unigram" / "tokenizer.json")
    assert_lean_is_exact(unigram, TEXTS[:200], expect_lean=False)
    assert_word_starts_are_exact(unigram, TEXTS[:200])


def test_empty_batches_and_types(vocab_dir):
    tok = load_tokenizer(vocab_dir / "bert_uncased")
    ids, lengths = tok.encode_ids_flat([])
    assert ids.shape == (0,) and lengths.shape == (0,)
    assert tok.encode_ids_batch([""]) == [tok.encode("").ids]
    with pytest.raises(TypeError, match="every text must be a str"):
        tok.encode_ids_batch(["a", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="one str"):
        tok.encode_ids_batch("abc")


def test_caches_stay_behind_when_pickled(vocab_dir):
    tok = load_tokenizer(vocab_dir / "roberta")
    tok.encode_ids_batch(TEXTS[:50])
    assert len(tok.__dict__["_ids_cache"]) > 1
    copy = pickle.loads(pickle.dumps(tok))
    assert "_ids_cache" not in copy.__dict__
    assert copy.encode_ids_batch(TEXTS[:50]) == tok.encode_ids_batch(TEXTS[:50])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lowercase": False},
        {"clean_text": False},
        {"handle_chinese_chars": False, "strip_accents": False},
    ],
)
def test_bert_normalize_str_is_normalize_without_alignment(kwargs):
    n = norm.BertNormalizer(**kwargs)
    for text in TEXTS:
        assert n.normalize_str(text) == n.normalize(norm.NormalizedString(text)).normalized, text


def test_parallel_encoding_takes_the_same_ids(vocab_dir):
    tok = load_tokenizer(vocab_dir / "bert_uncased")
    expected = full_ids(tok, TEXTS, True)
    ids, lengths = encode_texts_flat(tok, TEXTS, num_workers=2, chunk_size=300, add_special_tokens=True)
    assert ids.dtype == np.uint16 and lengths.tolist() == [len(x) for x in expected]
    assert ids.tolist() == [i for x in expected for i in x]
    assert encode_texts(tok, TEXTS, num_workers=1, add_special_tokens=True) == expected


@pytest.mark.data
@needs(BOOKS)
def test_ids_only_on_books(tmp_path):
    """Vocabularies trained by HF on one book; the lean ids of other books' lines equal the full encode's and
    HF tokenizers'."""
    tokenizers = pytest.importorskip("tokenizers")
    files = sorted(BOOKS.glob("*.txt"))[:6]
    train = files[0].read_text(encoding="utf-8", errors="replace")[:400_000].splitlines()
    lines = [
        ln for f in files[1:] for ln in f.read_text(encoding="utf-8", errors="replace")[:150_000].splitlines()
    ]
    hf_wp = tokenizers.BertWordPieceTokenizer(lowercase=True)
    hf_wp.train_from_iterator(train, vocab_size=4000, show_progress=False)
    hf_bl = tokenizers.ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    hf_bl.train_from_iterator(train, vocab_size=3000, show_progress=False, special_tokens=specials)
    for name, hf in (("bert", hf_wp), ("roberta", hf_bl)):
        (tmp_path / name).mkdir()
        hf.save_model(str(tmp_path / name))
    pairs = (
        (load_tokenizer(tmp_path / "bert"), hf_bert(tmp_path / "bert", True)),
        (load_tokenizer(tmp_path / "roberta"), hf_roberta(tmp_path / "roberta")),
    )
    for ours, ref in pairs:
        expected = [e.ids for e in ref.encode_batch(lines)]
        assert full_ids(ours, lines, True) == expected
        assert ours.encode_ids_batch(lines) == expected
