"""Normalisers: text clean-up before pre-tokenisation, keeping an alignment to the original text.

A normaliser maps a :class:`NormalizedString` to a new one. Every character of the normalised text remembers
the span ``[start, end)`` of original characters it came from, so that a token's offsets, computed on the
normalised text, can be turned back into offsets into the text the user passed (right under lowercasing,
accent stripping, CJK spacing and control-character removal).

The alignment and the base class are :mod:`attnlab.tokenizers.normalized_string`. The BERT normaliser has an
ASCII fast path that does the whole text with ``str.translate`` and ``str.lower``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from collections.abc import Sequence as _Seq
from typing import Any

import regex

from attnlab.tokenizers.normalized_string import NormalizedString, Normalizer
from attnlab.tokenizers.unicode_compat import (
    CCC_UNKNOWN,
    NFD_UNKNOWN,
    NFKD_UNKNOWN,
    UNASSIGNED_IN_14,
    hf_is_combining_mark,
    hf_is_control,
    hf_is_nonspacing_mark,
    hf_is_punctuation,
    hf_lower,
    hf_nfd,
    ranges_class,
)
from attnlab.tokenizers.unicode_forms import reorders_marks, unicode_plan

__all__ = [
    "NormalizedString",
    "Normalizer",
    "BertNormalizer",
    "Lowercase",
    "StripAccents",
    "NFD",
    "NFKD",
    "NFC",
    "NFKC",
    "Replace",
    "Prepend",
    "Strip",
    "Sequence",
    "is_bert_whitespace",
    "is_bert_control",
    "is_bert_punctuation",
    "is_chinese_char",
]


# ----------------------------------------------------------------------------------------------------------
# Character classes, as BERT's tokenization.py (and HF tokenizers' BertNormalizer) define them.

_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_chinese_char(ch: str) -> bool:
    """CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana, which are written with spaces)."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)  # the Unicode White_Space property (Python's str.isspace also counts \x1c-\x1f, Unicode does not)


_WHITESPACE_CHARS = "".join(sorted(WHITESPACE))


def is_bert_whitespace(ch: str) -> bool:
    """Unicode White_Space (tab, newline and carriage return included)."""
    return ch in WHITESPACE


def is_bert_control(ch: str) -> bool:
    """Control characters removed by ``clean_text``: Cc, Cf and Co except tab/newline/CR, as HF tokenizers
    has them. Unassigned code points (Cn) are kept (and become the unknown token), as in HF;
    google-research/bert deletes them (it tests ``category.startswith("C")``)."""
    return hf_is_control(ch)


def is_bert_punctuation(ch: str) -> bool:
    """ASCII symbols (``$``, ``+``, ``^``, ...) count as punctuation, as in BERT, plus Unicode ``P*`` (as HF
    tokenizers' tables have them)."""
    return hf_is_punctuation(ch)


