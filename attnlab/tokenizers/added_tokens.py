"""Added tokens: whole tokens (``[CLS]``, ``<mask>``, user tokens) matched in the text before the model.

HF tokenizers' semantics: special tokens are matched in the original text, ``normalized`` tokens in the
normalised text; the longest match wins; ``single_word`` tokens match only between non-word characters, and
``lstrip``/``rstrip`` let a match swallow the whitespace on that side (RoBERTa's ``<mask>``).
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from attnlab.tokenizers.unicode_compat import is_alnum

__all__ = ["AddedToken", "alternation", "split_added", "is_word_char"]


@dataclass(frozen=True)
class AddedToken:
    """A token matched in the raw text before normalisation and never split (``[CLS]``, ``<mask>``, ...).

    ``lstrip``/``rstrip`` let the match swallow whitespace on that side (RoBERTa's ``<mask>``);
    ``single_word`` matches only at word boundaries; ``special`` tokens are skipped by
    ``decode(skip_special_tokens=True)``.
    ``normalized`` tokens are matched in the normalised text (so "Hello" also matches "HELLO" under an
    uncased normaliser); the others in the original text.
    """

    content: str
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False
    special: bool = True


def alternation(contents: list[str]) -> regex.Pattern | None:
    """One regex matching any of ``contents``, longest first (``None`` for none)."""
    if not contents:
        return None
    return regex.compile("|".join(regex.escape(c) for c in sorted(contents, key=len, reverse=True)))


def is_word_char(ch: str) -> bool:
    return is_alnum(ch) or ch == "_"


def split_added(
    text: str, pattern: regex.Pattern | None, table: dict[str, tuple[int, AddedToken]]
) -> list[tuple[int, int, int | None]]:
    """Cut ``text`` into ``(start, end, added token id or None)`` segments: the matches of ``pattern`` (an
    :func:`alternation` of ``table``'s tokens) that ``single_word`` allows, widened by ``lstrip``/
    ``rstrip``."""
    if pattern is None:
        return [(0, len(text), None)]
    segs: list[tuple[int, int, int | None]] = []
    pos = 0
    n = len(text)
    for m in pattern.finditer(text):
        s, e = m.span()
        if s < pos:
            continue
        tid, tok = table[m.group()]
        if tok.single_word and ((s > 0 and is_word_char(text[s - 1])) or (e < n and is_word_char(text[e]))):
            continue
        if tok.lstrip:
            while s > pos and text[s - 1].isspace():
                s -= 1
        if tok.rstrip:
            while e < n and text[e].isspace():
                e += 1
        if s > pos:
            segs.append((pos, s, None))
        segs.append((s, e, tid))
        pos = e
    if pos < n:
        segs.append((pos, n, None))
    return segs
