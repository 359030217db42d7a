"""What the data pipeline needs from a tokenizer, as a small protocol.

Any object works that has ``encode_batch(texts) -> list of encodings`` whose items expose ``.ids``
(token ids) and ``.word_ids`` (the index of the word each token came from; ``None`` for special
tokens), plus ``token_to_id(token)`` for the special tokens and a vocabulary size
(``get_vocab_size()``, ``vocab_size`` or ``len(get_vocab())``). attnlab's own ``Tokenizer`` and the
Hugging Face ``tokenizers.Tokenizer`` both satisfy it; tests use a tiny whitespace tokenizer.

Word ids (not ``##`` prefixes) drive whole-word, n-gram and span masking, so those work for
WordPiece, BPE, byte-level BPE and Unigram alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EncodingLike(Protocol):
    ids: Sequence[int]
    word_ids: Sequence[int | None]


@runtime_checkable
class TokenizerLike(Protocol):
    def encode_batch(self, texts: list[str]) -> Sequence[EncodingLike]: ...

    def token_to_id(self, token: str) -> int | None: ...


def vocab_size_of(tokenizer: Any) -> int:
    """The tokenizer's vocabulary size (added tokens included)."""
    for name in ("get_vocab_size", "vocab_size"):
        attr = getattr(tokenizer, name, None)
        if attr is None:
            continue
        value = attr() if callable(attr) else attr
        if isinstance(value, int):
            return value
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if callable(get_vocab):
        return len(get_vocab())
    raise TypeError(
        f"{type(tokenizer).__name__} has no vocabulary size: "
        "expected get_vocab_size(), vocab_size or get_vocab()"
    )


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash that changes when the tokenizer's behaviour can change.

    Uses, in order: a ``fingerprint`` attribute or method, the serialised form (``to_str()`` /
    ``to_json()``), or the vocabulary. Shard indexes record it so that a corpus prepared with one
    tokenizer is not silently read with another.
    """
    fp = getattr(tokenizer, "fingerprint", None)
    if fp is not None:
        value = fp() if callable(fp) else fp
        return str(value)
    for name in ("to_str", "to_json"):
        fn = getattr(tokenizer, name, None)
        if callable(fn):
            try:
                text = fn()
            except TypeError:
                continue
            if isinstance(text, dict):  # attnlab's to_json() returns the tokenizer.json object
                text = json.dumps(text, sort_keys=True, ensure_ascii=False)
            if isinstance(text, str):
                return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if callable(get_vocab):
        text = json.dumps(sorted(get_vocab().items()), ensure_ascii=False)
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    raise TypeError(
        f"cannot fingerprint {type(tokenizer).__name__}: expected a fingerprint attribute, to_str(), "
        "to_json() or get_vocab()"
    )


_CANDIDATES = {
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
    "pad": ("[PAD]", "<pad>"),
}


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special tokens the instance templates and masking use.

    ``cls``/``sep`` are BERT's ``[CLS]``/``[SEP]`` or RoBERTa's ``<s>``/``</s>``.
    """

    cls: int
    sep: int
    mask: int
    pad: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, **overrides: str) -> SpecialIds:
        """Look the ids up with ``token_to_id``, trying BERT's then RoBERTa's spellings.

        ``overrides`` give other spellings, e.g. ``SpecialIds.from_tokenizer(tok, mask="<MASK>")``.
        """
        unknown = set(overrides) - set(_CANDIDATES)
        if unknown:
            raise ValueError(
                f"unknown special token role(s) {sorted(unknown)}; expected {sorted(_CANDIDATES)}"
            )
        ids: dict[str, int] = {}
        for role, spellings in _CANDIDATES.items():
            spellings = (overrides[role],) if role in overrides else spellings
            for s in spellings:
                i = tokenizer.token_to_id(s)
                if i is not None:
                    ids[role] = int(i)
                    break
            else:
                raise ValueError(
                    f"tokenizer has no {role} token: tried {', '.join(spellings)}; pass {role}=... to name it"
                )
        return cls(**ids)

    @property
    def all(self) -> tuple[int, ...]:
        return (self.cls, self.sep, self.mask, self.pad)
