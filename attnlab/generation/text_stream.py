"""Generated ids as text while they come, for ``attnlab generate``'s terminal and the server's SSE stream.

Decoding token by token breaks multi-byte characters and can print half of a stop string, so `TextStream`
keeps the text of all ids so far (`IncrementalText`, decoding a window of the last ids at each) and emits
only the new suffix that is safe: it holds back an incomplete UTF-8
character (U+FFFD at the end) and any tail that could still become a stop string, and never emits text from
a stop string on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to (not including) the first occurrence of any of ``stops``."""
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


class IncrementalText:
    """``decode(ids)`` kept up to date as ids are appended, decoding only the last few ids at each one.

    Decoding every id so far at every new one costs a generation time quadratic in its length (a fifth of a
    16-row decoding step of a small GPT). As Hugging Face's ``DecodeStream`` and TGI do, `add` decodes a
    window from the id before the last complete text: ``decode(ids[prefix:])`` minus
    ``decode(ids[prefix:read])`` is the new text (the window's first id gives the decoder its context: the
    space before a word, the ``##`` of a continuation). While the text ends in U+FFFD (a UTF-8 character not
    complete yet) the window keeps its start. Where the window's head gives no context (its ids decode to
    nothing: a skipped special token) or the earlier text changes with what follows (the head does not
    start the window's text), the ids are decoded whole."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.text = ""  # decode(ids)
        self.complete = ""  # decode(ids[:read])
        self.prefix = self.read = 0

    def add(self, token: int) -> str:
        """Append ``token``; returns the text of all the ids."""
        self.ids.append(token)
        head = self.decode(self.ids[self.prefix : self.read])
        window = self.decode(self.ids[self.prefix :])
        if not window.startswith(head) or (self.read > self.prefix and not head):
            self.text = self.complete = self.decode(self.ids)
            self.prefix, self.read = 0, len(self.ids)
            return self.text
        self.text = self.complete + window[len(head) :]
        if not window.endswith("\ufffd"):
            self.complete, self.prefix, self.read = self.text, self.read, len(self.ids)
        return self.text


class TextStream:
    """Feed it each new token id (`step`); it calls ``emit(token, piece)`` with each new safe piece."""

    def __init__(
        self, decode: Callable[[list[int]], str], stops: Sequence[str], emit: Callable[[int, str], None]
    ) -> None:
        self.stops, self.emit = list(stops), emit
        self.decoded = IncrementalText(decode)
        self.sent = 0  # characters of the decoded text emitted so far
        self.hold = max((len(s) for s in self.stops), default=1) - 1

    @property
    def ids(self) -> list[int]:
        return self.decoded.ids

    def step(self, token: int, done: bool) -> None:
        if done and not self.ids:
            return
        text = self.decoded.add(token)
        cut = cut_at_stop(text, self.stops)
        complete = len(text) - text.endswith("\ufffd")  # a character not complete yet is held back
        safe = len(cut) if len(cut) < len(text) else complete - self.hold  # ... and what may start a stop
        if safe > self.sent:
            self.emit(token, text[self.sent : safe])
            self.sent = safe
