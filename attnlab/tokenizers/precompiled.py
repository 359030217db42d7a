"""SentencePiece's precompiled character map (the ``Precompiled`` normaliser of T5, ALBERT, XLM-R, mBART...).

SentencePiece compiles its normalisation rules (``nmt_nfkc``: NFKC plus a few whitespace and control-character
rules) into one binary blob, which HF's ``tokenizer.json`` stores base64-encoded as ``precompiled_charsmap``:

    <trie size: uint32 little endian, in bytes> <double-array trie: uint32 units> <normalised strings, each
    ending with a NUL byte>

The trie (darts-clone's double array, Yata et al.) maps UTF-8 byte strings to the offset of their replacement
in the strings blob. A unit holds, bit by bit: the label (bits 0-7, plus bit 31 set on value units), a "has a
leaf" flag (bit 8), and the offset to the children (bits 10-31, shifted left by 8 more when bit 9 is set); a
leaf's value unit holds the value in bits 0-30.

How the map is applied, as HF tokenizers applies it (which is what the released tokenizer.json files are used
with, and what this class must reproduce id for id and offset for offset):

* The text is cut into extended grapheme clusters. A cluster shorter than 6 UTF-8 bytes is first looked up
  whole: if some prefix of it is a key (the shortest such prefix), the whole cluster becomes that key's
  replacement (so ``"ﬁ\\u0301"`` becomes ``"fi"``: the accent goes with the ligature).
* Otherwise each character of the cluster is looked up alone and replaced, or kept unchanged.
* Alignment: a replacement's characters take the original characters one to one; extra characters take the
  span of the character before them; when a replacement is shorter, the characters it drops are absorbed by
  the last character written so far (none at the start of the text: the following characters then shift, as
  in HF's ``NormalizedString::transform``).

SentencePiece itself matches the longest prefix over the raw text rather than per cluster; the two agree on
ordinary text and differ on rare combinations such as the one above.
"""

from __future__ import annotations

import base64
import binascii
from array import array
from typing import Any

import regex

from attnlab.tokenizers.normalizers import NormalizedString, Normalizer

__all__ = ["CharsMap", "Precompiled", "PrecompiledFormatError"]

_GRAPHEME = regex.compile(r"\X", regex.DOTALL)
_WHOLE_CLUSTER_BYTES = 6  # clusters of fewer UTF-8 bytes are looked up whole first


class PrecompiledFormatError(ValueError):
    """The ``precompiled_charsmap`` blob is not a SentencePiece character map."""


