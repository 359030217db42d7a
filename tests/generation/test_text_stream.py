"""attnlab.generation.text_stream: the text kept while ids come (`IncrementalText`) is the whole decode at
every id, for byte-level BPE (characters split across ids, invalid bytes) and WordPiece (continuations,
punctuation); `TextStream`'s pieces join into the text cut at the first stop string."""

from __future__ import annotations

import random

import pytest

from attnlab.generation.text_stream import IncrementalText, TextStream, cut_at_stop
from attnlab.pretraining.causal_lm import train_causal_tokenizer
from attnlab.tokenizers import bert_wordpiece

TEXT = "Wherefore art thou, Romeo? Naïve café — 東京 🎭 don't stop. " * 4


@pytest.fixture(scope="module")
def byte_bpe():
    return train_causal_tokenizer("byte_level_bpe", lambda: [[TEXT]], 300, None)


@pytest.fixture(scope="module")
def wordpiece():
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "art", "thou", "rom", "##eo", "##s", ",",
             ".", "?", "'", "t", "don", "stop", "##p", "wherefore", "a", "##b"]  # fmt: skip
    return bert_wordpiece({w: i for i, w in enumerate(words)})


def check_every_prefix(tok, ids: list[int]) -> None:
    def decode(x: list[int]) -> str:
        return tok.decode(x, skip_special_tokens=True)

    kept = IncrementalText(decode)
    for k, token in enumerate(ids, 1):
        assert kept.add(token) == kept.text == decode(ids[:k]), (k, ids[:k])


def test_incremental_text_is_the_whole_decode_for_byte_level_bpe(byte_bpe):
    check_every_prefix(byte_bpe, byte_bpe.encode(TEXT, add_special_tokens=False).ids)
    rng = random.Random(0)  # any ids: lone continuation bytes, characters cut anywhere
    for _ in range(20):
        check_every_prefix(byte_bpe, [rng.randrange(byte_bpe.get_vocab_size()) for _ in range(40)])


def test_incremental_text_is_the_whole_decode_for_wordpiece(wordpiece):
    rng = random.Random(1)
    for low in (5, 2):  # from 2: skipped special tokens ([CLS], [SEP], [MASK]) among the words
        for _ in range(20):
            check_every_prefix(wordpiece, [rng.randrange(low, wordpiece.get_vocab_size()) for _ in range(30)])


def test_stream_pieces_join_into_the_text_cut_at_the_stop(byte_bpe):
    ids = byte_bpe.encode(TEXT, add_special_tokens=False).ids

    def decode(x: list[int]) -> str:
        return byte_bpe.decode(x)

    for stops in ([], ["Romeo"], ["東京 🎭"], ["never there"]):
        pieces: list[str] = []
        stream = TextStream(decode, stops, lambda token, piece, out=pieces: out.append(piece))
        for i, token in enumerate(ids):
            stream.step(token, i == len(ids) - 1)
        full = decode(ids)
        sent = "".join(pieces)
        assert full.startswith(sent) and cut_at_stop(full, stops).startswith(sent)
        assert all("\ufffd" not in p for p in pieces)
        if stops == ["Romeo"]:
            assert sent == cut_at_stop(full, stops) == "Wherefore art thou, "
        if not stops:
            assert sent == full
