"""Fuzzed parity with HF tokenizers on the same ``tokenizer.json``.

Four kinds: BERT WordPiece, BPE with an unknown token (``fuse_unk`` off and on), byte-level BPE (GPT-2,
RoBERTa) and SentencePiece Unigram with a ``Precompiled`` normaliser (T5's charsmap; the released envit5
tokenizer.json itself holds a BPE model behind that normaliser, compared as released too). Each text is
encoded by both libraries and compared field by field: ids, tokens, offsets, word ids; the ids-only path
must give the full path's ids.

Inputs: hypothesis strings over all of Unicode but surrogates (derandomised by the project's conftest), and a
seeded generator of adversarial strings that draws from every general category (unassigned ``Cn`` and
private-use ``Co`` included), combining-mark runs, CJK, emoji, controls, tabs/CR/LF, and words longer than
WordPiece's 100-character limit.

The default run uses small tokenizers trained here by HF tokenizers (a few hundred strings each); the real
released files of ``../shared/data/tokenizers`` are read under ``data``; the full comparison (2,000 strings
per kind and 9,000 real lines) is ``slow`` + ``data``. ``benchmarks/tokenizer_parity.py`` prints the
difference table with the same code.
"""

from __future__ import annotations

import base64
import json
import random
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from shared_data import DATA, needs  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

from attnlab.tokenizers import Tokenizer  # noqa: E402

REAL = DATA / "tokenizers"
FIELDS = ("ids", "tokens", "offsets", "word_ids")
needs_real = needs(REAL)

# ----------------------------------------------------------------------------------------------------------
# Inputs


@lru_cache(maxsize=1)
def category_pools() -> dict[str, list[str]]:
    """Every code point but surrogates, grouped by general category (Python's Unicode database)."""
    pools: dict[str, list[str]] = {}
    for cp in range(0x110000):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat != "Cs":
            pools.setdefault(cat, []).append(ch)
    return pools


# Hand-picked characters with known pitfalls: whitespace kinds, zero-width and format characters, the
# replacement character, compatibility forms (ligatures, full width, circled, super/subscripts), case
# oddities.
SPECIAL = list(
    "\t\n\r\x0b\x0c\x00\x1c\x1f\x7f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
    "\u200b\u200c\u200d\u200e\ufeff\u2060\ufffd\u00ad\u0378\ud7ff\ue000\U000f0000\U00081eed"
    "ﬁﬂＡｂ①²½ÅΩKẛ\u0345İıΣσςŉǅß…¨´"
)
ASCII_WORDS = "the of and to a in is it running unwanted tokenizer naïve café don't 2024 3.14 U.S.A.".split()


