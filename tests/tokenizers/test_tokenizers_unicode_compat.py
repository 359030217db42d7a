"""The Unicode data attnlab's tokenizers share with HF tokenizers (``attnlab.tokenizers.unicode_compat``).

Default run: golden characters from every table, each checked against HF's own component and against the
expected answer, and the regressions found by fuzzing (unassigned code points deleted by BERT's normaliser; an
unknown character dropped by BPE behind it). ``slow``: every code point through every table, against HF
(fails when a new HF, Python or ``regex`` version changes the data: regenerate the tables from the sets the
failure prints).
"""

from __future__ import annotations

import json
import random
import unicodedata

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402

from attnlab.tokenizers import Tokenizer, bert_wordpiece  # noqa: E402
from attnlab.tokenizers import normalizers as ON  # noqa: E402
from attnlab.tokenizers import pre_tokenizers as OP  # noqa: E402
from attnlab.tokenizers import unicode_compat as U  # noqa: E402
from attnlab.tokenizers.files import tokenizer_from_json_str  # noqa: E402
from attnlab.tokenizers.json_floats import serde_float  # noqa: E402

BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b", "e", "##e", "ab", ",", "|"]


def hf_bert() -> HFTokenizer:
    t = HFTokenizer(models.WordPiece({w: i for i, w in enumerate(BERT_VOCAB)}, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return t


@pytest.mark.parametrize("text", ["\u0378", "\ud7ff", "\U00081eed", "a\u0378b", "ab \U000e0080 ,"])
def test_unassigned_code_points_are_unknown_tokens_not_deleted(text):
    """Cn code points: HF keeps them and WordPiece makes them [UNK] (google-research/bert deletes them)."""
    ours = bert_wordpiece({w: i for i, w in enumerate(BERT_VOCAB)})
    want = hf_bert().encode(text)
    got = ours.encode(text, add_special_tokens=False)
    assert (got.ids, got.offsets, got.word_ids) == (want.ids, want.offsets, want.word_ids)
    assert 1 in got.ids  # [UNK]
    assert ours.encode_ids_batch([text], add_special_tokens=False) == [want.ids]


@pytest.mark.parametrize(
    "text",
    [
        "a\u09fe\u05b1b \u00e9\u0323",  # a mark HF gives class 0 (never moved), a canonical reordering
        "x \U0001e024\u0c56\u203a y",  # reordered marks, one of which HF keeps
        "\u1a66\u0345\U000f0000\U000116b6B",  # marks made neighbours by clean_text's deletion
    ],
)
def test_marks_reordered_by_nfd_align_as_hf(text):
    ours = bert_wordpiece({w: i for i, w in enumerate(BERT_VOCAB)})
    want = hf_bert().encode(text)
    got = ours.encode(text, add_special_tokens=False)
    assert (got.ids, got.offsets) == (want.ids, want.offsets)
    assert ours.encode_ids_batch([text], add_special_tokens=False) == [want.ids]


def test_private_use_and_format_characters_are_still_removed():
    n = ON.BertNormalizer()
    assert n.normalize_str("a\ue000b\U000f0000c\u200bd\x01") == "abcd"
    assert n.normalize_str("\u0890x") == "\u0890x"  # a Cf HF's table does not know: kept, as HF


def test_bpe_unknown_character_behind_bert_normaliser_is_the_unknown_id():
    """The reported '\\U00081eed' -> []: the BERT normaliser deleted it before BPE saw it."""
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
    for fuse_unk in (False, True):
        ref = HFTokenizer(models.BPE(vocab, [("a", "b")], unk_token="<unk>", fuse_unk=fuse_unk))
        ref.normalizer = normalizers.BertNormalizer()
        ref.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        ours = tokenizer_from_json_str(ref.to_str())
        for text in ["\U00081eed", "ab\U00081eed\U00081eedb", "\U00081eed ab"]:
            want = ref.encode(text)
            got = ours.encode(text)
            assert (got.ids, got.offsets) == (want.ids, want.offsets), (fuse_unk, ascii(text))
            assert ours.encode_ids_batch([text]) == [want.ids]
        assert ours.encode("\U00081eed").ids == [0]


# One or two code points from every table, with what HF does with them.
GOLDEN_NORMALIZE = [
    (
        normalizers.BertNormalizer(lowercase=False),
        ON.BertNormalizer(lowercase=False),
        "\u0890\u200b\U000110cd",
    ),
    (normalizers.BertNormalizer(), ON.BertNormalizer(), "a\u07fdb\u1734c\U00011938\u1c89\ua7cb"),
    (normalizers.BertNormalizer(), ON.BertNormalizer(), "e\u0301\u09fe\u05b1 \u00e9\u0323"),
    (normalizers.BertNormalizer(), ON.BertNormalizer(), "a\uf9c4b\U0002f800\u5b57"),  # CJK compatibility
    (normalizers.NFKC(), ON.NFKC(), "\u32ff\ua7f2\U0001f16c\u2460\ufb01"),
    (normalizers.NFD(), ON.NFD(), "\U00011938\u09fe\u05b1\u00e9\u0323"),
    (normalizers.Lowercase(), ON.Lowercase(), "\u1c89\ua7cb\u0130"),
    (
        normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents()]),
        ON.Sequence([ON.NFKD(), ON.StripAccents()]),
        "\u0903\u1cf2\u07fd\u00e9",
    ),
]


