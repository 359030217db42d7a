"""Pre-tokenisers: cut the normalised text into words before the model segments each word.

A pre-tokeniser maps a list of pieces to a new list. A piece is a tuple ``(text, start, end, charmap)``:

* ``text``: the piece as the model will see it (for ``ByteLevel``, GPT-2's byte characters; for ``Metaspace``,
  spaces shown as "▁");
* ``start, end``: its span in the normalised string;
* ``charmap``: ``None`` when ``text[i]`` is normalised character ``start + i``; otherwise, for each character
  of ``text``, the index of the normalised character it comes from (a multi-byte character's byte characters
  all point at it; a prepended "▁" or "Ġ" points at the first character).

The public :meth:`PreTokenizer.pre_tokenize_str` returns ``[(text, (start, end)), ...]`` as HF tokenizers
does.
"""

from __future__ import annotations

from collections.abc import Sequence as _Seq
from functools import lru_cache
from typing import Any

import regex

from attnlab.tokenizers.unicode_compat import bert_punctuation_class, onig_class

__all__ = [
    "Piece",
    "PreTokenizer",
    "BertPreTokenizer",
    "Whitespace",
    "WhitespaceSplit",
    "Punctuation",
    "Digits",
    "Split",
    "ByteLevel",
    "Metaspace",
    "Sequence",
    "bytes_to_unicode",
    "GPT2_PATTERN",
    "SPLIT_BEHAVIORS",
]

Piece = tuple[str, int, int, "list[int] | None"]

# ASCII symbols are punctuation for BERT (google-research/bert _is_punctuation), plus Unicode P*, as HF
# tokenizers' tables have them (unicode_compat: an older Unicode than the regex module's \p{P}). Both are
# regex.V1 classes (set operations).
_PUNCT = bert_punctuation_class()
_BERT_RE = regex.compile(rf"[^\s{_PUNCT}]+|{_PUNCT}", regex.V1)  # regex's \s: Unicode White_Space, as Rust's
# Letters, numbers and word characters as HF's Oniguruma classes them (regex.V1 set operations).
_LETTER, _NUMBER, _WORD = onig_class(r"\p{L}"), onig_class(r"\p{N}"), onig_class(r"\w")
_WHITESPACE_RE = regex.compile(rf"{_WORD}+|[^{_WORD}\s]+", regex.V1)
_WHITESPACE_SPLIT_RE = regex.compile(r"\S+")

# GPT-2's pre-tokenisation pattern (Radford et al. 2019, openai/gpt-2 encoder.py), as written; it is compiled
# with the letter and number classes above.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_RE = regex.compile(
    rf"""'s|'t|'re|'ve|'m|'ll|'d| ?{_LETTER}+| ?{_NUMBER}+| ?[^\s{_LETTER}{_NUMBER}]+|\s+(?!\S)|\s+""",
    regex.V1,
)


def _sub(piece: Piece, s: int, e: int) -> Piece:
    """The sub-piece of ``piece`` covering its characters ``[s, e)``."""
    text, start, _end, cmap = piece
    if cmap is None:
        return (text[s:e], start + s, start + e, None)
    sub = cmap[s:e]
    return (text[s:e], sub[0] if sub else start, (sub[-1] + 1) if sub else start, sub)


class PreTokenizer:
    """Base class: subclasses implement :meth:`split_piece` (or :meth:`split` for context-dependent ones)."""

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        raise NotImplementedError

    def split(self, pieces: list[Piece], first: bool = True) -> list[Piece]:
        """Split every piece; ``first`` says whether ``pieces`` start the text (not after an added token)."""
        out: list[Piece] = []
        for i, p in enumerate(pieces):
            out.extend(self.split_piece(p, i))
        return out

    def pre_tokenize(self, text: str) -> list[Piece]:
        """Pre-tokenise a normalised string into pieces."""
        return self.split([(text, 0, len(text), None)])

    def pre_tokenize_str(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        """``[(piece, (start, end)), ...]`` with spans in ``text``."""
        return [(t, (s, e)) for t, s, e, _ in self.pre_tokenize(text)]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


def _regex_pieces(piece: Piece, pattern: regex.Pattern) -> list[Piece]:
    text = piece[0]
    if piece[3] is None:
        start = piece[1]
        return [(m.group(), start + m.start(), start + m.end(), None) for m in pattern.finditer(text)]
    return [_sub(piece, m.start(), m.end()) for m in pattern.finditer(text)]


class BertPreTokenizer(PreTokenizer):
    """BERT's basic tokeniser split: whitespace removed, every punctuation character its own word."""

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        return _regex_pieces(piece, _BERT_RE)

    def to_json(self) -> dict[str, Any]:
        return {"type": "BertPreTokenizer"}


class Whitespace(PreTokenizer):
    """Words (``\\w+``) and runs of other non-space characters (``[^\\w\\s]+``)."""

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        return _regex_pieces(piece, _WHITESPACE_RE)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Whitespace"}


class WhitespaceSplit(PreTokenizer):
    """Split on whitespace only."""

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        return _regex_pieces(piece, _WHITESPACE_SPLIT_RE)

    def to_json(self) -> dict[str, Any]:
        return {"type": "WhitespaceSplit"}


SPLIT_BEHAVIORS = ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous")


def _split_by_matches(
    piece: Piece, spans: list[tuple[int, int]], behavior: str, invert: bool = False
) -> list[Piece]:
    """Split ``piece`` around the delimiter ``spans`` (sorted, non-overlapping) following ``behavior``.

    With ``invert`` the spans are the words (each its own region) and what lies between them the delimiters.
    """
    text = piece[0]
    n = len(text)
    # Mark each region as (start, end, is_delimiter).
    regions: list[tuple[int, int, bool]] = []
    pos = 0
    for s, e in spans:
        if s > pos:
            regions.append((pos, s, invert))  # a gap: a word, or (inverted) a delimiter
        regions.append((s, e, not invert))  # a match: a delimiter, or (inverted) a word
        pos = e
    if pos < n:
        regions.append((pos, n, invert))
    if behavior == "removed":
        bounds = [(s, e) for s, e, d in regions if not d]
    elif behavior == "isolated":
        bounds = [(s, e) for s, e, _ in regions]
    elif behavior == "contiguous":
        bounds = []
        for s, e, d in regions:
            if d and bounds and bounds[-1][2]:
                bounds[-1] = (bounds[-1][0], e, True)
            else:
                bounds.append((s, e, d))
        bounds = [(s, e) for s, e, _ in bounds]
    elif behavior == "merged_with_previous":
        bounds = []
        prev_delim = True
        for s, e, d in regions:
            if d and bounds and not prev_delim:
                bounds[-1] = (bounds[-1][0], e)
            else:
                bounds.append((s, e))
            prev_delim = d
    elif behavior == "merged_with_next":
        bounds = []
        pending: int | None = None  # start of a delimiter waiting for the word after it
        for s, e, d in regions:
            if d:
                if pending is not None:  # two delimiters in a row: the first stands alone
                    bounds.append((pending, s))
                pending = s
            else:
                bounds.append((pending if pending is not None else s, e))
                pending = None
        if pending is not None:
            bounds.append((pending, n))
    else:
        raise ValueError(f"unknown split behavior {behavior!r}; expected one of {SPLIT_BEHAVIORS}")
    return [_sub(piece, s, e) for s, e in bounds if e > s]


class Punctuation(PreTokenizer):
    """Split on Unicode/ASCII punctuation with a given behaviour (HF default: isolated)."""

    def __init__(self, behavior: str = "isolated") -> None:
        if behavior not in SPLIT_BEHAVIORS:
            raise ValueError(f"unknown split behavior {behavior!r}; expected one of {SPLIT_BEHAVIORS}")
        self.behavior = behavior

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        spans = [m.span() for m in _PUNCT_RE.finditer(piece[0])]
        return _split_by_matches(piece, spans, self.behavior)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Punctuation", "behavior": _behavior_to_json(self.behavior)}


_PUNCT_RE = regex.compile(_PUNCT, regex.V1)


class Digits(PreTokenizer):
    """Split digits from the rest (``individual_digits``: each digit alone)."""

    def __init__(self, individual_digits: bool = False) -> None:
        self.individual_digits = individual_digits
        # Rust's char::is_numeric: every Unicode number (Nd, Nl, No: "½", "²", "Ⅳ"), not only decimal digits
        # (Rust's Unicode is as recent as the regex module's, unlike Oniguruma's).
        self._re = regex.compile(r"\p{N}" if individual_digits else r"\p{N}+")

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        spans = [m.span() for m in self._re.finditer(piece[0])]
        return _split_by_matches(piece, spans, "isolated")

    def to_json(self) -> dict[str, Any]:
        return {"type": "Digits", "individual_digits": self.individual_digits}


class Split(PreTokenizer):
    """Split on a literal or regex ``pattern`` with a given behaviour (``invert``: matches are the words)."""

    def __init__(self, pattern: str, behavior: str = "isolated", invert: bool = False, is_regex: bool = True):
        if behavior not in SPLIT_BEHAVIORS:
            raise ValueError(f"unknown split behavior {behavior!r}; expected one of {SPLIT_BEHAVIORS}")
        self.pattern = pattern
        self.behavior = behavior
        self.invert = invert
        self.is_regex = is_regex
        self._re = regex.compile(pattern if is_regex else regex.escape(pattern))

    def split_piece(self, piece: Piece, index: int) -> list[Piece]:
        spans = [m.span() for m in self._re.finditer(piece[0]) if m.end() > m.start()]
        return _split_by_matches(piece, spans, self.behavior, invert=self.invert)

    def to_json(self) -> dict[str, Any]:
        key = "Regex" if self.is_regex else "String"
        return {
            "type": "Split",
            "pattern": {key: self.pattern},
            "behavior": _behavior_to_json(self.behavior),
            "invert": self.invert,
        }


def _behavior_to_json(behavior: str) -> str:
    return "".join(w.capitalize() for w in behavior.split("_"))


def behavior_from_json(name: str) -> str:
    """``"MergedWithNext"`` -> ``"merged_with_next"``."""
    out = regex.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
    if out not in SPLIT_BEHAVIORS:
        raise ValueError(f"unknown split behavior {name!r}; expected one of {SPLIT_BEHAVIORS}")
    return out


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable Unicode characters.

    Printable Latin-1 bytes map to themselves; the others (control characters, space, ...) to 256 + n, so that
    no byte becomes whitespace or a control character (the space byte becomes "Ġ", newline "Ċ").
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {}
    n = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


_BYTE_CHARS = [bytes_to_unicode()[b] for b in range(256)]
_ASCII_TO_BYTE_CHARS = {b: _BYTE_CHARS[b] for b in range(128)}


class ByteLevel(PreTokenizer):
    """GPT-2's byte-level pre-tokenisation (Radford et al. 2019).

    The text is split with GPT-2's regex (``use_regex``), then each word's UTF-8 bytes are written with the
    byte-to-unicode table, so that a BPE over these 256 symbols never needs an unknown token.
    ``add_prefix_space`` puts a space before the text (so the first word is encoded like the others).
    """

    def __init__(self, add_prefix_space: bool = False, use_regex: bool = True, trim_offsets: bool = True):
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex
        self.trim_offsets = trim_offsets  # used by the ByteLevel post-processor; kept for tokenizer.json

    def split(self, pieces: list[Piece], first: bool = True) -> list[Piece]:
        out: list[Piece] = []
        for piece in pieces:
            if self.add_prefix_space and piece[0] and not piece[0].startswith(" "):
                text, start, end, cmap = piece
                first = cmap[0] if cmap is not None else start
                rest = cmap if cmap is not None else list(range(start, end))
                piece = (" " + text, start, end, [first] + rest)
            words = _regex_pieces(piece, _GPT2_RE) if self.use_regex else [piece] if piece[0] else []
            for w in words:
                out.append(self._to_bytes(w))
        return out

    @staticmethod
    def _to_bytes(piece: Piece) -> Piece:
        text, start, end, cmap = piece
        if text.isascii():
            return (text.translate(_ASCII_TO_BYTE_CHARS), start, end, cmap)
        chars: list[str] = []
        new_map: list[int] = []
        for i, ch in enumerate(text):
            idx = cmap[i] if cmap is not None else start + i
            bs = ch.encode("utf-8")
            chars.extend(_BYTE_CHARS[b] for b in bs)
            new_map.extend([idx] * len(bs))
        return ("".join(chars), start, end, new_map)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "ByteLevel",
            "add_prefix_space": self.add_prefix_space,
            "trim_offsets": self.trim_offsets,
            "use_regex": self.use_regex,
        }


