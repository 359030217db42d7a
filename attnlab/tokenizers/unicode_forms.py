"""NFD, NFKD, NFC and NFKC with HF tokenizers' alignment: which original character each output character
comes from.

The result of a normalisation is a list of ``(char, change)`` transformations, read against the input
characters in order (HF's ``NormalizedString::transform``): change 0 takes the next input character's span,
+1 is an inserted character (the span of the input character before it), -k takes the next input character's
span and consumes k more. HF's normaliser (the ``unicode-normalization-alignments`` crate) builds them so:

1. Decomposition: each character becomes its full decomposition; the first piece has change 0, the others +1.
2. Canonical ordering: within each run of combining characters (canonical combining class > 0), pieces are
   sorted by class, stably, each keeping its change (so a moved mark carries its change with it).
3. Composition (NFC, NFKC): a starter and a following, unblocked character with a primary composite become
   that composite, whose change is the starter's plus (the absorbed character's - 1).

For example NFC of ``"é\\u0323"``: e(0) ◌́(+1) ◌̣(0) -> e(0) ◌̣(0) ◌́(+1) -> ẹ(-1) ◌́(+1): "ẹ" takes "é"'s span
and "◌́" the span of the character before the one it would be read at, "◌̣".
"""

from __future__ import annotations

import unicodedata

import regex

from attnlab.tokenizers.unicode_compat import (
    NFD_UNKNOWN,
    NFKD_UNKNOWN,
    UNASSIGNED_IN_14,
    hf_combining,
    hf_decomposition,
)

__all__ = ["FORMS", "unicode_plan", "reorders_marks"]

FORMS = ("NFD", "NFKD", "NFC", "NFKC")


def _unknown_composite(cp: int) -> bool:
    """A composite HF's tables do not compose to (decomposition unknown there, or assigned after 14.0)."""
    return cp in NFD_UNKNOWN or cp in NFKD_UNKNOWN or cp in UNASSIGNED_IN_14


_COMPOSE_CACHE: dict[tuple[str, str], str | None] = {}


def _compose(starter: str, ch: str) -> str | None:
    """The primary composite of ``starter`` + ``ch`` (Hangul syllables included), or ``None``."""
    key = (starter, ch)
    hit = _COMPOSE_CACHE.get(key, ...)
    if hit is not ...:
        return hit  # type: ignore[return-value]
    out = unicodedata.normalize("NFC", starter + ch)
    res = out if len(out) == 1 and not _unknown_composite(ord(out)) else None
    if len(_COMPOSE_CACHE) < 1 << 16:
        _COMPOSE_CACHE[key] = res
    return res


def unicode_plan(text: str, form: str) -> list[tuple[str, int]]:
    """HF's ``(char, change)`` transformations normalising ``text`` to ``form`` (see the module)."""
    compat = form in ("NFKD", "NFKC")
    # 1. Decomposition.
    plan: list[tuple[str, int]] = []
    for ch in text:
        pieces = hf_decomposition(ch, compat) if ord(ch) > 0x7F else ch
        plan.append((pieces[0], 0))
        for p in pieces[1:]:
            plan.append((p, 1))
    # 2. Canonical ordering, run by run.
    combining = hf_combining
    i, n = 0, len(plan)
    while i < n:
        if combining(plan[i][0]) == 0:
            i += 1
            continue
        j = i
        while j < n and combining(plan[j][0]) != 0:
            j += 1
        if j - i > 1:
            plan[i:j] = sorted(plan[i:j], key=lambda item: combining(item[0]))
        i = j
    if form in ("NFD", "NFKD"):
        return plan
    # 3. Canonical composition: a character composes with the last starter when nothing lies between them,
    # or when everything between has a lower, non-zero class (marks between are in class order, so the last
    # one kept tells).
    out: list[tuple[str, int]] = []
    starter = -1  # index in `out` of the last starter, -1 when none yet
    last_class = 0  # class of the last character kept
    for ch, change in plan:
        cls = combining(ch)
        if starter >= 0 and (starter == len(out) - 1 or 0 < last_class < cls):
            composite = _compose(out[starter][0], ch)
            if composite is not None:
                out[starter] = (composite, out[starter][1] + change - 1)
                continue
        if cls == 0:
            starter = len(out)
        last_class = cls
        out.append((ch, change))
    return out


_MARK = regex.compile(r"(?<=.)\p{M}", regex.DOTALL)  # every character of non-zero class is a mark
_EDGE_CLASSES: dict[str, tuple[int, int]] = {}


def _edge_classes(ch: str) -> tuple[int, int]:
    """The combining classes of the first and last characters of ``ch``'s canonical decomposition."""
    hit = _EDGE_CLASSES.get(ch)
    if hit is None:
        d = hf_decomposition(ch, False)
        hit = (hf_combining(d[0]), hf_combining(d[-1]))
        if len(_EDGE_CLASSES) < 1 << 16:
            _EDGE_CLASSES[ch] = hit
    return hit


def reorders_marks(text: str) -> bool:
    """Whether NFD's canonical ordering moves a character of ``text``: two neighbours whose decompositions
    meet as a mark of higher class before a mark of lower, non-zero class."""
    for m in _MARK.finditer(text):
        j = m.start()
        first = _edge_classes(text[j])[0]
        if first and _edge_classes(text[j - 1])[1] > first:
            return True
    return False
