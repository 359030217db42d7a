"""A normalised text that remembers, for each of its characters, the span of the original text it came from,
and the interface every normaliser implements (:mod:`attnlab.tokenizers.normalizers`).

A token's offsets, computed on the normalised text, are turned back into offsets into the text the user passed
(right under lowercasing, accent stripping, CJK spacing and control-character removal). The alignment is two
int lists (``starts``, ``ends``) or ``None`` when it is the identity (the common case for ASCII text:
cleaning whitespace and lowercasing keep one character per character).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as _Seq
from typing import Any

__all__ = ["NormalizedString", "Normalizer"]


class NormalizedString:
    """A normalised text with, for each of its characters, the original span it came from.

    ``starts[i]``/``ends[i]`` give the original span of ``normalized[i]``; both ``None`` means identity
    (``normalized[i]`` is ``original[i]`` up to a one-to-one character map such as ASCII lowercasing).
    """

    __slots__ = ("original", "normalized", "starts", "ends")

    def __init__(
        self,
        original: str,
        normalized: str | None = None,
        starts: list[int] | None = None,
        ends: list[int] | None = None,
    ) -> None:
        self.original = original
        self.normalized = original if normalized is None else normalized
        self.starts = starts
        self.ends = ends

    def __repr__(self) -> str:
        return f"NormalizedString({self.original!r} -> {self.normalized!r})"

    def __len__(self) -> int:
        return len(self.normalized)

    def alignments(self) -> tuple[list[int], list[int]]:
        """Explicit ``(starts, ends)`` lists (materialised from the identity when needed)."""
        if self.starts is None:
            n = len(self.normalized)
            return list(range(n)), list(range(1, n + 1))
        return self.starts, self.ends  # type: ignore[return-value]

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """Map the normalised span ``[start, end)`` to a span of the original text."""
        if self.starts is None:
            return start, end
        if end > start:
            return self.starts[start], self.ends[end - 1]  # type: ignore[index]
        # An empty span sits where the next character starts (or at the end of the text).
        pos = self.starts[start] if start < len(self.starts) else len(self.original)
        return pos, pos

    def map_chars(self, fn: Callable[[str], str]) -> NormalizedString:
        """Apply ``fn`` to each character; every produced character inherits its source's span."""
        out: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        old_starts, old_ends = self.alignments()
        for i, ch in enumerate(self.normalized):
            rep = fn(ch)
            if not rep:
                continue
            out.append(rep)
            s, e = old_starts[i], old_ends[i]
            if len(rep) == 1:
                starts.append(s)
                ends.append(e)
            else:
                starts.extend([s] * len(rep))
                ends.extend([e] * len(rep))
        return NormalizedString(self.original, "".join(out), starts, ends)

    def replace_spans(self, spans: list[tuple[int, int, str]]) -> NormalizedString:
        """Replace non-overlapping, sorted, non-empty normalised spans ``(start, end, text)``.

        Every new character takes the original span of the LAST character it replaces, as HF tokenizers'
        ``Replace`` does (so ``"''"`` -> ``'"'`` points at the second quote).
        """
        if not spans:
            return self
        old_starts, old_ends = self.alignments()
        n = len(self.normalized)
        out: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        pos = 0
        for s, e, rep in spans:
            if s > pos:
                out.append(self.normalized[pos:s])
                starts.extend(old_starts[pos:s])
                ends.extend(old_ends[pos:s])
            if rep:
                out.append(rep)
                starts.extend([old_starts[e - 1]] * len(rep))
                ends.extend([old_ends[e - 1]] * len(rep))
            pos = e
        if pos < n:
            out.append(self.normalized[pos:])
            starts.extend(old_starts[pos:])
            ends.extend(old_ends[pos:])
        return NormalizedString(self.original, "".join(out), starts, ends)

    def transform(self, plan: _Seq[tuple[str, int]]) -> NormalizedString:
        """Apply HF tokenizers' ``(char, change)`` transformations, read against the characters in order:
        change 0 takes the next character's span, +1 is an inserted character (the span of the character
        before it; empty at the start), -k takes the next character's span and consumes k more."""
        old_starts, old_ends = self.alignments()
        n = len(old_starts)
        chars: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        pos = 0  # the next character of self.normalized
        end_of_text = old_ends[-1] if n else 0
        for ch, change in plan:
            if change > 0:
                s, e = (old_starts[pos - 1], old_ends[pos - 1]) if pos > 0 else (0, 0)
            elif pos < n:
                s, e = old_starts[pos], old_ends[pos]
                pos += 1 - change
            else:  # pragma: no cover - a plan never reads past the text
                s = e = end_of_text
            chars.append(ch)
            starts.append(s)
            ends.append(e)
        return NormalizedString(self.original, "".join(chars), starts, ends)

    def slice(self, start: int, end: int) -> NormalizedString:
        """The normalised sub-string ``[start, end)``, keeping spans into the same original text."""
        starts, ends = self.alignments()
        return NormalizedString(self.original, self.normalized[start:end], starts[start:end], ends[start:end])


class Normalizer:
    """Base class: subclasses implement :meth:`normalize`."""

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        raise NotImplementedError

    def normalize_str(self, text: str) -> str:
        """Normalise a plain string (no alignment kept)."""
        return self.normalize(NormalizedString(text)).normalized

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError
