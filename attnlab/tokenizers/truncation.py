"""Fitting encodings to a length: truncation with overflowing windows and a stride, and padding.

As HF tokenizers does: the windows cut off by truncation overlap their predecessor by ``stride`` tokens and
are kept in ``Encoding.overflowing`` (question answering over long contexts reads every window);
padding goes to a fixed length or to the longest of a batch, optionally rounded up to a multiple.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnlab.tokenizers.encoding import Encoding

__all__ = [
    "TRUNCATION_STRATEGIES",
    "PADDING_STRATEGIES",
    "truncate_encodings",
    "pad_encodings",
    "flatten_overflowing",
]

TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
PADDING_STRATEGIES = ("longest", "max_length")


def truncate_encodings(encodings: list[Encoding], t: dict[str, Any], special_tokens_added: int) -> None:
    """Truncate one or two encodings in place to ``t["max_length"]`` tokens less the
    ``special_tokens_added`` by the template, per ``t``'s strategy, stride and direction (HF's rules: under
    ``longest_first`` the shorter sequence keeps all it can; if both are too long they share the length)."""
    max_length = max(t["max_length"] - special_tokens_added, 0)
    stride, direction, strategy = t["stride"], t["direction"], t["strategy"]
    if max_length == 0:
        for e in encodings:
            e.truncate(0, stride, direction)
        return
    total = sum(len(e.ids) for e in encodings)
    if total <= max_length:
        return
    to_remove = total - max_length
    if strategy == "longest_first":
        if len(encodings) == 1:
            encodings[0].truncate(max_length, stride, direction)
            return
        # The shorter sequence keeps all it can; if both are too long, they share max_length.
        n1, n2 = len(encodings[0].ids), len(encodings[1].ids)
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > max_length else max(n1, max_length - n1)
        if n1 + n2 > max_length:
            n1 = max_length // 2
            n2 = n1 + max_length % 2
        if swap:
            n1, n2 = n2, n1
        encodings[0].truncate(n1, stride, direction)
        encodings[1].truncate(n2, stride, direction)
        return
    if strategy == "only_second" and len(encodings) < 2:
        raise ValueError("truncation strategy 'only_second' needs a text pair")
    target = encodings[0] if strategy == "only_first" else encodings[1]
    if len(target.ids) <= to_remove:
        raise ValueError(
            f"truncation ({strategy}): the sequence to truncate has {len(target.ids)} tokens, too few to "
            f"remove the {to_remove} needed to fit max_length={t['max_length']}"
        )
    target.truncate(len(target.ids) - to_remove, stride, direction)


def pad_encodings(encodings: list[Encoding], p: dict[str, Any], single: bool = False) -> None:
    """Pad in place to ``p["length"]``, else to the longest of ``encodings`` (a ``single`` encoding: only
    to ``pad_to_multiple_of``)."""
    if p["length"] is not None:
        target = p["length"]
    elif single:
        return _pad_multiple(encodings, p, None)
    else:
        target = max((len(e.ids) for e in encodings), default=0)
    _pad_multiple(encodings, p, target)


def _pad_multiple(encodings: list[Encoding], p: dict[str, Any], target: int | None) -> None:
    for e in encodings:
        length = len(e.ids) if target is None else target
        m = p["pad_to_multiple_of"]
        if m and length % m:
            length += m - length % m
        e.pad(length, p["pad_id"], p["pad_type_id"], p["pad_token"], p["direction"])


def flatten_overflowing(encodings: Sequence[Encoding]) -> tuple[list[Encoding], list[int]]:
    """Every encoding followed by its overflowing windows, and each window's sample index.

    For question answering over long documents: encode ``(question, context)`` with truncation
    ``only_second`` and a stride, then train or predict on every window.
    """
    flat: list[Encoding] = []
    mapping: list[int] = []
    for i, e in enumerate(encodings):
        for w in [e, *e.overflowing]:
            flat.append(w)
            mapping.append(i)
    return flat, mapping
