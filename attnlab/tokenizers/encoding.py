"""The result of encoding one text (or text pair): ids and everything aligned with them.

All lists have one entry per token (length T). ``offsets`` are character spans ``[start, end)`` into the
ORIGINAL text of the sequence the token comes from (``(0, 0)`` for special and padding tokens).
"""

from __future__ import annotations

__all__ = ["Encoding"]


class Encoding:
    """One encoded sequence.

    Attributes (each of length T):
        ids: token ids.
        tokens: token strings.
        offsets: ``(start, end)`` character spans in the original text.
        type_ids: segment (token type) ids: 0 for the first sequence, 1 for the second under BERT's template.
        special_tokens_mask: 1 for special tokens added by the template and for padding, else 0.
        attention_mask: 1 for real tokens, 0 for padding.
        word_ids: index of the pre-tokenised word each token belongs to (``None`` for special/padding tokens).
        sequence_ids: 0 or 1 for tokens of the first / second text, ``None`` for special/padding tokens.
        overflowing: the windows cut off by truncation (each a full Encoding with its own offsets), in order.
    """

    # A plain slotted class rather than a dataclass: one Encoding is built per text, so construction cost
    # (default factories) shows in the encoding throughput. The offsets may be held as two int columns
    # (``starts``/``ends``) and made into (start, end) tuples when first read, as HF's Encoding converts its
    # offsets when Python reads them: a batch's tuples would otherwise be created, then scanned by the cyclic
    # garbage collector, whether or not anyone reads them (benchmarks/tokenizers.py).
    __slots__ = (
        "ids",
        "tokens",
        "_offsets",
        "_starts",
        "_ends",
        "type_ids",
        "special_tokens_mask",
        "attention_mask",
        "word_ids",
        "sequence_ids",
        "overflowing",
    )

    def __init__(
        self,
        ids: list[int] | None = None,
        tokens: list[str] | None = None,
        offsets: list[tuple[int, int]] | None = None,
        type_ids: list[int] | None = None,
        special_tokens_mask: list[int] | None = None,
        attention_mask: list[int] | None = None,
        word_ids: list[int | None] | None = None,
        sequence_ids: list[int | None] | None = None,
        overflowing: list[Encoding] | None = None,
        *,
        starts: list[int] | None = None,
        ends: list[int] | None = None,
    ) -> None:
        """``offsets`` as tuples, or as the columns ``starts`` and ``ends`` (then ``offsets`` is ``None``)."""
        self.ids = [] if ids is None else ids
        self.tokens = [] if tokens is None else tokens
        if offsets is None and starts is not None and ends is not None:
            self._offsets, self._starts, self._ends = None, starts, ends
        else:
            self._offsets, self._starts, self._ends = ([] if offsets is None else offsets), None, None
        self.type_ids = [] if type_ids is None else type_ids
        self.special_tokens_mask = [] if special_tokens_mask is None else special_tokens_mask
        self.attention_mask = [] if attention_mask is None else attention_mask
        self.word_ids = [] if word_ids is None else word_ids
        self.sequence_ids = [] if sequence_ids is None else sequence_ids
        self.overflowing = [] if overflowing is None else overflowing

    @property
    def offsets(self) -> list[tuple[int, int]]:
        offsets = self._offsets
        if offsets is None:
            offsets = self._offsets = list(zip(self._starts, self._ends))  # type: ignore[arg-type]
            self._starts = self._ends = None
        return offsets

    @offsets.setter
    def offsets(self, value: list[tuple[int, int]]) -> None:
        self._offsets, self._starts, self._ends = value, None, None

    def offset_columns(self) -> tuple[list[int], list[int]]:
        """``(starts, ends)``: the offsets as two columns, without making the tuples (the lists may be the
        encoding's own: do not change them)."""
        if self._offsets is None:
            return self._starts, self._ends  # type: ignore[return-value]
        return [s for s, _ in self._offsets], [e for _, e in self._offsets]

    def __repr__(self) -> str:
        more = "..." if len(self.ids) > 8 else ""
        n, k = len(self.ids), len(self.overflowing)
        return f"Encoding(num_tokens={n}, tokens={self.tokens[:8]!r}{more}, overflowing={k})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Encoding):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_sequences(self) -> int:
        return len({s for s in self.sequence_ids if s is not None})

    def copy(self) -> Encoding:
        return Encoding(
            list(self.ids),
            list(self.tokens),
            list(self.offsets),
            list(self.type_ids),
            list(self.special_tokens_mask),
            list(self.attention_mask),
            list(self.word_ids),
            list(self.sequence_ids),
            [o.copy() for o in self.overflowing],
        )

    def slice(self, start: int, stop: int) -> Encoding:
        """Tokens ``[start, stop)`` (no overflowing)."""
        return Encoding(
            self.ids[start:stop],
            self.tokens[start:stop],
            self.offsets[start:stop],
            self.type_ids[start:stop],
            self.special_tokens_mask[start:stop],
            self.attention_mask[start:stop],
            self.word_ids[start:stop],
            self.sequence_ids[start:stop],
        )

    def extend(self, other: Encoding) -> None:
        """Append ``other``'s tokens (not its overflowing)."""
        self.ids.extend(other.ids)
        self.tokens.extend(other.tokens)
        self.offsets.extend(other.offsets)
        self.type_ids.extend(other.type_ids)
        self.special_tokens_mask.extend(other.special_tokens_mask)
        self.attention_mask.extend(other.attention_mask)
        self.word_ids.extend(other.word_ids)
        self.sequence_ids.extend(other.sequence_ids)

    def truncate(self, max_length: int, stride: int = 0, direction: str = "right") -> None:
        """Keep ``max_length`` tokens; the rest become overflowing windows that overlap by ``stride`` tokens.

        Windows step by ``max_length - stride`` from the kept end (as HF tokenizers does); the last window may
        be shorter.
        """
        n = len(self.ids)
        if max_length >= n:
            return
        if max_length == 0:
            whole = self.copy()
            whole.overflowing = []
            self.__init__()  # type: ignore[misc]
            self.overflowing = [whole]
            return
        if stride >= max_length:
            raise ValueError(
                f"truncation stride ({stride}) must be smaller than the length left for the sequence "
                f"({max_length}, which excludes the special tokens)"
            )
        step = max_length - stride
        ranges: list[tuple[int, int]] = []
        if direction == "right":
            for start in range(0, n, step):
                stop = min(start + max_length, n)
                ranges.append((start, stop))
                if stop == n:
                    break
        elif direction == "left":
            for stop in range(n, 0, -step):
                start = max(stop - max_length, 0)
                ranges.append((start, stop))
                if start == 0:
                    break
        else:
            raise ValueError(f"truncation direction must be 'right' or 'left', got {direction!r}")
        windows = [self.slice(s, e) for s, e in ranges]
        first = windows[0]
        self.__init__(  # type: ignore[misc]
            first.ids,
            first.tokens,
            first.offsets,
            first.type_ids,
            first.special_tokens_mask,
            first.attention_mask,
            first.word_ids,
            first.sequence_ids,
            windows[1:],
        )

    def pad(
        self,
        length: int,
        pad_id: int = 0,
        pad_type_id: int = 0,
        pad_token: str = "[PAD]",
        direction: str = "right",
    ) -> None:
        """Pad (this encoding and its overflowing windows) to ``length`` tokens on the given side."""
        for o in self.overflowing:
            o.pad(length, pad_id, pad_type_id, pad_token, direction)
        k = length - len(self.ids)
        if k <= 0:
            return
        fields = (
            ("ids", pad_id),
            ("tokens", pad_token),
            ("offsets", (0, 0)),
            ("type_ids", pad_type_id),
            ("special_tokens_mask", 1),
            ("attention_mask", 0),
            ("word_ids", None),
            ("sequence_ids", None),
        )
        for name, value in fields:
            cur = getattr(self, name)
            setattr(self, name, cur + [value] * k if direction == "right" else [value] * k + cur)


_FIELDS = (
    "ids",
    "tokens",
    "offsets",
    "type_ids",
    "special_tokens_mask",
    "attention_mask",
    "word_ids",
    "sequence_ids",
    "overflowing",
)