@pytest.mark.parametrize("case", range(len(GOLDEN_NORMALIZE)))
def test_golden_table_characters_normalise_as_hf(case):
    h, o, text = GOLDEN_NORMALIZE[case]
    assert o.normalize_str(text) == h.normalize_str(text)


GOLDEN_SPLIT = [
    (pre_tokenizers.BertPreTokenizer(), OP.BertPreTokenizer(), "a\u061da|b\u166dc\u2e55d"),
    (
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        OP.ByteLevel(add_prefix_space=False),
        "\U0003d82a\U0002e058 x\u0558y",
    ),
    (pre_tokenizers.Whitespace(), OP.Whitespace(), "x\u00bd\u1753y a\u200db \u0558q"),
    (pre_tokenizers.Digits(), OP.Digits(), "1\U00011de02\u00bd"),
]


@pytest.mark.parametrize("case", range(len(GOLDEN_SPLIT)))
def test_golden_table_characters_split_as_hf(case):
    h, o, text = GOLDEN_SPLIT[case]
    assert o.pre_tokenize_str(text) == h.pre_tokenize_str(text)


def test_tokenizer_json_scores_are_read_as_hf_reads_them(tmp_path):
    """serde_json's number parser: every Unigram score the same float64 as HF's (1 in ~20 differs from the
    correctly rounded value, which changed near-tie segmentations)."""
    rng = random.Random(0)
    lines = ["".join(rng.choice("abcdeé字 ") for _ in range(rng.randint(5, 60))) for _ in range(800)]
    t = HFTokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.train_from_iterator(
        lines, trainers.UnigramTrainer(vocab_size=300, unk_token="<unk>", special_tokens=["<unk>"])
    )
    t.save(str(tmp_path / "u.json"))
    text = (tmp_path / "u.json").read_text(encoding="utf-8")
    hf_scores = [
        s for _, s in json.loads(HFTokenizer.from_file(str(tmp_path / "u.json")).to_str())["model"]["vocab"]
    ]
    exact = [s for _, s in json.loads(text)["model"]["vocab"]]
    ours = Tokenizer.from_file(tmp_path / "u.json")
    assert [s for _, s in ours.model.pieces] == hf_scores
    assert exact != hf_scores  # the case the emulation exists for occurs in this vocabulary
    ref = HFTokenizer.from_file(str(tmp_path / "u.json"))
    for line in lines[:200] + ["é" * 101, "字" * 151, "ab" * 90]:
        assert ours.encode(line).ids == ref.encode(line).ids, line


