"""Parity with HF tokenizers (test-only reference): the same vocabulary files must give identical ids,
tokens, offsets, type ids, masks and word ids, on generated adversarial Unicode and (when present) on real
books.

The reference vocabularies are trained here with HF tokenizers' own trainers on a small generated corpus,
saved to the field's files, and loaded into both libraries.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from shared_data import DATA, needs  # noqa: E402
from tokenizers import AddedToken as HFAddedToken  # noqa: E402
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402

from attnlab.tokenizers import Tokenizer, load_tokenizer  # noqa: E402

BOOKS = DATA / "books" / "en"

FIELDS = ("ids", "tokens", "offsets", "type_ids", "special_tokens_mask", "attention_mask", "word_ids")

# Characters the adversarial generator draws from: ASCII, punctuation and symbols, every whitespace kind,
# combining marks, CJK, emoji, Hebrew and Arabic (right to left), control and zero-width characters,
# compatibility characters (ligatures, full-width, circled digits), case-mapping oddities (İ, ß, final sigma).
ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 4
    + list(" \t\n\r  ,.;:!?'\"()-$+<=>^`|~@#%&*[]{}/\\_") * 2
    + [chr(c) for c in range(0x300, 0x370)]
    + [chr(c) for c in range(0x4E00, 0x4E40)]
    + [chr(c) for c in range(0x1F600, 0x1F650)]
    + [chr(c) for c in range(0x5D0, 0x5EB)]
    + [chr(c) for c in range(0x627, 0x64B)]
    + [chr(c) for c in [*range(0, 32), 0x7F, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x3000]]
    + ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\ufffd", "\u00ad"]
    + list("éèêëàâäôöûüçñÉÈÀÇßİıΣσςΑΒΓάέŉǅ")
    + ["ﬁ", "ﬂ", "Ａ", "ｂ", "①", "²", "½", "Å", "Ω", "K", "ẛ", "\u0345"]
    + list("가나다한국어ひらがなカタカナ")
)

WORDS = (
    "the of and to in a is that for it as was with be by on not he I this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no more out up "
    "into do any your what time about than other could only new some very my these also after should "
    "first two may well where then running unwanted wanted happily unhappily tokenizer tokenization "
    "question answering transformer attention naïve café résumé coöperate Zürich São Paulo Ελλάδα Москва "
    "東京 北京 مرحبا שלום don't can't it's we'll"
).split()


def adversarial_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "   \t\n ", "\u200b", "a", "[CLS]", "<mask>", "x" * 99, "x" * 100, "x" * 101, "é" * 120]
    while len(out) < n:
        k = rng.choice([1, 3, 10, 40, 160])
        s = "".join(rng.choice(ALPHABET) for _ in range(k))
        if rng.random() < 0.3:
            s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + " " + s
        if rng.random() < 0.05:
            s += " " + "a" * rng.choice([99, 100, 101, 300])
        out.append(s)
    return out


def corpus_lines(n: int = 3000, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 20))]
        if rng.random() < 0.2:
            words.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 6))))
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", ""]))
    return lines


def assert_same(ours, ref, texts, pairs: bool = False) -> None:
    for i, text in enumerate(texts):
        pair = texts[(7 * i + 3) % len(texts)] if pairs else None
        a = ours.encode(text, pair)
        b = ref.encode(text, pair)
        for f in FIELDS:
            assert list(getattr(a, f)) == list(getattr(b, f)), (f, text, pair)


def _train(tok: HFTokenizer, trainer, lines: list[str]) -> HFTokenizer:
    tok.train_from_iterator(lines, trainer)
    return tok


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> Path:
    """BERT uncased/cased vocab.txt, byte-level BPE vocab.json + merges.txt and a Unigram tokenizer.json."""
    root = tmp_path_factory.mktemp("vocabs")
    lines = corpus_lines()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for name, lower in (("bert_uncased", True), ("bert_cased", False)):
        t = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
        t.normalizer = normalizers.BertNormalizer(lowercase=lower)
        t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        _train(t, trainers.WordPieceTrainer(vocab_size=1200, special_tokens=specials), lines)
        (root / name).mkdir()
        t.model.save(str(root / name))
        (root / name / "tokenizer_config.json").write_text(f'{{"do_lower_case": {str(lower).lower()}}}')
    t = HFTokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    _train(
        t,
        trainers.BpeTrainer(
            vocab_size=1000,
            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
        lines,
    )
    (root / "roberta").mkdir()
    t.model.save(str(root / "roberta"))
    t = HFTokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence(
        [
            normalizers.Replace("``", '"'),
            normalizers.Replace("''", '"'),
            normalizers.NFKD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    _train(t, trainers.UnigramTrainer(vocab_size=800, special_tokens=specials, unk_token="[UNK]"), lines)
    v = t.get_vocab()
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"])],
    )
    (root / "unigram").mkdir()
    t.save(str(root / "unigram" / "tokenizer.json"))
    return root


def hf_bert(path: Path, lowercase: bool) -> HFTokenizer:
    from tokenizers.implementations import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=lowercase)._tokenizer


def hf_roberta(path: Path) -> HFTokenizer:
    t = HFTokenizer(models.BPE.from_file(str(path / "vocab.json"), str(path / "merges.txt")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    v = t.get_vocab()
    t.post_processor = processors.RobertaProcessing(
        ("</s>", v["</s>"]), ("<s>", v["<s>"]), add_prefix_space=False
    )
    t.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", HFAddedToken("<mask>", lstrip=True)])
    return t


TEXTS = adversarial_texts(600)


@pytest.mark.parametrize("cased", [False, True], ids=["uncased", "cased"])
def test_wordpiece_parity_adversarial(vocab_dir, cased):
    name = "bert_cased" if cased else "bert_uncased"
    ours = load_tokenizer(vocab_dir / name)
    ref = hf_bert(vocab_dir / name, lowercase=not cased)
    assert_same(ours, ref, TEXTS)
    assert_same(ours, ref, TEXTS[:200], pairs=True)


def test_byte_level_bpe_parity_adversarial(vocab_dir):
    ours = load_tokenizer(vocab_dir / "roberta")
    ref = hf_roberta(vocab_dir / "roberta")
    texts = [*TEXTS, "Hello <mask> world", "a  <mask>b", " <mask>", "<s>x</s>", "  lead", "trail  "]
    assert_same(ours, ref, texts)
    assert_same(ours, ref, texts[:200], pairs=True)


def test_unigram_parity_adversarial(vocab_dir):
    path = vocab_dir / "unigram" / "tokenizer.json"
    ours = Tokenizer.from_file(path)
    ref = HFTokenizer.from_file(str(path))
    assert_same(ours, ref, TEXTS)
    assert_same(ours, ref, TEXTS[:200], pairs=True)


@pytest.mark.parametrize("name", ["bert_uncased", "roberta", "unigram"])
def test_tokenizer_json_round_trip_through_hf(vocab_dir, tmp_path, name):
    """Our tokenizer.json loads in HF tokenizers and encodes identically; HF's loads in ours likewise."""
    if name == "unigram":
        ours = Tokenizer.from_file(vocab_dir / "unigram" / "tokenizer.json")
    else:
        ours = load_tokenizer(vocab_dir / name)
    ours.save(tmp_path / "tokenizer.json")
    ref = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert_same(ours, ref, TEXTS[:300])
    ref_path = tmp_path / "hf.json"
    (hf_bert(vocab_dir / name, True) if name == "bert_uncased" else ref).save(str(ref_path))
    assert_same(Tokenizer.from_file(ref_path), HFTokenizer.from_file(str(ref_path)), TEXTS[:300])


