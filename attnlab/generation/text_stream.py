"""Generated ids as text while they come, for ``attnlab generate``'s terminal and the server's SSE stream.

Decoding token by token breaks multi-byte characters and can print half of a stop string, so `TextStream`
decodes all ids so far and emits only the new suffix that is safe: it holds back an incomplete UTF-8
character (U+FFFD at the end) and any tail that could still become a stop string, and never emits text from
a stop string on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to (not including) the first occurrence of any of ``stops``."""
    cut = min((i for s in stops if (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


class TextStream:
    """Feed it each new token id (`step`); it calls ``emit(token, piece)`` with each new safe piece."""

    def __init__(
        self, decode: Callable[[list[int]], str], stops: Sequence[str], emit: Callable[[int, str], None]
    ) -> None:
        self.decode, self.stops, self.emit = decode, list(stops), emit
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text emitted so far
        self.hold = max((len(s) for s in self.stops), default=1) - 1

    def step(self, token: int, done: bool) -> None:
        if done and not self.ids:
            return
        self.ids.append(token)
        text = self.decode(self.ids)
        cut = cut_at_stop(text, self.stops)
        safe = len(cut) if len(cut) < len(text) else len(text) - self.hold
        if text.endswith("\ufffd"):
            safe = min(safe, len(text) - 1)
        if safe > self.sent:
            self.emit(token, text[self.sent : safe])
            self.sent = safe