@pytest.mark.parametrize(
    "literal",
    ["-3.8812995978351763", "0.1", "-1e-05", "1.5E+300", "123456789012345678901234.5", "-0.0", "4.9e-324"],
)
def test_serde_float_reads_what_hf_reads(literal):
    """HF loads a score written as ``literal`` and writes back its float64 (shortest form: exact here)."""
    template = HFTokenizer(models.Unigram([("<unk>", 0.5)], 0)).to_str()
    assert template.count("0.5") == 1
    hf_value = json.loads(HFTokenizer.from_str(template.replace("0.5", literal)).to_str())["model"]["vocab"][
        0
    ][1]
    assert serde_float(literal) == hf_value


# ----------------------------------------------------------------------------------------------------------
# Every code point (slow)

_SEP = "\x00"


def _code_points(exclude: str = "") -> list[int]:
    return [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in exclude]


def _per_char(fn, cps: list[int], sep: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for i in range(0, len(cps), 4096):
        chunk = [chr(c) for c in cps[i : i + 4096]]
        res = fn(sep.join(chunk)).split(sep)
        assert len(res) == len(chunk)
        out.update((ord(c), r) for c, r in zip(chunk, res))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, hf, ours, sep",
    [
        (
            "clean_text",
            normalizers.BertNormalizer(True, False, False, False),
            ON.BertNormalizer(True, False, False, False),
            "|",
        ),
        (
            "strip_accents",
            normalizers.BertNormalizer(False, False, True, False),
            ON.BertNormalizer(False, False, True, False),
            "|",
        ),
        ("bert_uncased", normalizers.BertNormalizer(), ON.BertNormalizer(), "|"),
        ("bert_cased", normalizers.BertNormalizer(lowercase=False), ON.BertNormalizer(lowercase=False), "|"),
        ("lowercase", normalizers.Lowercase(), ON.Lowercase(), _SEP),
        ("NFD", normalizers.NFD(), ON.NFD(), _SEP),
        ("NFKD", normalizers.NFKD(), ON.NFKD(), _SEP),
        ("NFKC", normalizers.NFKC(), ON.NFKC(), _SEP),
        ("StripAccents", normalizers.StripAccents(), ON.StripAccents(), "|"),
    ],
)
def test_every_code_point_normalises_as_hf(name, hf, ours, sep):
    cps = _code_points(exclude=sep)
    want = _per_char(hf.normalize_str, cps, sep)
    got = _per_char(ours.normalize_str, cps, sep)
    bad = sorted(c for c in cps if want[c] != got[c])
    assert not bad, (name, len(bad), [f"{c:X}" for c in bad[:40]])


def _onig_members(pattern: str, cps: list[int]) -> set[int]:
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    members: set[int] = set()
    for i in range(0, len(cps), 4096):
        chunk = [chr(c) for c in cps[i : i + 4096]]
        kept = {ch for piece, _ in split.pre_tokenize_str("".join(chunk)) for ch in piece}
        members.update(ord(c) for c in chunk if c not in kept)
    return members


def test_bert_punctuation_class_is_the_table_on_every_code_point():
    """The pre-tokeniser's compact class (regex's \\p{P} with exceptions) holds exactly BERT_PUNCTUATION: a
    new regex version that moves \\p{P} fails here."""
    import regex

    every = "".join(map(chr, range(0x110000)))
    ours = {ord(c) for c in regex.findall(U.bert_punctuation_class(), every, regex.V1)}
    table = {c for lo, hi in U.BERT_PUNCTUATION.pairs for c in range(lo, hi + 1)}
    diff = ours ^ table
    assert not diff, [f"{c:X}" for c in sorted(diff)[:40]]
    assert ours == {ord(c) for c in every if OP._PUNCT_RE.match(c)}