def adversarial_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` seeded adversarial strings (the same for the same ``(n, seed)``)."""
    rng = random.Random(seed)
    pools = category_pools()
    cats = sorted(pools)
    cjk = [chr(c) for c in range(0x4E00, 0x9FFF, 7)]
    emoji = [chr(c) for c in range(0x1F300, 0x1FAFF, 3)] + ["\u200d", "\ufe0f", "\U0001f3fb"]
    marks = pools["Mn"] + pools["Me"] + pools["Mc"]

    def one_char() -> str:
        r = rng.random()
        if r < 0.35:
            return rng.choice(pools[rng.choice(cats)])
        if r < 0.5:
            return rng.choice(SPECIAL)
        if r < 0.6:
            return rng.choice(cjk)
        if r < 0.68:
            return rng.choice(emoji)
        if r < 0.78:
            return rng.choice(marks)
        return rng.choice("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 ,.'-")

    out = [
        "",
        " ",
        "\t\r\n",
        "a\tb\rc\nd",
        "\u0378",
        "\ud7ff",
        "\U00081eed",
        "x" * 101,
        "é" * 101,
        "a\u0301" * 60,
    ]
    while len(out) < n:
        parts: list[str] = []
        for _ in range(rng.choice([1, 2, 4, 8, 16])):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(ASCII_WORDS))
            elif r < 0.9:
                parts.append("".join(one_char() for _ in range(rng.choice([1, 2, 3, 6, 12]))))
            else:  # a very long word, or a long run of one character
                unit = rng.choice(["ab", "é", "x\u0301", one_char(), "字"])
                parts.append(unit * rng.choice([50, 101, 150]))
        sep = rng.choice([" ", " ", "", "\t", "\n", "  ", "\r\n"])
        out.append(sep.join(parts))
    return out[:n]


def hypothesis_texts(n: int) -> list[str]:
    """``n`` strings drawn by hypothesis over all of Unicode but surrogates (derandomised: reproducible)."""
    seen: list[str] = []

    @settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80))
    def draw(text: str) -> None:
        seen.append(text)

    draw()
    return seen


REAL_TEXT_SOURCES = (
    ("books", "books/en/*.txt"),
    ("wikitext", "wikitext-2/raw/*.txt"),
    ("squad", "squad/v1.1/dev-v1.1.json"),
    ("conll", "conll2003/valid.txt"),
    ("multi30k", "multi30k/*"),
    ("kbert", "kbert/datasets/*/dev.tsv"),
)


def real_lines(per_source: int = 1500, seed: int = 0) -> list[str]:
    """Non-empty lines of real text, ``per_source`` from each source above (6 x 1,500 = 9,000 by default)."""
    rng = random.Random(seed)
    out: list[str] = []
    for name, pattern in REAL_TEXT_SOURCES:
        lines: list[str] = []
        for path in sorted(DATA.glob(pattern)):
            if name == "squad":
                data = json.loads(path.read_text(encoding="utf-8"))
                lines += [p["context"] for a in data["data"] for p in a["paragraphs"]]
                lines += [q["question"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
            elif name == "conll":  # sentences rebuilt from the word column
                words: list[str] = []
                for ln in path.read_text(encoding="utf-8").splitlines():
                    if ln.strip() and not ln.startswith("-DOCSTART-"):
                        words.append(ln.split(" ")[0])
                    elif words:
                        lines.append(" ".join(words))
                        words = []
            else:
                # Keep CR, tabs and the like: books have CRLF line endings, TSV files tabs.
                text = path.read_bytes().decode("utf-8", errors="replace")
                lines += [ln for ln in text.split("\n") if ln.strip()]
        if lines:
            out += rng.sample(lines, min(per_source, len(lines)))
    return out


# ----------------------------------------------------------------------------------------------------------
# Comparison


def compare(
    ours: Tokenizer, ref: HFTokenizer, texts: Iterable[str], examples: dict[str, list[str]] | None = None
) -> Counter:
    """Count texts whose encodings differ, per field (``texts`` is the number compared; ``ids_only``: the
    ids-only path disagrees with the full path). ``examples`` collects a few differing texts per field."""
    counts: Counter = Counter()
    texts = list(texts)
    counts["texts"] = len(texts)
    fast = ours.encode_ids_batch(texts)
    for text, fast_ids in zip(texts, fast):
        a = ours.encode(text)
        b = ref.encode(text)
        for f in FIELDS:
            if list(getattr(a, f)) != list(getattr(b, f)):
                counts[f] += 1
                if examples is not None and len(examples.setdefault(f, [])) < 5:
                    examples[f].append(text)
        if list(fast_ids) != list(a.ids):
            counts["ids_only"] += 1
            if examples is not None and len(examples.setdefault("ids_only", [])) < 5:
                examples["ids_only"].append(text)
    return counts


def assert_no_difference(ours: Tokenizer, ref: HFTokenizer, texts: list[str]) -> None:
    examples: dict[str, list[str]] = {}
    counts = compare(ours, ref, texts, examples)
    diffs = {k: v for k, v in counts.items() if k != "texts"}
    assert not diffs, (diffs, {k: [ascii(t)[:120] for t in v] for k, v in examples.items()})


# ----------------------------------------------------------------------------------------------------------
# Tokenizers: both libraries load the same tokenizer.json


def _pair_from_json(path: Path) -> tuple[Tokenizer, HFTokenizer]:
    return Tokenizer.from_file(path), HFTokenizer.from_file(str(path))


def _training_lines(n: int = 1500, seed: int = 2, exotic: int = 200) -> list[str]:
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(ASCII_WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]
    # Some non-ASCII so that the vocabularies hold a few of those characters (not all: unknowns must occur).
    lines += adversarial_texts(exotic + 10, seed=99)[10:]
    return lines


def small_wordpiece(tmp: Path) -> Path:
    t = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    t.train_from_iterator(
        _training_lines(), trainers.WordPieceTrainer(vocab_size=600, special_tokens=specials)
    )
    v = t.get_vocab()
    t.post_processor = processors.BertProcessing(("[SEP]", v["[SEP]"]), ("[CLS]", v["[CLS]"]))
    t.decoder = decoders.WordPiece()
    t.save(str(tmp / "wordpiece.json"))
    return tmp / "wordpiece.json"


def small_bpe_unk(tmp: Path, fuse_unk: bool, pre_tokenizer: str = "whitespace") -> Path:
    """A character BPE with ``<unk>`` (limited alphabet, so unknown characters occur)."""
    t = HFTokenizer(models.BPE(unk_token="<unk>", fuse_unk=fuse_unk))
    t.pre_tokenizer = (
        pre_tokenizers.Whitespace() if pre_tokenizer == "whitespace" else pre_tokenizers.Metaspace()
    )
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"], limit_alphabet=60)
    t.train_from_iterator(_training_lines(), trainer)
    name = f"bpe_unk_{fuse_unk}_{pre_tokenizer}.json"
    t.save(str(tmp / name))
    return tmp / name


def small_byte_level(tmp: Path) -> Path:
    t = HFTokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    t.train_from_iterator(_training_lines(), trainer)
    t.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0), trim_offsets=True)
    t.save(str(tmp / "byte_level.json"))
    return tmp / "byte_level.json"


def small_unigram(tmp: Path) -> Path:
    t = HFTokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(tokenizers.Regex(" {2,}"), " ")]
    )
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    t.train_from_iterator(_training_lines(exotic=20), trainer)
    t.save(str(tmp / "unigram.json"))
    return tmp / "unigram.json"


def unigram_precompiled(tmp: Path) -> Path:
    """A Unigram model trained here by HF, behind T5's released normaliser (envit5's Precompiled charsmap,
    then spaces squeezed) and Metaspace: SentencePiece Unigram as T5 ships it."""
    spec = json.loads((REAL / "envit5" / "tokenizer.json").read_text(encoding="utf-8"))
    charsmap = next(n for n in spec["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    t = HFTokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(base64.b64decode(charsmap["precompiled_charsmap"])),
            normalizers.Replace(tokenizers.Regex(" {2,}"), " "),
        ]
    )
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    specials = ["<pad>", "</s>", "<unk>"]
    trainer = trainers.UnigramTrainer(vocab_size=800, special_tokens=specials, unk_token="<unk>")
    t.train_from_iterator(_training_lines(exotic=20), trainer)
    t.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    t.save(str(tmp / "unigram_precompiled.json"))
    return tmp / "unigram_precompiled.json"


def real_gpt2(tmp: Path) -> Path:
    """GPT-2's released encoder.json + vocab.bpe written as a tokenizer.json by HF (GPT2TokenizerFast's
    pipeline: byte-level, no prefix space, no template)."""
    model = models.BPE.from_file(str(REAL / "gpt2" / "encoder.json"), str(REAL / "gpt2" / "vocab.bpe"))
    t = HFTokenizer(model)
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.save(str(tmp / "gpt2.json"))
    return tmp / "gpt2.json"


REAL_FILES: dict[str, Callable[[Path], Path]] = {
    "wordpiece (bert-base-uncased)": lambda tmp: REAL / "bert-base-uncased" / "tokenizer.json",
    "bpe+unk (HF-trained, fuse_unk=False)": lambda tmp: small_bpe_unk(tmp, False),
    "bpe+unk (HF-trained, fuse_unk=True)": lambda tmp: small_bpe_unk(tmp, True, "metaspace"),
    "byte-level (gpt2)": real_gpt2,
    "byte-level (roberta-large-bne)": lambda tmp: REAL / "roberta-large-bne" / "tokenizer.json",
    "bpe+precompiled (envit5, as released)": lambda tmp: REAL / "envit5" / "tokenizer.json",
    "unigram+precompiled (envit5 charsmap)": unigram_precompiled,
}

# ----------------------------------------------------------------------------------------------------------
# Default run: small tokenizers, a few hundred strings each

SMALL = {
    "wordpiece": small_wordpiece,
    "bpe_unk": lambda tmp: small_bpe_unk(tmp, False),
    "bpe_unk_fused": lambda tmp: small_bpe_unk(tmp, True, "metaspace"),
    "byte_level": small_byte_level,
    "unigram": small_unigram,
}


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_fuzz_parity_small(kind, tmp_path):
    ours, ref = _pair_from_json(SMALL[kind](tmp_path))
    assert_no_difference(ours, ref, adversarial_texts(250, seed=1) + hypothesis_texts(150))


@pytest.mark.data
@needs_real
@pytest.mark.parametrize("kind", sorted(REAL_FILES))
def test_fuzz_parity_real_files(kind, tmp_path):
    ours, ref = _pair_from_json(REAL_FILES[kind](tmp_path))
    assert_no_difference(ours, ref, adversarial_texts(150, seed=2) + hypothesis_texts(100))


@pytest.mark.slow
@pytest.mark.data
@needs_real
@pytest.mark.parametrize("kind", sorted(REAL_FILES))
def test_fuzz_parity_real_files_full(kind, tmp_path):
    """2,000 adversarial + 2,000 hypothesis strings and 9,000 real lines per kind: no difference."""
    ours, ref = _pair_from_json(REAL_FILES[kind](tmp_path))
    assert_no_difference(ours, ref, adversarial_texts(2000) + hypothesis_texts(2000) + real_lines())


if __name__ == "__main__":  # pragma: no cover - see benchmarks/tokenizer_parity.py
    sys.exit("run benchmarks/tokenizer_parity.py")
