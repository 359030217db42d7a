"""A tiny tokenizer satisfying attnlab.data's protocol (shared by the data tests), and protocol tests."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pytest

from attnlab.data.protocol import SpecialIds, TokenizerLike, tokenizer_fingerprint, vocab_size_of

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclass
class TinyEncoding:
    ids: list[int]
    word_ids: list[int | None]


class TinyTokenizer:
    """Words and punctuation; each word cut into pieces of at most ``piece`` characters (so words have
    several tokens); a piece's id is a stable hash into the vocabulary. Adds [CLS]/[SEP] (word id None)
    by default, like a real post-processor."""

    def __init__(self, vocab_size: int = 500, piece: int = 3):
        self.vocab_size = vocab_size
        self.piece = piece
        self.fingerprint = f"tiny-{vocab_size}-{piece}"

    def token_to_id(self, token: str) -> int | None:
        return SPECIALS.index(token) if token in SPECIALS else None

    def _id(self, piece: str) -> int:
        h = int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=8).digest(), "little")
        return len(SPECIALS) + h % (self.vocab_size - len(SPECIALS))

    def encode(self, text: str, add_special_tokens: bool = True) -> TinyEncoding:
        ids: list[int] = []
        wids: list[int | None] = []
        for w, word in enumerate(re.findall(r"\w+|[^\w\s]", text)):
            for k in range(0, len(word), self.piece):
                ids.append(self._id(word[k : k + self.piece]))
                wids.append(w)
        if add_special_tokens:
            ids = [2, *ids, 3]
            wids = [None, *wids, None]
        return TinyEncoding(ids, wids)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[TinyEncoding]:
        return [self.encode(t, add_special_tokens) for t in texts]


def test_tiny_tokenizer_satisfies_protocol():
    tok = TinyTokenizer()
    assert isinstance(tok, TokenizerLike)
    assert vocab_size_of(tok) == 500
    assert tokenizer_fingerprint(tok) == "tiny-500-3"
    assert SpecialIds.from_tokenizer(tok) == SpecialIds(cls=2, sep=3, mask=4, pad=0)
    enc = tok.encode("Unwanted running", add_special_tokens=False)
    assert enc.word_ids == [0, 0, 0, 1, 1, 1]  # Unw|ant|ed, run|nin|g


def test_special_ids_errors_name_the_role():
    class NoMask(TinyTokenizer):
        def token_to_id(self, token):
            return None if "MASK" in token or "mask" in token else super().token_to_id(token)

    with pytest.raises(ValueError, match="no mask token: tried \\[MASK\\], <mask>"):
        SpecialIds.from_tokenizer(NoMask())
    with pytest.raises(ValueError, match="unknown special token role"):
        SpecialIds.from_tokenizer(TinyTokenizer(), bos="<s>")


def test_fingerprint_and_vocab_fallbacks():
    class VocabOnly:
        def get_vocab(self):
            return {"a": 0, "b": 1}

    assert vocab_size_of(VocabOnly()) == 2
    assert len(tokenizer_fingerprint(VocabOnly())) == 32
    with pytest.raises(TypeError, match="no vocabulary size"):
        vocab_size_of(object())


def test_hf_tokenizers_satisfy_protocol():
    """The reference library's Tokenizer (test-only) fits the protocol: ids, word_ids, to_str fingerprint."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    vocab = {t: i for i, t in enumerate([*SPECIALS, "un", "##want", "##ed", "runn", "##ing", ","])}
    tok = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(SPECIALS)
    assert isinstance(tok, TokenizerLike)
    enc = tok.encode_batch(["unwanted,running"])[0]
    assert enc.ids == [5, 6, 7, 10, 8, 9]
    assert enc.word_ids == [0, 0, 0, 1, 2, 2]
    assert SpecialIds.from_tokenizer(tok) == SpecialIds(cls=2, sep=3, mask=4, pad=0)
    assert vocab_size_of(tok) == 11
    assert len(tokenizer_fingerprint(tok)) == 32


def test_attnlab_tokenizer_satisfies_protocol(tmp_path):
    """attnlab's own WordPiece tokenizer fits the protocol and prepares shards (2 worker processes)."""
    import attnlab.tokenizers as tk
    from attnlab.data import ShardedCorpus, prepare_shards

    vocab = {t: i for i, t in enumerate([*SPECIALS, "un", "##want", "##ed", "runn", "##ing", ",", "the"])}
    tok = tk.bert_wordpiece(vocab)
    assert isinstance(tok, TokenizerLike)
    enc = tok.encode_batch(["UNwant\u00e9d,running"], add_special_tokens=False)[0]
    assert enc.ids == [5, 6, 7, 10, 8, 9]  # un ##want ##ed , runn ##ing (google-research/bert's golden test)
    assert enc.word_ids == [0, 0, 0, 1, 2, 2]
    assert SpecialIds.from_tokenizer(tok) == SpecialIds(cls=2, sep=3, mask=4, pad=0)
    assert vocab_size_of(tok) == 12
    fp = tokenizer_fingerprint(tok)
    assert fp == tokenizer_fingerprint(tk.bert_wordpiece(dict(vocab))) and len(fp) == 32
    docs = [["unwanted, running", "the running"], ["unwanted"]] * 20
    prepare_shards(docs, tok, tmp_path, workers=2, chunk_chars=50)
    corpus = ShardedCorpus(tmp_path, tokenizer=tok)
    assert corpus.document(0)[0].tolist() == [5, 6, 7, 10, 8, 9]
    assert corpus.shards[0].word_starts[:6].tolist() == [1, 0, 0, 1, 1, 0]
    assert corpus.n_documents == 40
