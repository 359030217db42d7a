"""Token ids of many texts, without tokens, offsets or word ids: the lean path of corpus encoding.

``encode_ids_flat(tokenizer, texts)`` gives exactly the ids of ``tokenizer.encode_batch(texts)``, as one flat
array plus each text's length, several times faster on running text (``benchmarks/tokenizers.py``). How
(per block of texts):

1. The texts are joined into one string, each followed by "\\n", and normalised in one go without an
   alignment (BERT's normaliser is a per-character map: one ``str.translate``).
2. One ``findall`` of the pre-tokeniser's regex, extended with a first alternative ``\\n``, gives every word
   and, as the "\\n" matches, the end of every text. This is the per-text split: for BERT's, ``Whitespace``'s
   and ``WhitespaceSplit``'s patterns whitespace only separates words, so "\\n" (and "\\n" inside a text,
   written as a space) cannot change them; in GPT-2's pattern the whitespace classes exclude "\\n", so a
   whitespace run ends at a text's end exactly as it does at the end of a string.
   The ``findall`` runs on the standard library's ``re`` (faster than ``regex`` here) with the
   pattern written out in character ranges: the code points of the Basic Multilingual Plane that ``regex``
   itself puts in ``\\s``, ``\\w``, ``\\p{L}``, ``\\p{N}`` and BERT's punctuation, read off ``regex`` once per
   process. ``re`` scans classes holding code points above U+FFFF range by range (slower than ``regex``), so
   a block holding such a character is split by ``regex`` itself.
3. Each word is looked up in a word -> ids cache (new words go through the model once); the ids are
   flattened in C (``itertools.chain`` into numpy) and the texts' lengths read off the end markers. The
   cache adds ``_FIRST`` to the first id of each word, so the same pass tells which ids start a word
   (``encode_ids_and_word_starts``, for whole-word masking); one ``&`` takes the marks off.
4. The single-sequence template's special tokens are put around each text with array indexing.

Texts the block cannot take (an added token in the text, a "\\n" inside a text under a byte-level
pre-tokeniser) and pipelines it does not cover (other pre-tokenisers, BPE dropout, normalised added tokens,
truncation, padding, other post-processors) go through the full ``encode``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, NamedTuple, Protocol

import numpy as np
import regex

import attnlab.tokenizers.normalizers as norm
import attnlab.tokenizers.pre_tokenizers as pre
import attnlab.tokenizers.processors as proc

__all__ = ["encode_ids_flat", "encode_ids_batch", "encode_ids_and_word_starts", "supports_ids_only"]


class TokenizerLike(Protocol):
    """What this path reads of an :class:`attnlab.tokenizers.tokenizer.Tokenizer` (which imports this module
    for its ``encode_ids_*`` methods, so it is named here by its interface)."""

    model: Any
    normalizer: Any
    pre_tokenizer: Any
    post_processor: Any
    truncation: dict[str, Any] | None
    padding: dict[str, Any] | None
    _added_re: regex.Pattern | None
    __dict__: dict[str, Any]

    def _fast_pattern(self) -> tuple[regex.Pattern, bool] | None: ...

    def _normalized_added(self) -> tuple[regex.Pattern | None, dict[str, Any]]: ...

    def encode(
        self, text: Any, pair: Any = None, add_special_tokens: bool = True, return_overflowing: bool = True
    ) -> Any: ...

    def encode_batch(
        self, inputs: Sequence[Any], add_special_tokens: bool = True, return_overflowing: bool = True
    ) -> list[Any]: ...


BLOCK_TEXTS = 4096  # texts per findall: bounds the word list (~30 MB per 2 MB of text)
CACHE_CAPACITY = 200_000  # words kept in the word -> ids cache (cleared at once when full, as the models do)
_END = "\n"  # marks the end of each text in the joined block
_END_ID = -1
_FIRST = 1 << 32  # added to the first id of each word in the cache (ids are < 2**32): marks word starts


def _with_end_marker(pattern: regex.Pattern, byte_level: bool) -> regex.Pattern:
    if not byte_level:
        return regex.compile(r"\n|" + pattern.pattern, pattern.flags)
    runs = r"\s+(?!\S)|\s+"
    if not pattern.pattern.endswith(runs):
        raise AssertionError(f"unexpected GPT-2 pattern {pattern.pattern!r}")
    return regex.compile(r"\n|" + pattern.pattern[: -len(runs)] + r"[^\S\n]+(?!\S)|[^\S\n]+", pattern.flags)


_MARKED: dict[regex.Pattern, Callable[[str], list[str]]] = {}

# -------------------------------------------------------------- the word split on the standard library's re

_BMP_END = 0x10000
_ABOVE_BMP = re.compile("[\U00010000-\U0010ffff]")


@functools.cache
def bmp_ranges(expr: str) -> tuple[tuple[int, int], ...]:
    """The code points below U+10000 that ``regex`` matches with the class ``[expr]``, as sorted inclusive
    ``(first, last)`` ranges (read off ``regex`` itself, so both engines agree on its Unicode version)."""
    every = "".join(map(chr, range(_BMP_END)))
    return tuple((m.start(), m.end() - 1) for m in regex.finditer(f"[{expr}]+", every, regex.V1))


def _complement(*classes: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The BMP code points in none of ``classes``."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for a, b in sorted(r for c in classes for r in c):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt < _BMP_END:
        out.append((nxt, _BMP_END - 1))
    return tuple(out)


def _minus(cls: tuple[tuple[int, int], ...], cp: int) -> tuple[tuple[int, int], ...]:
    return _complement(_complement(cls), ((cp, cp),))


def re_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A ``re`` character class matching exactly ``ranges``."""
    return "[" + "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges) + "]"


def _stdlib_pattern(pattern: regex.Pattern) -> re.Pattern | None:
    """``\\n|`` + ``pattern`` (GPT-2's with the end-of-text whitespace classes of ``_with_end_marker``) for
    ``re``, equal to ``regex``'s on text below U+10000; ``None`` for a pattern not written out here."""
    space = bmp_ranges(r"\s")
    if pattern is pre._BERT_RE:
        punct = bmp_ranges(pre._PUNCT)
        text = rf"\n|{re_class(_complement(space, punct))}+|{re_class(punct)}"
    elif pattern is pre._WHITESPACE_RE:
        word = bmp_ranges(pre._WORD)
        text = rf"\n|{re_class(word)}+|{re_class(_complement(word, space))}+"
    elif pattern is pre._WHITESPACE_SPLIT_RE:
        text = rf"\n|{re_class(_complement(space))}+"
    elif pattern is pre._GPT2_RE:
        letter, number = bmp_ranges(pre._LETTER), bmp_ranges(pre._NUMBER)
        other = re_class(_complement(space, letter, number))
        run = re_class(_minus(space, ord(_END)))  # [^\S\n]
        not_space = re_class(_complement(space))  # \S
        text = (
            rf"\n|'s|'t|'re|'ve|'m|'ll|'d| ?{re_class(letter)}+| ?{re_class(number)}+| ?{other}+"
            rf"|{run}+(?!{not_space})|{run}+"
        )
    else:
        return None
    return re.compile(text)


def _splitter(pattern: regex.Pattern, byte_level: bool) -> Callable[[str], list[str]]:
    """``findall`` of the marked pattern: by ``re`` when the text stays below U+10000, else by ``regex``."""
    marked = _with_end_marker(pattern, byte_level).findall
    fast = _stdlib_pattern(pattern)
    if fast is None:
        return marked
    fast_findall, above = fast.findall, _ABOVE_BMP.search

    def findall(text: str) -> list[str]:
        if text.isascii() or above(text) is None:
            return fast_findall(text)
        return marked(text)

    return findall


class _Plan(NamedTuple):
    split: Callable[[str], list[str]]  # findall of the word pattern with the end-of-text alternative
    byte_level: bool
    prefix: tuple[int, ...]  # special-token ids before / after each text
    suffix: tuple[int, ...]


