"""The Precompiled normaliser (SentencePiece's compiled character map) against HF tokenizers.

A small charsmap is compiled here (a darts-clone double array written by the test's own builder, then the
NUL-terminated replacements), so the default run checks the format reader, the shortest-prefix lookup per
grapheme cluster and HF's alignment rules without the real files; ``data`` tests use T5's released charsmap.
"""

from __future__ import annotations

import base64
import json
import struct

import pytest

tokenizers = pytest.importorskip("tokenizers")
from shared_data import DATA, needs  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from tokenizers import models, normalizers, pre_tokenizers  # noqa: E402

from attnlab.tokenizers import Tokenizer  # noqa: E402
from attnlab.tokenizers.files import TokenizerFileError, tokenizer_from_json_str  # noqa: E402
from attnlab.tokenizers.normalizers import NormalizedString  # noqa: E402
from attnlab.tokenizers.precompiled import Precompiled, PrecompiledFormatError  # noqa: E402

REAL = DATA / "tokenizers"


def compile_charsmap(rules: dict[str, str]) -> bytes:
    """A SentencePiece charsmap for ``rules`` (UTF-8 key -> replacement): uint32 trie size, the double array
    (each unit: label in bits 0-7, has-leaf bit 8, offset to the children in bits 10-31; a value unit holds
    the value with bit 31 set), then the replacements, each ending with a NUL byte."""
    strings = b""
    values: dict[bytes, int] = {}
    for key, rep in rules.items():
        values[key.encode("utf-8")] = len(strings)
        strings += rep.encode("utf-8") + b"\x00"
    # A byte trie of the keys: node -> {label: child}, terminal nodes hold a value.
    children: list[dict[int, int]] = [{}]
    value_of: dict[int, int] = {}
    for key, value in values.items():
        node = 0
        for b in key:
            nxt = children[node].get(b)
            if nxt is None:
                children.append({})
                nxt = children[node][b] = len(children) - 1
            node = nxt
        value_of[node] = value
    units: dict[int, int] = {}
    used: set[int] = {0}
    bases: set[int] = set()
    pos_of = {0: 0}
    queue = [0]
    while queue:
        node = queue.pop(0)
        labels = sorted(children[node]) + ([0] if node in value_of else [])
        if not labels:
            continue
        p = pos_of[node]
        base = 1
        while base in bases or any((base ^ c) in used for c in labels):
            base += 1
        bases.add(base)  # one parent per base: a child is told apart from another parent's by its slot
        offset = p ^ base
        assert offset < 1 << 21
        has_leaf = 1 if node in value_of else 0
        label = units.get(p, 0) & 0xFF if node else 0
        units[p] = label | (has_leaf << 8) | (offset << 10)
        for c in labels:
            used.add(base ^ c)
        if has_leaf:
            units[base] = value_of[node] | (1 << 31)  # the value unit, reached with label 0
        for c, child in children[node].items():
            pos_of[child] = base ^ c
            units[base ^ c] = c  # label now; flags and offset when the child is visited
            queue.append(child)
    size = max(units) + 1
    array = b"".join(struct.pack("<I", units.get(i, 0)) for i in range(size))
    return struct.pack("<I", len(array)) + array + strings


RULES = {
    "\ufb01": "fi",  # a ligature: one character becomes two
    "\u2460": "1",
    "e\u0301": "\u00e9",  # two characters become one
    "A": "a",
    "AB": "x",  # a key with a shorter key as prefix (never a whole cluster here)
    "\uff21": "A",
    "\uff21\u0301": "\u00c1",  # a cluster with two keys as prefixes: HF takes the shortest ("\uff21")
    "\x01": "",  # deleted
    "\t": " ",
    "\u3000": " ",
}
TEXTS = [
    "",
    "plain text",
    "\ufb01ne \ufb01\u0301",  # a cluster with a prefix in the map: the whole cluster is replaced
    "cafe\u0301 e\u0301\u0301 \u2460\u2460",
    "AB ABC A\u0301",
    "\x01start",
    "mid\x01dle\x01",
    "tab\there\u3000wide \uff21\u0301\uff21",
    "\x01\x01\x01",
    "\ufb01\x01\ufb01",
    "a\u0301\u0302\u0303\u0304 long cluster",
]


def _pair(blob: bytes) -> tuple[Tokenizer, HFTokenizer]:
    """A tokenizer that makes every normalised character a token, so offsets show the alignment."""
    ref = HFTokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    ref.normalizer = normalizers.Precompiled(blob)
    ref.pre_tokenizer = pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), behavior="isolated")
    return tokenizer_from_json_str(ref.to_str()), ref


