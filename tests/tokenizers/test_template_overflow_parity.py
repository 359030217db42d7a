"""Overflowing windows of text pairs under a template post-processor, against HF tokenizers.

HF's ``TemplateProcessing`` gives the template's type ids to the main encodings only: a window cut off by
truncation keeps the type id its sequence was encoded with (0 for the first text, 1 for the second). T5's
pair template ``$A:0 </s>:0 $B:0 </s>:0`` therefore reads type 1 for the second text in the later windows,
while ``BertProcessing`` and ``RobertaProcessing`` give every window their template's. Checked on a synthetic
Unigram ``tokenizer.json`` with distinct type ids at every template place, and on the real T5, BERT and
RoBERTa files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from shared_data import DATA, needs  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402

from attnlab.tokenizers import Tokenizer  # noqa: E402

FIELDS = (
    "ids",
    "tokens",
    "offsets",
    "type_ids",
    "special_tokens_mask",
    "attention_mask",
    "word_ids",
    "sequence_ids",
)
TOKENIZERS = DATA / "tokenizers"
MULTI30K = DATA / "multi30k"
# (max_length, stride) pairs: windows of a few tokens with small and large overlaps.
SETTINGS = [(6, 0), (7, 1), (9, 2), (12, 3), (16, 5), (24, 0)]
# RoBERTa's pair template adds four tokens: each text keeps more than twice the stride.
REAL_SETTINGS = [(10, 1), (12, 2), (16, 3), (24, 5), (32, 0)]
WORDS = "the cab is bad a dog ate big cat sat on mat and good abc".split()


def _template(single: list[tuple[str, int]], pair: list[tuple[str, int]]) -> dict:
    def items(tmpl: list[tuple[str, int]]) -> list[dict]:
        return [
            {"Sequence": {"id": w[1], "type_id": t}}
            if w.startswith("$")
            else {"SpecialToken": {"id": w, "type_id": t}}
            for w, t in tmpl
        ]

    return {
        "type": "TemplateProcessing",
        "single": items(single),
        "pair": items(pair),
        "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}},
    }


def _unigram_json(path: Path, post_processor: dict) -> Path:
    """A T5-like ``tokenizer.json``: Metaspace, a small Unigram vocabulary, ``post_processor``."""
    specials = ["<pad>", "</s>", "<unk>"]
    vocab = [[t, 0.0] for t in specials]
    vocab += [[c, -2.0 - i / 10] for i, c in enumerate("▁abcdefghijklmnopqrstuvwxyz")]
    vocab += [["▁" + w, -1.0 - i / 20] for i, w in enumerate(WORDS[:8])] + [["ab", -1.5], ["at", -1.6]]
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in enumerate(specials)
        ],
        "normalizer": None,
        "pre_tokenizer": metaspace,
        "post_processor": post_processor,
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _windows(encoding) -> list:
    return [encoding, *encoding.overflowing]


def _assert_pairs_agree(
    path: Path, pairs: list[tuple[str, str]], settings: list[tuple[int, int]], strategy: str = "longest_first"
) -> int:
    """Encode every pair under every setting in both libraries; return how many windows had a second text
    whose type ids differ from the template's (the case this file is about)."""
    ref = HFTokenizer.from_file(str(path))
    ours = Tokenizer.from_file(path)
    own_type_windows = 0
    for max_length, stride in settings:
        ref.enable_truncation(max_length, stride=stride, strategy=strategy)
        ours.enable_truncation(max_length, stride=stride, strategy=strategy)
        for a, b in pairs:
            expected, got = _windows(ref.encode(a, b)), _windows(ours.encode(a, b))
            assert len(got) == len(expected), (a, b, max_length, stride)
            for k, (e, g) in enumerate(zip(expected, got)):
                for field in FIELDS:
                    assert getattr(g, field) == getattr(e, field), (field, k, a, b, max_length, stride)
            own_type_windows += sum(
                1 for e in expected for s, t in zip(e.sequence_ids, e.type_ids) if s == 1 and t == 1
            )
    return own_type_windows


def _generated_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [
        (" ".join(rng.choices(WORDS, k=rng.randint(1, 9))), " ".join(rng.choices(WORDS, k=rng.randint(1, 9))))
        for _ in range(n)
    ]


@pytest.mark.parametrize(
    "single, pair",
    [
        # T5's templates: every type id 0, so the later windows' 1s come only from the encoding of B.
        ([("$A", 0), ("</s>", 0)], [("$A", 0), ("</s>", 0), ("$B", 0), ("</s>", 0)]),
        ([("$A", 0), ("</s>", 0)], [("$A", 0), ("</s>", 0), ("$B", 1), ("</s>", 1)]),
        # A distinct id at every place shows which windows take the template's and which their own.
        ([("$A", 2), ("</s>", 3)], [("$A", 3), ("</s>", 4), ("$B", 5), ("</s>", 6)]),
    ],
)
def test_template_pair_windows_match_hf(tmp_path, single, pair):
    path = _unigram_json(tmp_path / "tokenizer.json", _template(single, pair))
    windows_with_own_types = _assert_pairs_agree(path, _generated_pairs(150), SETTINGS)
    assert windows_with_own_types > 0  # the case is exercised, not only the main windows


def test_template_single_windows_match_hf(tmp_path):
    path = _unigram_json(
        tmp_path / "tokenizer.json", _template([("$A", 1), ("</s>", 2)], [("$A", 0), ("$B", 1)])
    )
    ref, ours = HFTokenizer.from_file(str(path)), Tokenizer.from_file(path)
    texts = [a + " " + b for a, b in _generated_pairs(100, seed=1)]
    for max_length, stride in SETTINGS:
        ref.enable_truncation(max_length, stride=stride)
        ours.enable_truncation(max_length, stride=stride)
        for text in texts:
            expected, got = _windows(ref.encode(text)), _windows(ours.encode(text))
            assert [w.type_ids for w in got] == [w.type_ids for w in expected], (text, max_length, stride)
            assert [w.ids for w in got] == [w.ids for w in expected], (text, max_length, stride)


def _real_pairs(n: int) -> list[tuple[str, str]]:
    en = (MULTI30K / "val.en").read_text(encoding="utf-8").splitlines()[:n]
    de = (MULTI30K / "val.de").read_text(encoding="utf-8").splitlines()[:n]
    return list(zip(en, de))


@needs(MULTI30K)
@pytest.mark.parametrize("name", ["envit5", "bert-base-uncased", "roberta-large-bne"])
def test_real_tokenizer_pair_windows_match_hf(name):
    path = TOKENIZERS / name / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    windows_with_own_types = _assert_pairs_agree(path, _real_pairs(150), REAL_SETTINGS)
    if name == "envit5":
        assert windows_with_own_types > 0
