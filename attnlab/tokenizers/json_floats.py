"""JSON numbers read as HF tokenizers reads them (so that Unigram scores are the same float64 values).

HF tokenizers reads ``tokenizer.json`` with Rust's serde_json, whose default number parser is fast but not
correctly rounded: it accumulates up to 19 significant digits in a 64-bit integer (digits beyond that are
ignored), converts that integer to float64 (one rounding) and multiplies or divides by a power of ten (a
second rounding). About one score in twenty then differs from the correctly rounded value by one unit in the
last place. Unigram segmentations whose paths tie up to rounding (repeated characters, for example
``"ééé…"``) then break the tie differently, so attnlab reads tokenizer.json numbers the same way.

``json.loads(text, parse_float=serde_float)`` applies it (``parse_float`` receives the literal as written).
"""

from __future__ import annotations

import re

__all__ = ["serde_float"]

_U64_MAX = (1 << 64) - 1
_NUMBER = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?")
# Correctly rounded powers of ten, as Rust's literal table holds them (10.0 ** k is not always exact).
_POW10 = [float(f"1e{k}") for k in range(309)]


def _overflows(significand: int, digit: int) -> bool:
    """Whether ``significand * 10 + digit`` no longer fits in 64 bits (serde_json's ``overflow!``)."""
    return significand >= _U64_MAX // 10 and (significand > _U64_MAX // 10 or digit > _U64_MAX % 10)


def serde_float(literal: str) -> float:
    """The float64 serde_json (without its ``float_roundtrip`` feature) reads from a JSON number literal."""
    m = _NUMBER.fullmatch(literal)
    if m is None:
        raise ValueError(f"not a JSON number: {literal!r}")
    negative, whole, fraction, exp_text = m.group(1) == "-", m.group(2), m.group(3) or "", m.group(4)
    significand = 0
    exponent = 0
    for i, ch in enumerate(whole):
        if _overflows(significand, int(ch)):
            exponent += len(whole) - i  # further integer digits only scale the value
            break
        significand = significand * 10 + int(ch)
    for ch in fraction:
        if _overflows(significand, int(ch)):
            break  # further fraction digits are ignored
        significand = significand * 10 + int(ch)
        exponent -= 1
    if exp_text is not None:
        exponent += int(exp_text)
    value = float(significand)  # u64 -> f64: round to nearest, ties to even (as Rust's `as f64`)
    while True:
        if abs(exponent) < len(_POW10):
            value = value * _POW10[exponent] if exponent >= 0 else value / _POW10[-exponent]
            break
        if value == 0.0:
            break
        if exponent >= 0:
            return float("-inf") if negative else float("inf")
        value /= 1e308
        exponent += 308
    return -value if negative else value