def _template(
    tokenizer: TokenizerLike, add_special_tokens: bool
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The special-token ids the post-processor puts before and after a single sequence (``None``: a
    post-processor this path does not know)."""
    pp = tokenizer.post_processor
    if pp is None or type(pp) in (proc.PostProcessor, proc.ByteLevelProcessing):
        return (), ()
    if type(pp) not in (proc.TemplateProcessing, proc.BertProcessing, proc.RobertaProcessing):
        return None
    if not add_special_tokens:
        return (), ()
    items = pp.single
    seq = [i for i, (kind, _, _) in enumerate(items) if kind == "sequence"]
    if len(seq) != 1 or items[seq[0]][1] != 0:
        return None
    k = seq[0]
    return (
        tuple(pp.special_tokens[what] for _, what, _ in items[:k]),
        tuple(pp.special_tokens[what] for _, what, _ in items[k + 1 :]),
    )


def _plan(tokenizer: TokenizerLike, add_special_tokens: bool) -> _Plan | None:
    fast = tokenizer._fast_pattern()
    if fast is None or tokenizer.truncation is not None or tokenizer.padding is not None:
        return None
    if tokenizer._normalized_added()[0] is not None:
        return None
    template = _template(tokenizer, add_special_tokens)
    if template is None:
        return None
    pattern, byte_level = fast
    split = _MARKED.get(pattern)
    if split is None:
        split = _MARKED[pattern] = _splitter(pattern, byte_level)
    return _Plan(split, byte_level, *template)


def supports_ids_only(tokenizer: TokenizerLike, add_special_tokens: bool = True) -> bool:
    """Whether ``encode_ids_flat`` takes the lean path for this pipeline (else it calls ``encode_batch``)."""
    return _plan(tokenizer, add_special_tokens) is not None


def encode_ids_flat(
    tokenizer: TokenizerLike, texts: Sequence[str], add_special_tokens: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The ids of ``tokenizer.encode_batch(texts, add_special_tokens)`` as ``(ids, lengths)``: ``ids`` (N,)
    int64, every text's ids in order; ``lengths`` (L,) int64, each text's number of ids."""
    ids, lengths, _ = _encode_flat(tokenizer, texts, add_special_tokens, False)
    return ids, lengths


def encode_ids_and_word_starts(
    tokenizer: TokenizerLike, texts: Sequence[str], add_special_tokens: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``encode_ids_flat`` plus ``word_starts`` (N,) bool: True at the first id of each word, as
    ``Encoding.word_ids`` tells it (the id's word id differs from the previous id's in the same text, or is
    ``None``: every special token counts as a start)."""
    ids, lengths, starts = _encode_flat(tokenizer, texts, add_special_tokens, True)
    assert starts is not None
    return ids, lengths, starts


class _Flat(NamedTuple):
    ids: np.ndarray  # (N,) int64
    lengths: np.ndarray  # (L,) int64 ids per text
    starts: np.ndarray | None  # (N,) bool word starts, when asked for


def _encode_flat(
    tokenizer: TokenizerLike, texts: Sequence[str], add_special_tokens: bool, want_starts: bool
) -> _Flat:
    plan = _plan(tokenizer, add_special_tokens)
    if plan is None:
        encs = tokenizer.encode_batch(list(texts), add_special_tokens, return_overflowing=False)
        return _from_encodings(encs, want_starts)
    if isinstance(texts, str):
        raise TypeError("encode_ids_flat: texts must be a sequence of str, got one str")
    parts = [
        _encode_block(tokenizer, plan, list(texts[i : i + BLOCK_TEXTS]), add_special_tokens, want_starts)
        for i in range(0, len(texts), BLOCK_TEXTS)
    ]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _Flat(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool) if want_starts else None)
    return _Flat(
        np.concatenate([p.ids for p in parts]),
        np.concatenate([p.lengths for p in parts]),
        np.concatenate([p.starts for p in parts]) if want_starts else None,  # type: ignore[misc]
    )


def encode_ids_batch(
    tokenizer: TokenizerLike, texts: Sequence[str], add_special_tokens: bool = True
) -> list[list[int]]:
    """``[e.ids for e in tokenizer.encode_batch(texts, add_special_tokens)]``, by the lean path."""
    return split_flat(*encode_ids_flat(tokenizer, texts, add_special_tokens))


def split_flat(ids: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    """``(ids, lengths)`` as one list of ids per text."""
    flat = ids.tolist()
    out: list[list[int]] = []
    pos = 0
    for n in lengths.tolist():
        out.append(flat[pos : pos + n])
        pos += n
    return out


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.fromiter(chain.from_iterable(lists), np.int64)
    return ids, np.fromiter(map(len, lists), np.int64, count=len(lists))


def _word_starts(word_ids: list[int | None]) -> list[bool]:
    """Which tokens start a word: the first, and those whose word id differs from the previous or is None."""
    if not word_ids:
        return []
    return [True] + [w is None or w != p for p, w in zip(word_ids, word_ids[1:])]


def _from_encodings(encs: list, want_starts: bool) -> _Flat:
    ids, lengths = _flat([e.ids for e in encs])
    if not want_starts:
        return _Flat(ids, lengths, None)
    starts = chain.from_iterable(_word_starts(e.word_ids) for e in encs)
    return _Flat(ids, lengths, np.fromiter(starts, bool, count=len(ids)))


def _encode_block(
    tokenizer: TokenizerLike, plan: _Plan, texts: list[str], add_special_tokens: bool, want_starts: bool
) -> _Flat:
    try:
        joined = _END.join(texts) + _END
    except TypeError:
        raise TypeError("encode_ids_flat: every text must be a str") from None
    # Texts the block cannot take go through the full encode: those holding an added token and, under the
    # byte-level split (where "\n" is a byte of its own), those holding a "\n".
    odd: set[int] = set()
    added_re = tokenizer._added_re
    if added_re is not None and added_re.search(joined) is not None:
        odd = {i for i, t in enumerate(texts) if added_re.search(t) is not None}
    if plan.byte_level and joined.count(_END) != len(texts):
        odd |= {i for i, t in enumerate(texts) if _END in t}
    if odd:
        return _merge(tokenizer, texts, odd, add_special_tokens, want_starts)
    if joined.count(_END) != len(texts):  # whitespace only separates words here: a "\n" is a space
        texts = [t.replace(_END, " ") for t in texts]
        joined = _END.join(texts) + _END
    try:
        normalized = _normalize(tokenizer, texts, joined)
    except _NewlineFromNormalizer:
        return _from_encodings(tokenizer.encode_batch(texts, add_special_tokens, False), want_starts)
    ids, lengths, starts = _ids(tokenizer, plan, normalized)
    if len(lengths) != len(texts):
        raise AssertionError(f"ids_only: {len(lengths)} end markers for {len(texts)} texts")
    if plan.prefix or plan.suffix:
        ids, lengths, starts = _add_specials(ids, lengths, starts, plan.prefix, plan.suffix)
    return _Flat(ids, lengths, starts if want_starts else None)


def _normalize(tokenizer: TokenizerLike, texts: list[str], joined: str) -> str:
    """The normalised block, one end marker after each text."""
    n = tokenizer.normalizer
    if n is None:
        return joined
    if type(n) is norm.BertNormalizer and not n.reorders(joined):
        table = n.translation_table(joined)
        if table.get(ord(_END)) != _END:  # clean_text writes "\n" as " ": keep the end markers
            table = {**table, ord(_END): _END}
        return joined.translate(table)
    parts = [n.normalize_str(t) for t in texts]
    out = _END.join(parts) + _END
    if out.count(_END) != len(texts):
        raise _NewlineFromNormalizer
    return out


class _NewlineFromNormalizer(Exception):
    """A normaliser wrote a "\\n" into a text: the end markers cannot be told apart."""


def _ids(tokenizer: TokenizerLike, plan: _Plan, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, lengths, word_starts)`` of the normalised block ``text``."""
    words = plan.split(text)
    cache = _cache(tokenizer)
    missing = set(words).difference(cache)
    if missing:
        if len(cache) + len(missing) > CACHE_CAPACITY:
            cache.clear()
            cache[_END] = (_END_ID,)
            missing = set(words).difference(cache)
        model = tokenizer.model
        to_bytes = pre.ByteLevel._to_bytes
        for w in missing:
            symbols = to_bytes((w, 0, len(w), None))[0] if plan.byte_level else w
            ids = [t[0] for t in model.tokenize(symbols)]
            if ids:
                ids[0] += _FIRST
            cache[w] = tuple(ids)
    flat = np.fromiter(chain.from_iterable(map(cache.__getitem__, words)), np.int64)
    marker = flat == _END_ID
    ends = np.flatnonzero(marker)  # (L,) where each text's marker sits
    lengths = np.diff(ends, prepend=-1) - 1
    flat = flat[~marker]
    return flat & (_FIRST - 1), lengths, flat >= _FIRST


def _cache(tokenizer: TokenizerLike) -> dict[str, tuple[int, ...]]:
    """The tokenizer's word -> ids cache (each word's first id plus ``_FIRST``), for its current model and
    pre-tokeniser."""
    key = (tokenizer.model, tokenizer.pre_tokenizer)
    state = tokenizer.__dict__
    if state.get("_ids_cache_model") != key:
        state["_ids_cache"] = {_END: (_END_ID,)}
        state["_ids_cache_model"] = key
    return state["_ids_cache"]


def _add_specials(
    ids: np.ndarray, lengths: np.ndarray, starts: np.ndarray, prefix: tuple[int, ...], suffix: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put ``prefix`` before and ``suffix`` after each text's ids (special tokens start words)."""
    k = len(prefix) + len(suffix)
    n_texts = len(lengths)
    out_lengths = lengths + k
    out = np.empty(len(ids) + k * n_texts, np.int64)
    out_starts = np.ones(len(out), bool)
    begins = np.cumsum(out_lengths) - out_lengths  # (L,) where each text starts in ``out``
    text_of = np.repeat(np.arange(n_texts), lengths)  # (N,) the text of each id
    at = np.arange(len(ids)) + text_of * k + len(prefix)  # (N,) where each id goes
    out[at] = ids
    out_starts[at] = starts
    for j, tid in enumerate(prefix):
        out[begins + j] = tid
    for j, tid in enumerate(suffix):
        out[begins + len(prefix) + lengths + j] = tid
    return out, out_lengths, out_starts


def _merge(
    tokenizer: TokenizerLike, texts: list[str], odd: set[int], add_special_tokens: bool, want_starts: bool
) -> _Flat:
    """A block where the texts in ``odd`` go through the full encode and the others through this path."""
    lean = _encode_flat(
        tokenizer, [t for i, t in enumerate(texts) if i not in odd], add_special_tokens, want_starts
    )
    lean_ids = lean.ids.tolist()
    lean_starts = lean.starts.tolist() if lean.starts is not None else []
    lean_lengths = iter(lean.lengths.tolist())
    id_lists: list[list[int]] = []
    start_lists: list[list[bool]] = []
    pos = 0
    for i, t in enumerate(texts):
        if i in odd:
            enc = tokenizer.encode(t, None, add_special_tokens, False)
            id_lists.append(enc.ids)
            if want_starts:
                start_lists.append(_word_starts(enc.word_ids))
        else:
            n = next(lean_lengths)
            id_lists.append(lean_ids[pos : pos + n])
            start_lists.append(lean_starts[pos : pos + n])
            pos += n
    ids, lengths = _flat(id_lists)
    if not want_starts:
        return _Flat(ids, lengths, None)
    return _Flat(ids, lengths, np.fromiter(chain.from_iterable(start_lists), bool, count=len(ids)))