PREPEND_SCHEMES = ("always", "first", "never")


class Metaspace(PreTokenizer):
    """SentencePiece-style whitespace marking (Kudo & Richardson 2018): spaces become "▁".

    ``prepend_scheme``: "always" puts a "▁" before every piece that lacks one, "first" only before the first
    piece of the text, "never" not at all. With ``split`` each "▁" starts a new word.
    """

    def __init__(self, replacement: str = "▁", prepend_scheme: str = "always", split: bool = True) -> None:
        if prepend_scheme not in PREPEND_SCHEMES:
            raise ValueError(f"unknown prepend_scheme {prepend_scheme!r}; expected one of {PREPEND_SCHEMES}")
        if len(replacement) != 1:
            raise ValueError(f"Metaspace replacement must be one character, got {replacement!r}")
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split_words = split

    def split(self, pieces: list[Piece], first: bool = True) -> list[Piece]:
        out: list[Piece] = []
        rep = self.replacement
        for i, piece in enumerate(pieces):
            text, start, end, cmap = piece
            text = text.replace(" ", rep)
            prepend = self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first and i == 0)
            if prepend and text and not text.startswith(rep):
                first = cmap[0] if cmap is not None else start
                rest = cmap if cmap is not None else list(range(start, end))
                piece = (rep + text, start, end, [first] + rest)
            else:
                piece = (text, start, end, cmap)
            if self.split_words:
                spans = [(m.start(), m.start() + 1) for m in regex.finditer(regex.escape(rep), piece[0])]
                out.extend(_split_by_matches(piece, spans, "merged_with_next"))
            elif piece[0]:
                out.append(piece)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "Metaspace",
            "replacement": self.replacement,
            "prepend_scheme": self.prepend_scheme,
            "split": self.split_words,
        }


class Sequence(PreTokenizer):
    """Apply pre-tokenisers in order, each to every piece of the previous one."""

    def __init__(self, pretokenizers: _Seq[PreTokenizer]) -> None:
        self.pretokenizers = list(pretokenizers)

    def split(self, pieces: list[Piece], first: bool = True) -> list[Piece]:
        for p in self.pretokenizers:
            pieces = p.split(pieces, first)
        return pieces

    def to_json(self) -> dict[str, Any]:
        return {"type": "Sequence", "pretokenizers": [p.to_json() for p in self.pretokenizers]}
