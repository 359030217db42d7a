"""Character-level tokenizers: one token per character, as in char-rnn and nanoGPT's ``shakespeare_char``.

The tokenizer is HF tokenizers' BPE model with no merges and no pre-tokenizer, so that ``tokenizer.json``
loads in HF ``tokenizers`` and in attnlab alike; the ``Fuse`` decoder joins the characters back (whitespace
kept as written). Ids: the characters in sorted order from 0 (nanoGPT's ``stoi``), then the special tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from attnlab.tokenizers.tokenizer import Tokenizer

EOS = "<|endoftext|>"  # GPT-2's spelling: ends each document of a causal LM's training stream
UNK = "<unk>"  # a character the training text did not hold


def char_tokenizer_json(
    chars: Sequence[str], special_tokens: Sequence[str] = (), unk_token: str | None = None
) -> dict:
    """The ``tokenizer.json`` of a character vocabulary ``chars`` (ids 0..len-1), then ``special_tokens``
    (ids after the characters; ``unk_token``, if given, must be one of them)."""
    if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
        raise ValueError("char_tokenizer_json: chars must be distinct single characters")
    if unk_token is not None and unk_token not in special_tokens:
        raise ValueError(f"char_tokenizer_json: unk_token {unk_token!r} is not among the special tokens")
    vocab = {c: i for i, c in enumerate(chars)}
    added = []
    for token in special_tokens:
        vocab[token] = len(vocab)
        added.append({"id": vocab[token], "content": token, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})  # fmt: skip
    return {
        "version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": None,
        "post_processor": None, "decoder": {"type": "Fuse"}, "truncation": None, "padding": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": [], "dropout": None,
                  "unk_token": unk_token, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False},
    }  # fmt: skip


def char_tokenizer(chars: Iterable[str], special_tokens: Sequence[str] = (EOS, UNK)) -> Tokenizer:
    """A character tokenizer over the distinct characters of ``chars`` (sorted), with ``special_tokens``
    after them (`UNK` among them makes unseen characters ``<unk>``)."""
    vocab = sorted(set(chars) - set(special_tokens))
    unk = UNK if UNK in special_tokens else None
    return Tokenizer.from_json(char_tokenizer_json(vocab, special_tokens, unk), source="char tokenizer")


def train_char_tokenizer(texts: Iterable[str], special_tokens: Sequence[str] = (EOS, UNK)) -> Tokenizer:
    """`char_tokenizer` over every character of ``texts`` (a stream of documents)."""
    seen: set[str] = set()
    for text in texts:
        seen.update(text)
    if not seen:
        raise ValueError("train_char_tokenizer: the texts hold no characters")
    return char_tokenizer(seen, special_tokens)


def is_char_tokenizer(tokenizer: Any) -> bool:
    """True for a tokenizer built here (a merge-free BPE over single characters and a Fuse decoder)."""
    model = getattr(tokenizer, "model", None)
    return (
        type(model).__name__ == "BPE"
        and not getattr(model, "merges", None)
        and tokenizer.pre_tokenizer is None
        and type(tokenizer.decoder).__name__ == "Fuse"
    )