class CharsMap:
    """The parsed blob: ``lookup(key)`` gives the replacement of the shortest prefix of ``key`` in the map."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < 4:
            raise PrecompiledFormatError(f"{len(blob)} bytes: too short for the 4-byte trie size header")
        trie_size = int.from_bytes(blob[:4], "little")
        if trie_size % 4 or trie_size == 0 or 4 + trie_size > len(blob):
            raise PrecompiledFormatError(
                f"trie size {trie_size} in the header: expected a non-zero multiple of 4 of at most "
                f"{len(blob) - 4} (the bytes after the header)"
            )
        units = array("I")
        if units.itemsize != 4:  # pragma: no cover - every supported platform has a 4-byte "I"
            units = array("L")
        units.frombytes(blob[4 : 4 + trie_size])
        if units.itemsize == 4 and int.from_bytes(b"\x01\x00", "little") != 1:  # pragma: no cover
            units.byteswap()
        self.units = units.tolist()  # a list indexes faster than an array
        self.strings = blob[4 + trie_size :]
        self._cache: dict[str, str | None] = {}

    def _first_value(self, key: bytes) -> int | None:
        """The value of the shortest prefix of ``key`` stored in the trie (darts-clone commonPrefixSearch)."""
        units = self.units
        n = len(units)
        pos = _offset(units[0])
        for b in key:
            pos ^= b
            if pos >= n:
                return None
            unit = units[pos]
            if unit & 0x800000FF != b:  # label mismatch: no key continues this way
                return None
            pos ^= _offset(unit)
            if (unit >> 8) & 1:  # has a leaf: the prefix read so far is a key
                if pos >= n:
                    return None
                return units[pos] & 0x7FFFFFFF
        return None

    def lookup(self, key: str) -> str | None:
        """The replacement for ``key`` (its shortest prefix that is a key), or ``None``."""
        hit = self._cache.get(key, ...)
        if hit is not ...:
            return hit  # type: ignore[return-value]
        value = self._first_value(key.encode("utf-8"))
        out: str | None = None
        if value is not None:
            if value >= len(self.strings):
                raise PrecompiledFormatError(
                    f"trie value {value} points past the {len(self.strings)}-byte strings blob"
                )
            end = self.strings.find(b"\x00", value)
            raw = self.strings[value : end if end >= 0 else len(self.strings)]
            try:
                out = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise PrecompiledFormatError(f"replacement at byte {value} is not UTF-8: {raw!r}") from None
        if len(self._cache) < 1 << 18:
            self._cache[key] = out
        return out


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & 0x200) >> 6)


class Precompiled(Normalizer):
    """SentencePiece's compiled normalisation rules, applied as HF tokenizers applies them (see the module).

    Args:
        charsmap: the blob (bytes) or its base64 text as ``tokenizer.json`` stores it.
    """

    def __init__(self, charsmap: bytes | str) -> None:
        if isinstance(charsmap, str):
            try:
                charsmap = base64.b64decode(charsmap, validate=True)
            except (binascii.Error, ValueError) as e:
                raise PrecompiledFormatError(f"precompiled_charsmap is not valid base64: {e}") from None
        self.blob = bytes(charsmap)
        self.map = CharsMap(self.blob)
        # Printable ASCII characters the map leaves alone: a text made of them only is returned as is.
        kept = [chr(c) for c in range(0x20, 0x7F) if self.map.lookup(chr(c)) is None]
        self._identity_ascii = regex.compile("[" + regex.escape("".join(kept)) + "]*")
        self._plans: dict[str, tuple[tuple[str, int], ...]] = {}

    def _plan(self, cluster: str) -> tuple[tuple[str, int], ...]:
        """HF's transformations for one grapheme cluster: ``(char, change)`` with change 0 (replaces one
        original character), 1 (inserted) or -k (replaces one and absorbs k more); see the module."""
        plan = self._plans.get(cluster)
        if plan is not None:
            return plan
        out: list[tuple[str, int]] = []
        whole = self.map.lookup(cluster) if len(cluster.encode("utf-8")) < _WHOLE_CLUSTER_BYTES else None
        if whole is not None:
            _replace(out, len(cluster), whole)
        else:
            for ch in cluster:
                rep = self.map.lookup(ch)
                if rep is None:
                    out.append((ch, 0))
                else:
                    _replace(out, 1, rep)
        plan = tuple(out)
        if len(self._plans) < 1 << 18:
            self._plans[cluster] = plan
        return plan

    def _transformations(self, text: str) -> list[tuple[str, int]] | None:
        """Every character's transformation, or ``None`` when the text is unchanged."""
        if self._identity_ascii.fullmatch(text):
            return None
        out: list[tuple[str, int]] = []
        changed = False
        for cluster in _GRAPHEME.findall(text):
            plan = self._plan(cluster)
            if len(plan) == 1 and plan[0] == (cluster, 0):
                out.append(plan[0])
                continue
            changed = True
            for ch, change in plan:
                if change < 0 and not ch:  # a deletion: the last character written absorbs it
                    if out:
                        out[-1] = (out[-1][0], out[-1][1] + change)
                else:
                    out.append((ch, change))
        return out if changed else None

    def normalize(self, ns: NormalizedString) -> NormalizedString:
        plan = self._transformations(ns.normalized)
        return ns if plan is None else ns.transform(plan)

    def normalize_str(self, text: str) -> str:
        plan = self._transformations(text)
        return text if plan is None else "".join(ch for ch, _ in plan)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(self.blob).decode("ascii")}


def _replace(out: list[tuple[str, int]], old_count: int, new: str) -> None:
    """Append the transformations replacing ``old_count`` characters by ``new`` (HF's rule: extra characters
    are insertions at the end; a shorter replacement puts the difference on its last character, or, when
    empty, on whatever character was written before: marked here by ``("", -k)``)."""
    diff = len(new) - old_count
    start = len(out)
    out.extend((c, 0) for c in new)
    if diff > 0:
        for i in range(len(out) - diff, len(out)):
            out[i] = (out[i][0], 1)
    elif diff < 0:
        if len(out) > start:
            out[-1] = (out[-1][0], out[-1][1] + diff)
        elif start > 0:
            out[-1] = (out[-1][0], out[-1][1] + diff)
        else:
            out.append(("", diff))  # absorbed by the previous cluster's last character, if any