@pytest.mark.slow
def test_every_code_point_classes_as_hf():
    """BERT's punctuation, Oniguruma's letters and numbers, the Whitespace pre-tokeniser's word characters and
    the marks NFD reorders: each code point against HF."""
    import regex

    cps = _code_points()
    hf_bert_split = pre_tokenizers.BertPreTokenizer()
    punct = {c for c in cps if len(hf_bert_split.pre_tokenize_str(f"a{chr(c)}a")) == 3}
    assert not punct ^ {c for c in cps if U.hf_is_punctuation(chr(c))}
    for name, onig in ((r"\p{L}", U.onig_class(r"\p{L}")), (r"\p{N}", U.onig_class(r"\p{N}"))):
        ours = regex.compile(onig, regex.V1)
        diff = _onig_members(name, cps) ^ {c for c in cps if ours.match(chr(c))}
        assert not diff, (name, [f"{c:X}" for c in sorted(diff)[:40]])
    ws = pre_tokenizers.Whitespace()
    word = regex.compile(U.onig_class(r"\w"), regex.V1)
    space = set(map(ord, ON.WHITESPACE))
    hf_word = {c for c in cps if c not in space and len(ws.pre_tokenize_str("a" + chr(c))) == 1}
    diff = hf_word ^ {c for c in cps if c not in space and word.match(chr(c))}
    assert not diff, [f"{c:X}" for c in sorted(diff)[:40]]
    nfd = normalizers.NFD()
    marks = [c for c in cps if unicodedata.combining(chr(c)) > 1]
    hf_class0 = {c for c in marks if nfd.normalize_str(chr(c) + "\u0334") == chr(c) + "\u0334"}
    assert hf_class0 == {c for c in marks if U.hf_combining(chr(c)) == 0}


# ----------------------------------------------------------------------------------------------------------
# A newer Python's Unicode (3.12: 15.0, 3.13: 15.1, 3.14: 16.0), emulated with the unicodedata2 backport


@pytest.fixture
def newer_unicodedata(monkeypatch):
    """Python's ``unicodedata`` replaced, in every tokenizer module that reads it, by the unicodedata2
    backport of a newer Unicode, as a newer Python has it. The reference answers (HF's) stay the same: its
    tables do not follow Python's. Only on Python 3.11, whose Unicode 14 the tables were measured against."""
    if unicodedata.unidata_version != "14.0.0":
        pytest.skip("the emulation starts from Python 3.11's Unicode 14 (elsewhere the sweeps run as is)")
    ud2 = pytest.importorskip("unicodedata2")
    assert U.newer_unicode(ud2.unidata_version), ud2.unidata_version
    from attnlab.tokenizers import unicode_forms as UF

    for module in (U, ON, UF):
        monkeypatch.setattr(module, "unicodedata", ud2)
        monkeypatch.setattr(module, "UNASSIGNED_IN_14", U.ASSIGNED_AFTER_14)
    monkeypatch.setattr(ON, "_HF_TABLE_CHARS", ON._hf_table_chars())
    monkeypatch.setattr(UF, "_COMPOSE_CACHE", {})
    return ud2


def _newer_code_points() -> list[int]:
    """Every code point assigned after Unicode 14 or recategorised, and a seeded sample of the others."""
    changed = {c for lo, hi in U.ASSIGNED_AFTER_14.pairs for c in range(lo, hi + 1)} | set(U.CATEGORY_14)
    rest = random.Random(0).sample([c for c in _code_points() if c not in changed], 5_000)
    return sorted(changed) + rest


def test_the_backport_really_differs_from_python_3_11(newer_unicodedata):
    """The emulation is one: the newer Unicode assigns what 14.0 does not, and Python's own answers for them
    would differ from HF's (so the test below could fail)."""
    ud2 = newer_unicodedata
    assert unicodedata.category("\u0ece") == "Cn" and ud2.category("\u0ece") == "Mn"  # Lao, new in 15.0
    assert unicodedata.normalize("NFKC", "\U0001e05f") == "\U0001e05f"  # Cyrillic Extended-D, new in 15.0
    assert ud2.normalize("NFKC", "\U0001e05f") != "\U0001e05f"
    assert U.category("\u0ece") == "Cn" and U.hf_decomposition("\U0001e05f", True) == "\U0001e05f"


def test_unicode_14_view_of_a_newer_python_answers_as_python_3_11(newer_unicodedata):
    """The per-character answers the normalisers are built on, under the newer Unicode, equal Python 3.11's
    (which equal HF's, by the sweeps above)."""
    from attnlab.tokenizers import unicode_forms as UF

    real = unicodedata
    for cp in _newer_code_points():
        ch = chr(cp)
        assert U.category(ch) == real.category(ch), f"{cp:X}"
        assert U.hf_combining(ch) == (0 if cp in U.CCC_UNKNOWN else real.combining(ch)), f"{cp:X}"
        for compat in (False, True):
            unknown = cp in U.NFD_UNKNOWN or (compat and cp in U.NFKD_UNKNOWN)
            want = ch if unknown else real.normalize("NFKD" if compat else "NFD", ch)
            assert U.hf_decomposition(ch, compat) == want, (f"{cp:X}", compat)
        assert U.hf_lower(ch) == (U.LOWERCASE_EXTRA.get(cp) or ch.lower()), f"{cp:X}"
        assert U.is_alnum(ch) == ch.isalnum()
    # a composite the newer Unicode has and 14.0 does not (Tulu-Tigalari, 16.0: U+113C5 = U+113C2 U+113C2)
    assert newer_unicodedata.normalize("NFC", "\U000113c2\U000113c2") == "\U000113c5"
    assert UF._compose("\U000113c2", "\U000113c2") is None


@pytest.mark.parametrize(
    "hf, ours, sep",
    [
        (normalizers.BertNormalizer(), ON.BertNormalizer(), "|"),
        (normalizers.BertNormalizer(lowercase=False), ON.BertNormalizer(lowercase=False), "|"),
        (normalizers.NFD(), ON.NFD(), _SEP),
        (normalizers.NFKD(), ON.NFKD(), _SEP),
        (normalizers.NFC(), ON.NFC(), _SEP),
        (normalizers.NFKC(), ON.NFKC(), _SEP),
        (normalizers.StripAccents(), ON.StripAccents(), "|"),
        (normalizers.Lowercase(), ON.Lowercase(), _SEP),
    ],
    ids=["bert_uncased", "bert_cased", "NFD", "NFKD", "NFC", "NFKC", "StripAccents", "lowercase"],
)
def test_newer_python_normalises_new_characters_as_hf(newer_unicodedata, hf, ours, sep):
    """The normalisers under the newer Unicode, one character at a time and whole texts with marks, against HF
    (Python 3.12's NFKC of U+1E05F, a superscript Cyrillic letter since 15.0, broke parity before)."""
    cps = [c for c in _newer_code_points() if chr(c) != sep]
    want = _per_char(hf.normalize_str, cps, sep)
    got = _per_char(ours.normalize_str, cps, sep)
    bad = sorted(c for c in cps if want[c] != got[c])
    assert not bad, (len(bad), [f"{c:X}" for c in bad[:40]])
    rng = random.Random(1)
    for _ in range(200):
        marks = ["", "\u0301", "\u0323\u0301", " ", "e"]
        text = "".join(chr(rng.choice(cps)) + rng.choice(marks) for _ in range(8))
        assert ours.normalize_str(text) == hf.normalize_str(text), ascii(text)


def test_newer_python_tokenizes_new_characters_as_hf(newer_unicodedata):
    """A BERT WordPiece tokenizer end to end (clean-up, accents, punctuation split, offsets) under the newer
    Unicode: the two texts the fuzz test failed on with Python 3.12, and runs of new characters."""
    hf = hf_bert()
    ours = tokenizer_from_json_str(hf.to_str())
    texts = [
        "is\t\u03c2B\u2994\u0ece\t\U0001e05f a",
        "in \U0001f82bp\u2a916\u6f0f\u5975\u72ea\U0001e064\u20e3\u2028\u1ba7\u20e2",
        "".join(chr(c) for c in range(0x1E030, 0x1E06E)) + " ab\u0ece,e\U000113c2\U000113c2",
    ]
    for text in texts:
        a, b = ours.encode(text), hf.encode(text)
        assert (a.tokens, a.offsets) == (b.tokens, b.offsets), ascii(text)


def test_ranges_truth_is_emptiness_without_counting():
    assert not U._Ranges("") and U._Ranges("41") and len(U._Ranges("41-43 61")) == 4