# ASCII fast path tables: control characters deleted (vertical tab and form feed are category Cc, so
# clean_text removes them before whitespace is mapped), tab/newline/CR mapped to " ".
_ASCII_CLEAN: dict[int, str | None] = {i: None for i in range(32) if chr(i) not in "\t\n\r"}
_ASCII_CLEAN[127] = None
_ASCII_CLEAN.update({ord("\t"): " ", ord("\n"): " ", ord("\r"): " "})
_ASCII_NEEDS_DELETE = regex.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class BertNormalizer(Normalizer):
    """BERT's basic normalisation (Devlin et al. 2019, google-research/bert ``tokenization.py``).

    In order: control characters removed and whitespace mapped to a space (``clean_text``), spaces put around
    CJK ideographs (``handle_chinese_chars``), accents stripped (NFD then drop ``Mn``; by default iff
    ``lowercase``, which is what the uncased checkpoints do), lowercasing.
    """

    def __init__(
        self,
        clean_text: bool = True,
        handle_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        lowercase: bool = True,
    ) -> None:
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        self.strip_accents = strip_accents
        self.lowercase = lowercase
        self._do_strip = lowercase if strip_accents is None else strip_accents

    def _clean_char(self, ch: str) -> str | None:
        """``clean_text`` and ``handle_chinese_chars`` on one character; ``None`` when they leave it alone."""
        if self.clean_text:
            if ch == "\x00" or ch == "\ufffd" or is_bert_control(ch):
                return ""
            if is_bert_whitespace(ch):
                return " "
        if self.handle_chinese_chars and is_chinese_char(ch):
            return f" {ch} "
        return None

    def _char(self, ch: str) -> str:
        """The normalisation of one non-ASCII character (possibly empty or several characters)."""
        cleaned = self._clean_char(ch)
        padded = cleaned is not None and len(cleaned) == 3 and cleaned[1] == ch  # a CJK ideograph, spaced
        if cleaned is not None and not padded:
            return cleaned
        if self._do_strip:
            # (CJK compatibility ideographs decompose too: U+F9C4 becomes U+9F8D.)
            ch = "".join(c for c in hf_nfd(ch) if not hf_is_nonspacing_mark(c))
        if self.lowercase:
            # Character-wise lowercasing (no context-dependent final sigma), as HF tokenizers does.
            ch = "".join(hf_lower(c) for c in ch)
        return f" {ch} " if padded else ch

    def reorders(self, text: str) -> bool:
        """Whether accent stripping's NFD reorders combining marks in ``text``: then the text is normalised as
        a whole (HF's NFD over the text, its marks sorted by class), not character by character."""
        if not self._do_strip or text.isascii():
            return False
        if self.clean_text and _MAYBE_DELETED.search(text) is not None:
            # Clean-up runs first: a deleted character between two marks leaves them neighbours. Only the
            # candidates are looked at (a block of texts may hold one among a million characters).
            text = _MAYBE_DELETED.sub(_kept_by_clean_text, text)
        return reorders_marks(text)

    def _normalize_whole(self, ns: NormalizedString) -> NormalizedString:
        """HF's order on the whole text: clean-up, CJK spacing, NFD, nonspacing marks dropped, lowercase."""
        ns = _map_mixed(ns, lambda c: c if (r := self._clean_char(c)) is None else r, self._ascii_clean)
        ns = ns.transform(unicode_plan(ns.normalized, "NFD"))
        ns = ns.map_chars(lambda c: "" if hf_is_nonspacing_mark(c) else c)
        return ns.map_chars(hf_lower) if self.lowercase else ns

    def _ascii_clean(self, chunk: str) -> str:
        return chunk.translate(_ASCII_CLEAN) if self.clean_text else chunk

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        text = ns.normalized
        if self.reorders(text):
            return self._normalize_whole(ns)
        needs_delete = self.clean_text and _ASCII_NEEDS_DELETE.search(text) is not None
        if text.isascii() and not needs_delete:
            # Fast path: one character per character, alignment unchanged.
            if self.clean_text:
                text = text.translate(_ASCII_CLEAN)
            if self.lowercase:
                text = text.lower()
            return NormalizedString(ns.original, text, ns.starts, ns.ends)
        if not needs_delete:
            # Second fast path: every non-ASCII character of the text maps to exactly one character (quotes,
            # dashes, accented letters...): one str.translate with a per-character table, alignment unchanged.
            table = self._table
            one_to_one = True
            for ch in set(_NON_ASCII.findall(text)):
                rep = table.get(ord(ch))
                if rep is None:
                    rep = self._char(ch)
                    if len(table) < 1 << 16:
                        table[ord(ch)] = rep
                if len(rep) != 1:
                    one_to_one = False
                    break
            if one_to_one:
                return NormalizedString(ns.original, text.translate(table), ns.starts, ns.ends)
        return _map_mixed(ns, self._char, self._ascii_fast)

    def normalize_str(self, text: str) -> str:
        """The normalised text without an alignment: one ``str.translate`` (the map is per character, unless
        marks are reordered: see :meth:`reorders`)."""
        if self.reorders(text):
            return self._normalize_whole(NormalizedString(text)).normalized
        return text.translate(self.translation_table(text))

    def translation_table(self, text: str) -> dict[int, str]:
        """A ``str.translate`` table covering every character of ``text``: ``text.translate(table)`` is the
        normalised text (for ids-only encoding, which needs no alignment). Deleted characters map to ""."""
        table = self.__dict__.get("_full_table")
        if table is None or len(table) > _TABLE_CAPACITY:
            table = {
                i: self._ascii_fast(chr(i)) if _ASCII_RUN.match(chr(i)) else self._char(chr(i))
                for i in range(128)
            }
            self.__dict__["_full_table"] = table
        if not text.isascii():
            for ch in set(_NON_ASCII.findall(text)):
                if ord(ch) not in table:
                    table[ord(ch)] = self._char(ch)
        return table

    @property
    def _table(self) -> dict[int, str]:
        table = self.__dict__.get("_table_cache")
        if table is None:
            table = {i: self._ascii_fast(chr(i)) for i in range(128) if chr(i) not in "\x0b\x0c"}
            table = {k: v for k, v in table.items() if v}
            self.__dict__["_table_cache"] = table
        return table

    def _ascii_fast(self, chunk: str) -> str:
        if self.clean_text:
            chunk = chunk.translate(_ASCII_CLEAN)
        if self.lowercase:
            chunk = chunk.lower()
        return chunk

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "BertNormalizer",
            "clean_text": self.clean_text,
            "handle_chinese_chars": self.handle_chinese_chars,
            "strip_accents": self.strip_accents,
            "lowercase": self.lowercase,
        }