def test_decode_parity(vocab_dir):
    for name, ref in (
        ("bert_uncased", hf_bert(vocab_dir / "bert_uncased", True)),
        ("roberta", hf_roberta(vocab_dir / "roberta")),
    ):
        ours = load_tokenizer(vocab_dir / name)
        for text in TEXTS[:200]:
            ids = ref.encode(text).ids
            assert ours.decode(ids) == ref.decode(ids), (name, text)
            assert ours.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False)


TRUNCATION = [
    ("longest_first", 16, 0, "right"),
    ("longest_first", 20, 4, "right"),
    ("only_second", 24, 6, "right"),
    ("only_first", 40, 3, "left"),
    ("longest_first", 9, 2, "left"),
]
PADDING = [None, ("right", None, None), ("left", 48, None), ("right", None, 8)]


@pytest.mark.parametrize("name", ["bert_uncased", "roberta"])
def test_truncation_overflow_padding_parity(vocab_dir, name):
    """Pairs, truncation strategies with stride and overflowing windows, padding: HF's enable_truncation /
    enable_padding against ours, window by window."""
    ours = load_tokenizer(vocab_dir / name)
    ref = hf_bert(vocab_dir / name, True) if name == "bert_uncased" else hf_roberta(vocab_dir / name)
    pad_token = "[PAD]" if name == "bert_uncased" else "<pad>"
    rng = random.Random(3)

    def sent(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    batches = []
    for _ in range(25):
        pair = rng.random() < 0.6
        batches.append(
            [(sent(rng.randint(0, 12)), sent(rng.randint(0, 25))) if pair else sent(rng.randint(0, 25))]
            * rng.choice([1, 3])
        )
    checked = 0
    for strategy, max_length, stride, direction in TRUNCATION:
        for pad in PADDING:
            for t in (ours, ref):
                t.enable_truncation(max_length, stride=stride, strategy=strategy, direction=direction)
                if pad is None:
                    t.no_padding()
                else:
                    t.enable_padding(
                        direction=pad[0],
                        length=pad[1],
                        pad_to_multiple_of=pad[2],
                        pad_id=ours.token_to_id(pad_token),
                        pad_token=pad_token,
                    )
            for batch in batches:
                try:
                    expected = ref.encode_batch(batch)
                except BaseException:  # HF raises (or panics) on impossible settings: so must we
                    with pytest.raises(ValueError):
                        ours.encode_batch(batch)
                    continue
                got = ours.encode_batch(batch)
                for e, g in zip(expected, got):
                    windows_e, windows_g = [e, *e.overflowing], [g, *g.overflowing]
                    assert len(windows_e) == len(windows_g)
                    for we, wg in zip(windows_e, windows_g):
                        for f in FIELDS:
                            assert list(getattr(wg, f)) == list(getattr(we, f)), (f, strategy, pad, batch)
                        assert list(wg.sequence_ids) == [we.sequence_ids[i] for i in range(len(we.ids))]
                checked += 1
    assert checked > 100


@pytest.mark.data
@needs(BOOKS)
def test_parity_on_books(tmp_path):
    """Vocabularies trained by HF on real books; identical encodings of other books' lines."""
    files = sorted(BOOKS.glob("*.txt"))[:4]
    train_text = files[0].read_text(encoding="utf-8", errors="replace")[:400_000].splitlines()
    test_lines = [
        ln for f in files[1:] for ln in f.read_text(encoding="utf-8", errors="replace")[:60_000].splitlines()
    ]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    t = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    _train(t, trainers.WordPieceTrainer(vocab_size=4000, special_tokens=specials), train_text)
    (tmp_path / "bert").mkdir()
    t.model.save(str(tmp_path / "bert"))
    assert_same(load_tokenizer(tmp_path / "bert"), hf_bert(tmp_path / "bert", True), test_lines)
    t = HFTokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    _train(
        t,
        trainers.BpeTrainer(
            vocab_size=3000,
            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
        train_text,
    )
    (tmp_path / "roberta").mkdir()
    t.model.save(str(tmp_path / "roberta"))
    assert_same(load_tokenizer(tmp_path / "roberta"), hf_roberta(tmp_path / "roberta"), test_lines)


@pytest.mark.parametrize("name", ["bert_uncased", "roberta"])
def test_added_tokens_parity(vocab_dir, name):
    """User-added tokens, matched in the normalised text (normalized=True) or the original one."""
    from attnlab.tokenizers import AddedToken

    ours = load_tokenizer(vocab_dir / name)
    ref = hf_bert(vocab_dir / name, True) if name == "bert_uncased" else hf_roberta(vocab_dir / name)
    added = [("Hello", True), ("WöRld", True), ("zz top", False), ("<ent>", False)]
    ref.add_tokens([HFAddedToken(c, normalized=n) for c, n in added])
    ours.add_tokens([AddedToken(c, normalized=n, special=False) for c, n in added])
    texts = [*TEXTS[:300], "hello HELLO Hello world wörld WÖRLD zz top <ent>x", "say hello", "ahellob"]
    assert_same(ours, ref, texts)
    assert_same(ours, ref, texts[:100], pairs=True)
    for text in texts[-3:]:
        assert ours.decode(ours.encode(text).ids) == ref.decode(ref.encode(text).ids)


@pytest.mark.parametrize("name", ["bert_uncased", "bert_cased"])
def test_pretokenized_words_parity(vocab_dir, name):
    """Word lists (CoNLL NER style): word ids are list indices, offsets relative to each word, as HF."""
    ours = load_tokenizer(vocab_dir / name)
    ref = hf_bert(vocab_dir / name, lowercase=name == "bert_uncased")
    rng = random.Random(5)
    for _ in range(100):
        words = [rng.choice([*WORDS, *TEXTS[:50]]) for _ in range(rng.randint(0, 12))]
        words = [w for w in words if w]
        pair = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
        for a, b in (
            (ours.encode(words, is_pretokenized=True), ref.encode(words, is_pretokenized=True)),
            (ours.encode(words, pair, is_pretokenized=True), ref.encode(words, pair, is_pretokenized=True)),
        ):
            for f in FIELDS:
                assert list(getattr(a, f)) == list(getattr(b, f)), (f, words)


def _pre_tokenizer_pairs():
    from attnlab.tokenizers import pre_tokenizers as O

    H = pre_tokenizers
    return [
        (H.Whitespace(), O.Whitespace()),
        (H.WhitespaceSplit(), O.WhitespaceSplit()),
        (H.BertPreTokenizer(), O.BertPreTokenizer()),
        (H.ByteLevel(add_prefix_space=False), O.ByteLevel(add_prefix_space=False)),
        (H.ByteLevel(add_prefix_space=True), O.ByteLevel(add_prefix_space=True)),
        (
            H.ByteLevel(add_prefix_space=False, use_regex=False),
            O.ByteLevel(add_prefix_space=False, use_regex=False),
        ),
        (H.Metaspace(), O.Metaspace()),
        (H.Metaspace(prepend_scheme="first"), O.Metaspace(prepend_scheme="first")),
        (H.Metaspace(prepend_scheme="never"), O.Metaspace(prepend_scheme="never")),
        (H.Metaspace(split=False), O.Metaspace(split=False)),
        *[
            (H.Punctuation(b), O.Punctuation(b))
            for b in ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")
        ],
        (H.Digits(), O.Digits()),
        (H.Digits(individual_digits=True), O.Digits(individual_digits=True)),
        (H.Split(Regex(r"\s+"), "removed"), O.Split(r"\s+", "removed")),
        (H.Split("a", "isolated", invert=True), O.Split("a", "isolated", invert=True, is_regex=False)),
        (
            H.Sequence([H.WhitespaceSplit(), H.Digits(True), H.Punctuation()]),
            O.Sequence([O.WhitespaceSplit(), O.Digits(True), O.Punctuation()]),
        ),
    ]


def test_pre_tokenizers_and_normalizers_parity():
    from attnlab.tokenizers import normalizers as ON

    texts = adversarial_texts(300, seed=4) + ["a  b", " x", "x ", "▁a", "12345 x1y22 ½²", "a,,b..c", "  "]
    for h, o in _pre_tokenizer_pairs():
        for t in texts:
            assert o.pre_tokenize_str(t) == h.pre_tokenize_str(t), (type(o).__name__, t)
    HN = normalizers
    pairs = [
        (HN.NFC(), ON.NFC()),
        (HN.NFD(), ON.NFD()),
        (HN.NFKC(), ON.NFKC()),
        (HN.NFKD(), ON.NFKD()),
        (HN.Lowercase(), ON.Lowercase()),
        (HN.Strip(), ON.Strip()),
        (HN.Sequence([HN.NFD(), HN.StripAccents()]), ON.Sequence([ON.NFD(), ON.StripAccents()])),
        (HN.Prepend("▁"), ON.Prepend("▁")),
        (HN.Replace(Regex(r"\s+"), "_"), ON.Replace(r"\s+", "_", is_regex=True)),
        (HN.BertNormalizer(lowercase=True), ON.BertNormalizer(lowercase=True)),
        (
            HN.BertNormalizer(lowercase=False, strip_accents=True),
            ON.BertNormalizer(lowercase=False, strip_accents=True),
        ),
    ]
    for h, o in pairs:
        for t in texts:
            assert o.normalize_str(t) == h.normalize_str(t), (type(o).__name__, t)


def test_bpe_variants_parity(tmp_path):
    """BPE with an end-of-word suffix, a continuation prefix, fused unknowns, and SentencePiece-style byte
    fallback: tokenizer.json from HF, identical encodings and decodings."""
    lines = corpus_lines(1500)
    configs = {
        "suffix": (
            models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"),
            trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], end_of_word_suffix="</w>"),
            pre_tokenizers.Whitespace(),
            decoders.BPEDecoder(),
        ),
        "prefix": (
            models.BPE(unk_token="<unk>", continuing_subword_prefix="##"),
            trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], continuing_subword_prefix="##"),
            pre_tokenizers.BertPreTokenizer(),
            decoders.WordPiece(),
        ),
        "fuse_unk": (
            models.BPE(unk_token="<unk>", fuse_unk=True),
            trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], limit_alphabet=40),
            pre_tokenizers.Metaspace(),
            decoders.Metaspace(),
        ),
    }
    paths = []
    for name, (model, trainer, pre_tok, decoder) in configs.items():
        t = HFTokenizer(model)
        t.pre_tokenizer = pre_tok
        t.decoder = decoder
        _train(t, trainer, lines)
        t.save(str(tmp_path / f"{name}.json"))
        paths.append(tmp_path / f"{name}.json")
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": b + 1 for b in range(256)}}
    for c in "abcdefghijklmnopqrstuvwxyz▁":
        vocab.setdefault(c, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    t = HFTokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    t.save(str(tmp_path / "byte_fallback.json"))
    paths.append(tmp_path / "byte_fallback.json")
    for path in paths:
        ours, ref = Tokenizer.from_file(path), HFTokenizer.from_file(str(path))
        assert_same(ours, ref, TEXTS[:250])
        for text in TEXTS[:250]:
            ids = ref.encode(text).ids
            assert ours.decode(ids) == ref.decode(ids), (path.name, text)


def test_sentencepiece_unigram_factory_matches_transformers_albert(vocab_dir):
    """``sentencepiece_unigram`` builds ALBERT's pipeline as HF transformers' AlbertTokenizer does."""
    transformers = pytest.importorskip("transformers")
    from attnlab.tokenizers import sentencepiece_unigram

    ref_json = HFTokenizer.from_file(str(vocab_dir / "unigram" / "tokenizer.json"))
    import json

    pieces = [tuple(p) for p in json.loads(ref_json.to_str())["model"]["vocab"]]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [p for p, _ in pieces[:5]] == specials  # AlbertTokenizer expects the unknown piece at id 1
    ref = transformers.AlbertTokenizer(vocab=pieces, unk_token="[UNK]", pad_token="[PAD]")._tokenizer
    ours = sentencepiece_unigram(pieces, special_tokens=specials)
    assert_same(ours, ref, TEXTS)
    assert_same(ours, ref, TEXTS[:200], pairs=True)
    for text in TEXTS[:200]:
        ids = ref.encode(text).ids
        assert ours.decode(ids) == ref.decode(ids)


def test_factories_match_transformers_tokenizers(vocab_dir):
    """``byte_level_bpe`` (RoBERTa and GPT-2 templates) and ``bert_wordpiece`` build the pipelines that HF
    transformers' RobertaTokenizer / GPT2Tokenizer / BertTokenizer build from the same vocabulary."""
    transformers = pytest.importorskip("transformers")
    import json

    from attnlab.tokenizers import bert_wordpiece, byte_level_bpe
    from attnlab.tokenizers.files import read_merges_txt, read_vocab_txt

    vocab = json.loads((vocab_dir / "roberta" / "vocab.json").read_text())
    merges = read_merges_txt(vocab_dir / "roberta" / "merges.txt")
    hf_merges = list(merges)
    for add_prefix_space in (False, True):
        ref = transformers.RobertaTokenizer(vocab=vocab, merges=hf_merges, add_prefix_space=add_prefix_space)
        ours = byte_level_bpe(vocab, merges, template="roberta", add_prefix_space=add_prefix_space)
        assert_same(ours, ref._tokenizer, TEXTS[:300])
        assert_same(ours, ref._tokenizer, TEXTS[:100], pairs=True)
    gpt2_vocab = {**vocab, "<|endoftext|>": len(vocab)}
    ref = transformers.GPT2Tokenizer(vocab=gpt2_vocab, merges=hf_merges)
    ours = byte_level_bpe(gpt2_vocab, merges, template="gpt2")
    texts = [*TEXTS[:300], "a<|endoftext|>b"]
    for text in texts:
        assert ours.encode(text).ids == ref._tokenizer.encode(text).ids, text
        assert ours.encode(text).offsets == ref._tokenizer.encode(text).offsets, text
    bert_vocab = read_vocab_txt(vocab_dir / "bert_uncased" / "vocab.txt")
    ref = transformers.BertTokenizer(vocab=bert_vocab)
    assert_same(bert_wordpiece(bert_vocab), ref._tokenizer, TEXTS[:300])
