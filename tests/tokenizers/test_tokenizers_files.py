"""Tokenizer files: round trips, checkpoint directories, and clear errors on bad input."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from attnlab.tokenizers import BPE, Tokenizer, bert_wordpiece, byte_level_bpe, load_tokenizer
from attnlab.tokenizers.files import (
    TokenizerFileError,
    read_merges_txt,
    read_sentencepiece_model,
    read_vocab_txt,
    save_vocab_files,
    tokenizer_from_json,
    write_merges_txt,
    write_vocab_txt,
)
from attnlab.tokenizers.parallel import encode_files, encode_texts, line_blocks
from attnlab.tokenizers.pre_tokenizers import bytes_to_unicode

BERT_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "want",
    "##want",
    "##ed",
    "wa",
    "un",
    "runn",
    "##ing",
    ",",
]


def byte_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    chars = [bytes_to_unicode()[b] for b in range(256)]
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>", *chars])}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "in")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    return vocab, merges


def test_vocab_txt_round_trip_and_directory(tmp_path):
    vocab = {t: i for i, t in enumerate(BERT_VOCAB)}
    write_vocab_txt(vocab, tmp_path / "vocab.txt")
    assert read_vocab_txt(tmp_path / "vocab.txt") == vocab
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    tok = load_tokenizer(tmp_path)
    assert tok.encode("Unwanted").tokens == ["[CLS]", "[UNK]", "[SEP]"]  # cased: "U" is unknown
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    assert load_tokenizer(tmp_path).encode("Unwanted").tokens == ["[CLS]", "un", "##want", "##ed", "[SEP]"]


def test_vocab_txt_missing_special_token_is_named(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(t for t in BERT_VOCAB if t != "[MASK]") + "\n")
    with pytest.raises(TokenizerFileError, match=r"vocab\.txt.*mask_token='\[MASK\]'"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("a\nb\na\n")
    with pytest.raises(TokenizerFileError, match=r"vocab\.txt:3: token 'a' already on line 1"):
        read_vocab_txt(tmp_path / "vocab.txt")


@pytest.mark.parametrize("header", [True, False])
def test_merges_both_formats(tmp_path, header):
    vocab, merges = byte_vocab()
    write_merges_txt(merges, tmp_path / "merges.txt", header=header)
    assert read_merges_txt(tmp_path / "merges.txt") == merges
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    tok = load_tokenizer(tmp_path)
    enc = tok.encode("the thin")
    assert enc.tokens == ["<s>", "t", "he", "Ġt", "h", "in", "</s>"]
    assert tok.decode(enc.ids) == "the thin"


def test_malformed_merges_names_file_and_line(tmp_path):
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nh e x\n")
    with pytest.raises(TokenizerFileError, match=r"merges\.txt:3: expected two tokens"):
        read_merges_txt(tmp_path / "merges.txt")
    vocab, _ = byte_vocab()
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\nq z\n")
    with pytest.raises(TokenizerFileError, match=r"merges\.txt: BPE: merge 0 \('q', 'z'\) gives 'qz'"):
        load_tokenizer(tmp_path)


def base_json() -> dict:
    vocab = {t: i for i, t in enumerate(BERT_VOCAB)}
    return bert_wordpiece(vocab).to_json()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("model"), r"field 'model' is missing"),
        (lambda d: d["model"].update(vocab=[1, 2]), r"field 'model\.vocab': expected dict"),
        (lambda d: d["model"]["vocab"].update({"x": "7"}), r"field 'model\.vocab': token 'x' has id '7'"),
        (
            lambda d: d["model"].update(type="WordLevel"),
            r"field 'model\.type': unsupported model type 'WordLevel'",
        ),
        (
            lambda d: d.update(normalizer={"type": "Precompiledx"}),
            r"field 'normalizer\.type': unsupported normalizer type 'Precompiledx'",
        ),
        (
            lambda d: d.update(
                pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "CharDelimiter"}]}
            ),
            r"'pre_tokenizer\.pretokenizers\[0\]\.type': unsupported pre_tokenizer type 'CharDelimiter'",
        ),
        (lambda d: d.update(decoder={"type": "CTC"}), r"unsupported decoder type 'CTC'"),
        (
            lambda d: d.update(post_processor={"type": "BertProcessing", "sep": ["[SEP]"]}),
            r"'post_processor\.sep'",
        ),
        (lambda d: d["added_tokens"][0].pop("content"), r"field 'added_tokens\[0\]\.content' is missing"),
        (lambda d: d.update(truncation={"max_length": 5, "strategy": "Middle"}), r"truncation\.strategy"),
    ],
)
def test_malformed_tokenizer_json_names_the_field(mutate, message):
    data = base_json()
    mutate(data)
    with pytest.raises(TokenizerFileError, match=message):
        tokenizer_from_json(data)


def test_tokenizer_json_round_trip_keeps_settings(tmp_path):
    vocab, merges = byte_vocab()
    tok = byte_level_bpe(vocab, merges)
    tok.enable_truncation(14, stride=2, strategy="only_second")
    tok.enable_padding(length=16, pad_token="<pad>")
    path = tok.save(tmp_path)
    again = Tokenizer.from_file(path)
    assert again.truncation == tok.truncation and again.padding == tok.padding
    a, b = tok.encode("the thin the", "thin the thin"), again.encode("the thin the", "thin the thin")
    assert a == b and len(a.overflowing) > 0
    assert save_vocab_files(tok, tmp_path / "classic") == [
        str(tmp_path / "classic" / "vocab.json"),
        str(tmp_path / "classic" / "merges.txt"),
    ]
    fresh = byte_level_bpe(vocab, merges)
    assert load_tokenizer(tmp_path / "classic").encode("the thin").ids == fresh.encode("the thin").ids


def _proto_piece(piece: str, score: float, kind: int) -> bytes:
    raw = piece.encode()
    body = b"\x0a" + bytes([len(raw)]) + raw + b"\x15" + struct.pack("<f", score) + b"\x18" + bytes([kind])
    return b"\x0a" + bytes([len(body)]) + body


def test_sentencepiece_model_reader(tmp_path):
    pieces = [("<pad>", 0.0, 3), ("<unk>", 0.0, 2), ("[CLS]", 0.0, 3), ("[SEP]", 0.0, 3), ("[MASK]", 0.0, 4)]
    pieces += [("▁", -1.0, 1), ("▁the", -2.0, 1), ("t", -3.0, 1), ("h", -3.0, 1), ("e", -3.0, 1)]
    blob = b"".join(_proto_piece(*p) for p in pieces) + b"\x12\x02\x18\x01"  # trainer_spec.model_type=UNIGRAM
    (tmp_path / "spiece.model").write_bytes(blob)
    sp = read_sentencepiece_model(tmp_path / "spiece.model")
    assert sp["model_type"] == "unigram" and [p for p, _, _ in sp["pieces"]][:2] == ["<pad>", "<unk>"]
    tok = load_tokenizer(tmp_path)
    assert tok.encode("The eth").tokens == ["[CLS]", "▁the", "▁", "e", "t", "h", "[SEP]"]
    (tmp_path / "spiece.model").write_bytes(b"\x0a\xff")
    with pytest.raises(TokenizerFileError, match="spiece.model: not a valid SentencePiece model"):
        load_tokenizer(tmp_path)


def test_empty_directory_says_what_it_expected(tmp_path):
    with pytest.raises(TokenizerFileError, match="no tokenizer files found; expected tokenizer.json"):
        load_tokenizer(tmp_path)


def test_encode_files_matches_sequential(tmp_path):
    vocab, merges = byte_vocab()
    tok = byte_level_bpe(vocab, merges)
    lines = [f"the thin {i} é 😀" * (i % 5) for i in range(400)]
    paths = []
    for k in range(3):
        p = tmp_path / f"f{k}.txt"
        p.write_text("\n".join(lines[k::3]) + "\n", encoding="utf-8")
        paths.append(p)
    assert sum(e - s for s, e in line_blocks(paths[0], 100)) == paths[0].stat().st_size
    for workers in (1, 2):
        results = list(
            encode_files(tok, paths, num_workers=workers, block_bytes=300, out_dir=tmp_path / "ids")
        )
        for p, res in zip(paths, results):
            expected = [
                tok.encode(ln, add_special_tokens=False).ids
                for ln in p.read_text().splitlines()
                if ln.strip()
            ]
            assert res.lengths.tolist() == [len(x) for x in expected]
            assert res.ids.tolist() == [i for x in expected for i in x]
            assert res.ids.dtype == np.uint16
            assert np.load(tmp_path / "ids" / f"{p.name}.ids.npy").tolist() == res.ids.tolist()
    assert encode_texts(tok, lines, num_workers=2, chunk_size=50) == [
        tok.encode(t, add_special_tokens=False).ids for t in lines
    ]


def test_bpe_model_vocab_api():
    vocab, merges = byte_vocab()
    m = BPE(vocab, merges)
    assert m.vocab_size == len(vocab) and m.token_to_id("Ġthe") == vocab["Ġthe"]
    assert m.id_to_token(vocab["in"]) == "in" and m.id_to_token(10**6) is None
    assert m.get_vocab() == vocab