_ASCII_RUN = regex.compile(r"[\t\n\r\x20-\x7e]+")
_TABLE_CAPACITY = 1 << 16  # characters kept in a normaliser's translation table
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")
# A superset of what clean_text deletes (controls, format and private-use characters, U+FFFD).
_MAYBE_DELETED = regex.compile(r"[\p{Cc}\p{Cf}\p{Co}\ufffd]")


def _kept_by_clean_text(m: regex.Match) -> str:
    c = m.group()
    return "" if c == "\x00" or c == "\ufffd" or is_bert_control(c) else c


def _map_mixed(
    ns: NormalizedString, char_fn: Callable[[str], str], ascii_fn: Callable[[str], str]
) -> NormalizedString:
    """Map ``ns``: ``ascii_fn`` on runs of printable ASCII (length preserving), ``char_fn`` elsewhere."""
    text = ns.normalized
    old_starts, old_ends = ns.alignments()
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _ASCII_RUN.match(text, pos)
        if m is not None:
            e = m.end()
            out.append(ascii_fn(text[pos:e]))
            starts.extend(old_starts[pos:e])
            ends.extend(old_ends[pos:e])
            pos = e
            continue
        rep = char_fn(text[pos])
        if rep:
            out.append(rep)
            starts.extend([old_starts[pos]] * len(rep))
            ends.extend([old_ends[pos]] * len(rep))
        pos += 1
    return NormalizedString(ns.original, "".join(out), starts, ends)


class Lowercase(Normalizer):
    """Character-wise Unicode lowercasing."""

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        text = ns.normalized
        if text.isascii():
            return NormalizedString(ns.original, text.lower(), ns.starts, ns.ends)
        return _map_mixed(ns, hf_lower, str.lower)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Lowercase"}


class StripAccents(Normalizer):
    """Remove combining marks (Mn, Mc and Me, as HF tokenizers' table has them); meant to follow NFD or NFKD.

    (BERT's own accent stripping, in :class:`BertNormalizer`, removes only nonspacing marks.)"""

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        if ns.normalized.isascii():
            return ns
        return _map_mixed(ns, lambda c: "" if hf_is_combining_mark(c) else c, lambda s: s)

    def to_json(self) -> dict[str, Any]:
        return {"type": "StripAccents"}


