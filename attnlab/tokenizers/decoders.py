"""Decoders: turn a list of token strings back into text.

* :class:`WordPiece`: "##" continuations glued to the previous token, other tokens separated by spaces, and
  BERT's clean-up of spaces before punctuation and contractions.
* :class:`ByteLevel`: GPT-2 byte characters mapped back to bytes and decoded as UTF-8 (exact round trip).
* :class:`Metaspace`: "▁" back to spaces, the prepended one removed.
* :class:`BPEDecoder`: the end-of-word suffix ("</w>") becomes a space.
* :class:`ByteFallback`, :class:`Fuse`, :class:`Replace`, :class:`Strip`, :class:`Sequence`: SentencePiece-BPE
  pipelines as HF tokenizers writes them.
"""

from __future__ import annotations

from collections.abc import Sequence as _Seq
from typing import Any

import regex

from attnlab.tokenizers.pre_tokenizers import unicode_to_bytes

__all__ = [
    "Decoder",
    "WordPiece",
    "ByteLevel",
    "Metaspace",
    "BPEDecoder",
    "ByteFallback",
    "Fuse",
    "Replace",
    "Strip",
    "Sequence",
    "cleanup_tokenization",
]


class Decoder:
    """Base class: ``decode_chain`` maps tokens to text pieces; ``decode`` joins them."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        raise NotImplementedError

    def decode(self, tokens: list[str]) -> str:
        return "".join(self.decode_chain(tokens))

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


# Every pattern above starts with a space and one of these characters: text without such a pair is left as it
# is, and most word pieces are (" word"), so the eleven replacements are skipped for them (the same result).
_CLEANUP_START = regex.compile(r" [.?!,'nd]")


def cleanup_tokenization(text: str) -> str:
    """Remove the spaces that joining word pieces puts before punctuation and English contractions."""
    if _CLEANUP_START.search(text) is None:
        return text
    for a, b in _CLEANUP:
        text = text.replace(a, b)
    return text


class WordPiece(Decoder):
    def __init__(self, prefix: str = "##", cleanup: bool = True) -> None:
        self.prefix = prefix
        self.cleanup = cleanup

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        p = self.prefix
        for i, tok in enumerate(tokens):
            if i:
                tok = tok[len(p) :] if tok.startswith(p) else " " + tok
            if self.cleanup:
                tok = cleanup_tokenization(tok)
            out.append(tok)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"type": "WordPiece", "prefix": self.prefix, "cleanup": self.cleanup}


class ByteLevel(Decoder):
    """Byte characters back to bytes, decoded as UTF-8 (invalid sequences become U+FFFD)."""

    def __init__(self, add_prefix_space: bool = True, trim_offsets: bool = True, use_regex: bool = True):
        self.add_prefix_space = add_prefix_space
        self.trim_offsets = trim_offsets
        self.use_regex = use_regex

    def decode_chain(self, tokens: list[str]) -> list[str]:
        table = unicode_to_bytes()
        buf = bytearray()
        for tok in tokens:
            for ch in tok:
                b = table.get(ch)
                if b is None:
                    buf.extend(ch.encode("utf-8"))  # not a byte character (e.g. an added token's text)
                else:
                    buf.append(b)
        return [buf.decode("utf-8", errors="replace")]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "ByteLevel",
            "add_prefix_space": self.add_prefix_space,
            "trim_offsets": self.trim_offsets,
            "use_regex": self.use_regex,
        }


class Metaspace(Decoder):
    def __init__(self, replacement: str = "▁", prepend_scheme: str = "always", split: bool = True) -> None:
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split = split

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        for i, tok in enumerate(tokens):
            tok = tok.replace(self.replacement, " ")
            if i == 0 and self.prepend_scheme != "never" and tok.startswith(" "):
                tok = tok[1:]
            out.append(tok)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "Metaspace",
            "replacement": self.replacement,
            "prepend_scheme": self.prepend_scheme,
            "split": self.split,
        }


class BPEDecoder(Decoder):
    """Original BPE (Sennrich et al. 2016) with an end-of-word suffix: the suffix becomes a space."""

    def __init__(self, suffix: str = "</w>") -> None:
        self.suffix = suffix

    def decode_chain(self, tokens: list[str]) -> list[str]:
        last = len(tokens) - 1
        return [t.replace(self.suffix, "" if i == last else " ") for i, t in enumerate(tokens)]

    def to_json(self) -> dict[str, Any]:
        return {"type": "BPEDecoder", "suffix": self.suffix}


_BYTE_TOKEN = regex.compile(r"<0x([0-9A-Fa-f]{2})>")


class ByteFallback(Decoder):
    """Runs of "<0xAB>" tokens decoded as UTF-8 bytes (one U+FFFD per byte of an invalid run)."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        buf = bytearray()
        n_buf = 0

        def flush() -> None:
            nonlocal n_buf
            if n_buf:
                try:
                    out.append(buf.decode("utf-8"))
                except UnicodeDecodeError:
                    out.extend(["\ufffd"] * n_buf)
                buf.clear()
                n_buf = 0

        for tok in tokens:
            m = _BYTE_TOKEN.fullmatch(tok) if len(tok) == 6 else None
            if m is not None:
                buf.append(int(m.group(1), 16))
                n_buf += 1
            else:
                flush()
                out.append(tok)
        flush()
        return out

    def to_json(self) -> dict[str, Any]:
        return {"type": "ByteFallback"}


class Fuse(Decoder):
    def decode_chain(self, tokens: list[str]) -> list[str]:
        return ["".join(tokens)]

    def to_json(self) -> dict[str, Any]:
        return {"type": "Fuse"}


class Replace(Decoder):
    def __init__(self, pattern: str, content: str) -> None:
        self.pattern = pattern
        self.content = content

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [t.replace(self.pattern, self.content) for t in tokens]

    def to_json(self) -> dict[str, Any]:
        return {"type": "Replace", "pattern": {"String": self.pattern}, "content": self.content}


class Strip(Decoder):
    """Remove up to ``start`` copies of ``content`` at the start of each token and ``stop`` at its end."""

    def __init__(self, content: str = " ", start: int = 0, stop: int = 0) -> None:
        self.content = content
        self.start = start
        self.stop = stop

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        for tok in tokens:
            for _ in range(self.start):
                if tok.startswith(self.content):
                    tok = tok[len(self.content) :]
            for _ in range(self.stop):
                if tok.endswith(self.content):
                    tok = tok[: len(tok) - len(self.content)]
            out.append(tok)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"type": "Strip", "content": self.content, "start": self.start, "stop": self.stop}


class Sequence(Decoder):
    def __init__(self, decoders: _Seq[Decoder]) -> None:
        self.decoders = list(decoders)

    def decode_chain(self, tokens: list[str]) -> list[str]:
        for d in self.decoders:
            tokens = d.decode_chain(tokens)
        return tokens

    def to_json(self) -> dict[str, Any]:
        return {"type": "Sequence", "decoders": [d.to_json() for d in self.decoders]}