def test_compiled_charsmap_matches_hf():
    ours, ref = _pair(compile_charsmap(RULES))
    assert isinstance(ours.normalizer, Precompiled)
    saved = HFTokenizer.from_str(json.dumps(ours.to_json()))  # what attnlab writes, read by HF
    for text in TEXTS:
        assert ours.normalizer.normalize_str(text) == ref.normalizer.normalize_str(text), ascii(text)
        a, b, c = ours.encode(text), ref.encode(text), saved.encode(text)
        assert (a.tokens, a.offsets) == (b.tokens, b.offsets) == (c.tokens, c.offsets), ascii(text)


def test_golden_rules():
    n = Precompiled(compile_charsmap(RULES))
    assert n.normalize_str("\ufb01\u0301") == "fi"  # HF: the accent goes with the ligature's cluster
    assert n.normalize_str("ABC") == "aBC"  # one cluster per letter: "AB" is never looked up
    assert n.normalize_str("\uff21\u0301") == "A"  # the shortest key that prefixes the cluster wins
    assert n.normalize_str("e\u0301") == "\u00e9"
    assert n.normalize_str("a\x01b\tc") == "ab c"
    ns = n.normalize(NormalizedString("\x01ab"))
    # A deletion at the start shifts the alignment of what follows (HF's transform), not the text.
    assert ns.normalized == "ab" and ns.original_span(0, 2) == (0, 2)
    ns = n.normalize(NormalizedString("x\ufb01y"))
    assert ns.normalized == "xfiy" and [ns.original_span(i, i + 1) for i in range(4)] == [
        (0, 1),
        (1, 2),
        (1, 2),
        (2, 3),
    ]


def test_to_json_round_trip_and_base64():
    blob = compile_charsmap(RULES)
    n = Precompiled(base64.b64encode(blob).decode("ascii"))
    assert n.blob == blob
    again = Precompiled(n.to_json()["precompiled_charsmap"])
    assert again.normalize_str("\ufb01 AB") == n.normalize_str("\ufb01 AB") == "fi aB"


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"\x01\x00", "too short"),
        (struct.pack("<I", 6) + b"\x00" * 8, "multiple of 4"),
        (struct.pack("<I", 400) + b"\x00" * 8, "at most 8"),
        (struct.pack("<I", 0), "non-zero"),
    ],
)
def test_malformed_blob_is_a_clear_error(blob, message):
    with pytest.raises(PrecompiledFormatError, match=message):
        Precompiled(blob)


def test_malformed_charsmap_in_tokenizer_json_names_the_field():
    ours, _ = _pair(compile_charsmap(RULES))
    spec = ours.to_json()
    spec["normalizer"]["precompiled_charsmap"] = "not base64!"
    with pytest.raises(TokenizerFileError, match="precompiled_charsmap.*base64"):
        tokenizer_from_json_str(json.dumps(spec), "t.json")
    spec["normalizer"]["precompiled_charsmap"] = base64.b64encode(b"\x00\x00").decode()
    with pytest.raises(TokenizerFileError, match="t.json: field 'normalizer.precompiled_charsmap'"):
        tokenizer_from_json_str(json.dumps(spec), "t.json")


@pytest.mark.data
@needs(REAL / "envit5")
def test_t5_charsmap_golden_values():
    """T5's released nmt_nfkc map: NFKC plus SentencePiece's whitespace and control rules, as HF does."""
    spec = json.loads((REAL / "envit5" / "tokenizer.json").read_text(encoding="utf-8"))
    charsmap = next(n for n in spec["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    blob = base64.b64decode(charsmap["precompiled_charsmap"])
    ours, ref = _pair(blob)
    golden = {
        "a\tb\r\nc": "a b c",  # tab, CR and LF are spaces (NFKC alone leaves them: they were "<unk>")
        "\ufb01 \u2460 \uff21": "fi 1 A",
        "e\u0301": "\u00e9",
        "\ufeffa\u200bb": " a b",
        "\x01x": "x",
    }
    for text, want in golden.items():
        assert ours.normalizer.normalize_str(text) == want == ref.normalizer.normalize_str(text), ascii(text)
        a, b = ours.encode(text), ref.encode(text)
        assert (a.tokens, a.offsets) == (b.tokens, b.offsets), ascii(text)