class _UnicodeNormalization(Normalizer):
    """NFD / NFKD / NFC / NFKC with HF tokenizers' alignment (``unicode_forms``: decomposition, canonical
    ordering and composition as ``(char, change)`` transformations; HF's decomposition tables)."""

    form = "NFC"

    def _unchanged(self, text: str) -> bool:
        return text.isascii() or (
            unicodedata.is_normalized(self.form, text) and _HF_TABLE_CHARS.search(text) is None
        )

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        if self._unchanged(ns.normalized):
            return ns
        return ns.transform(unicode_plan(ns.normalized, self.form))

    def normalize_str(self, text: str) -> str:
        if text.isascii():
            return text
        if _HF_TABLE_CHARS.search(text) is None:  # Python's tables agree with HF's on this text
            return unicodedata.normalize(self.form, text)
        return "".join(ch for ch, _ in unicode_plan(text, self.form))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.form}


def _hf_table_chars() -> regex.Pattern:
    """Characters whose decomposition or combining class HF's tables lack (and those this Python assigns and
    Unicode 14 did not), and the pieces they would decompose to: a text holding none of them normalises the
    same with Python's tables."""
    return regex.compile(
        "["
        + ranges_class(NFKD_UNKNOWN)
        + ranges_class(NFD_UNKNOWN)
        + ranges_class(CCC_UNKNOWN)
        + ranges_class(UNASSIGNED_IN_14)
        + "".join(
            regex.escape(c)
            for lo, hi in NFKD_UNKNOWN.pairs
            for cp in range(lo, hi + 1)
            for c in unicodedata.normalize("NFKD", chr(cp))
        )
        + "]"
    )


_HF_TABLE_CHARS = _hf_table_chars()


class NFD(_UnicodeNormalization):
    form = "NFD"


class NFKD(_UnicodeNormalization):
    form = "NFKD"


class NFC(_UnicodeNormalization):
    form = "NFC"


class NFKC(_UnicodeNormalization):
    form = "NFKC"


class Replace(Normalizer):
    """Replace every match of ``pattern`` (a literal string, or a regex when ``is_regex``) by ``content``."""

    def __init__(self, pattern: str, content: str, is_regex: bool = False) -> None:
        self.pattern = pattern
        self.content = content
        self.is_regex = is_regex
        self._re = regex.compile(pattern if is_regex else regex.escape(pattern))

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        spans = [
            (m.start(), m.end(), self.content)
            for m in self._re.finditer(ns.normalized)
            if m.end() > m.start()
        ]
        return ns.replace_spans(spans)

    def to_json(self) -> dict[str, Any]:
        key = "Regex" if self.is_regex else "String"
        return {"type": "Replace", "pattern": {key: self.pattern}, "content": self.content}


class Prepend(Normalizer):
    """Prepend ``prepend`` to a non-empty text (its characters take the first character's span)."""

    def __init__(self, prepend: str) -> None:
        self.prepend = prepend

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        if not ns.normalized:
            return ns
        starts, ends = ns.alignments()
        k = len(self.prepend)
        return NormalizedString(
            ns.original, self.prepend + ns.normalized, [starts[0]] * k + starts, [ends[0]] * k + ends
        )

    def to_json(self) -> dict[str, Any]:
        return {"type": "Prepend", "prepend": self.prepend}


class Strip(Normalizer):
    """Strip whitespace on the left and/or right."""

    def __init__(self, left: bool = True, right: bool = True) -> None:
        self.left = left
        self.right = right

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        text = ns.normalized
        s, e = 0, len(text)
        ws = _WHITESPACE_CHARS
        if self.left:
            s = e - len(text.lstrip(ws))
        if self.right:
            e = s + len(text[s:].rstrip(ws))
        if (s, e) == (0, len(text)):
            return ns
        return ns.slice(s, e)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Strip", "strip_left": self.left, "strip_right": self.right}


class Sequence(Normalizer):
    """Apply normalisers in order."""

    def __init__(self, normalizers: _Seq[Normalizer]) -> None:
        self.normalizers = list(normalizers)

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        for n in self.normalizers:
            ns = n.normalize(ns)
        return ns

    def to_json(self) -> dict[str, Any]:
        return {"type": "Sequence", "normalizers": [n.to_json() for n in self.normalizers]}
