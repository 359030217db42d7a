"""A small rule-based sentence splitter for text that is not already one sentence per line.

BERT's pre-training format wants one sentence per line (the sentence boundaries feed NSP/SOP and
the segment builders), but corpora such as Project Gutenberg books come as wrapped paragraphs.
This splitter is deliberately simple and dependency-free:

* a boundary is a ``.``, ``!``, ``?`` or ``…`` (or a run of them), optionally followed by closing
  quotes/brackets, then whitespace, then something that can open a sentence (an upper-case letter,
  a digit, an opening quote or bracket);
* no boundary after a known abbreviation (``Mr.``, ``e.g.``, ``etc.`` ...) or a single-letter
  initial (``J. R. R. Tolkien``);
* decimals (``3.14``) and dotted acronyms without a following space (``U.S.A.``) never split,
  because a boundary needs whitespace after the punctuation.

It is not a linguistic parser; it errs on the side of not splitting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# Lower-cased, without the final dot. Titles, Latin abbreviations, months, common short forms.
ABBREVIATIONS: frozenset[str] = frozenset(
    """
    mr mrs ms dr prof sr jr st mt ft rev gen col capt lt sgt cpl maj cmdr adm gov pres sen rep hon
    messrs mme mlle esq
    e.g i.e etc vs viz cf al approx ca no nos vol vols p pp ch chap fig figs ed eds trans
    jan feb mar apr jun jul aug sep sept oct nov dec
    mon tue tues wed thu thur thurs fri sat sun
    inc ltd co corp bros dept univ assn ave blvd rd
    a.m p.m u.s u.k
    """.split()
)

_CLOSERS = "\"'”’»)]}"
_OPENERS = "\"'“‘«([{¿¡"
# Candidate boundary: terminal punctuation, optional closers, whitespace, then an opener/capital/digit.
_BOUNDARY = re.compile(
    r"([.!?…]+)([" + re.escape(_CLOSERS) + r"]*)(\s+)(?=[" + re.escape(_OPENERS) + r"\d]|[^\W\d_])"
)
_LEADING = _OPENERS + "-—–"


def _is_abbreviation(text_before: str) -> bool:
    """Whether the word ending right before a dot is an abbreviation or a single-letter initial."""
    parts = text_before.rsplit(maxsplit=1)
    word = parts[-1].lstrip(_LEADING) if parts else ""
    if len(word) == 1:  # an initial: "J. R. R. Tolkien"
        return word.isalpha() and word.isupper()
    return word.lower() in ABBREVIATIONS


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences; whitespace (including wrapped lines) is normalised to one space.

    >>> split_sentences("Mr. Smith paid $3.50. He left! Did he? \u201cYes.\u201d Then he went.")
    ['Mr. Smith paid $3.50.', 'He left!', 'Did he?', '\u201cYes.\u201d', 'Then he went.']
    """
    text = " ".join(text.split())
    if not text:
        return []
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        punct = m.group(1)
        next_char = text[m.end()] if m.end() < len(text) else ""
        # only the word right before the dot matters: look at a short window, not the whole prefix
        if punct == "." and _is_abbreviation(text[max(start, m.start() - 32) : m.start()]):
            continue
        # "..." followed by a lower-case letter is a pause, not an end; the lookahead already needs
        # a letter, so only reject lower-case continuations after an ellipsis.
        if punct in ("...", "…") and next_char.islower():
            continue
        if next_char.isalpha() and next_char.islower():
            continue
        end = m.start(3)
        sentences.append(text[start:end])
        start = m.end()
    if start < len(text):
        sentences.append(text[start:])
    return sentences


def split_paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Join wrapped lines into paragraphs; a blank (or whitespace-only) line ends a paragraph."""
    buf: list[str] = []
    for line in lines:
        if line.strip():
            buf.append(line.strip())
        elif buf:
            yield " ".join(buf)
            buf = []
    if buf:
        yield " ".join(buf)
