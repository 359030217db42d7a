"""The encoder's hot path: texts whose pre-tokeniser is one regex split (BERT's, ``Whitespace``,
``WhitespaceSplit``, GPT-2's byte-level split) and that hold no added token.

Each regex match is a word; the model's segmentation of a word (ids, tokens, offsets inside the word) is
looked up in a per-word cache, so running text costs one dictionary look-up per word. The encoding of one
text is built whole: the single-sequence template's special tokens are put around it as it is encoded
(:class:`SingleTemplate`), and the offsets are kept as two int columns (see :class:`Encoding`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import regex

import attnlab.tokenizers.pre_tokenizers as pre
import attnlab.tokenizers.processors as proc
from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.normalized_string import NormalizedString

__all__ = [
    "SingleTemplate",
    "WordEntry",
    "word_split_pattern",
    "single_template",
    "word_entry",
    "encode_words",
]

# Pre-tokenisers that are one regex split (the words are the matches).
REGEX_PRE_TOKENIZERS: dict[type, regex.Pattern] = {
    pre.BertPreTokenizer: pre._BERT_RE,
    pre.Whitespace: pre._WHITESPACE_RE,
    pre.WhitespaceSplit: pre._WHITESPACE_SPLIT_RE,
}

# A word's segmentation: ids, tokens, and each token's start and end in characters of the word.
WordEntry = tuple[list[int], list[str], list[int], list[int]]


class SingleTemplate(NamedTuple):
    """A single-sequence template as the special tokens before and after the sequence."""

    before_ids: tuple[int, ...]
    before_tokens: tuple[str, ...]
    after_ids: tuple[int, ...]
    after_tokens: tuple[str, ...]
    before_types: tuple[int, ...]
    type_id: int  # of the sequence's tokens
    after_types: tuple[int, ...]


def word_split_pattern(pre_tokenizer: Any, model: Any) -> tuple[regex.Pattern, bool] | None:
    """``(word regex, byte_level)`` when the pre-tokeniser is one plain regex split (BERT-style, or GPT-2's
    byte-level split without a prefix space) and the model is deterministic; else ``None``."""
    if getattr(model, "dropout", None):
        return None
    kind = type(pre_tokenizer)
    if kind in REGEX_PRE_TOKENIZERS:
        return REGEX_PRE_TOKENIZERS[kind], False
    if kind is pre.ByteLevel and pre_tokenizer.use_regex and not pre_tokenizer.add_prefix_space:
        return pre._GPT2_RE, True
    return None


def single_template(post_processor: Any, add_special_tokens: bool) -> SingleTemplate | None:
    """The post-processor's single-sequence template when it only puts special tokens around the sequence
    (no post-processor, BERT's, a plain ``TemplateProcessing``), else ``None``."""
    pp = post_processor
    if pp is None or type(pp) is proc.PostProcessor:
        return SingleTemplate((), (), (), (), (), 0, ())
    if type(pp) not in (proc.TemplateProcessing, proc.BertProcessing):
        return None
    items = pp.single
    seq = [i for i, (kind, _, _) in enumerate(items) if kind == "sequence"]
    if len(seq) != 1 or items[seq[0]][1] != 0:
        return None
    k = seq[0]
    before = items[:k] if add_special_tokens else []
    after = items[k + 1 :] if add_special_tokens else []
    ids = pp.special_tokens
    return SingleTemplate(
        tuple(ids[what] for _, what, _ in before), tuple(what for _, what, _ in before),
        tuple(ids[what] for _, what, _ in after), tuple(what for _, what, _ in after),
        tuple(t for _, _, t in before), items[k][2], tuple(t for _, _, t in after),
    )  # fmt: skip


def word_entry(model: Any, word: str, byte_level: bool) -> WordEntry:
    """The model's segmentation of ``word`` (byte-level: of its bytes, offsets back in characters)."""
    if byte_level:
        btext, _, _, cmap = pre.ByteLevel._to_bytes((word, 0, len(word), None))
        toks = model.tokenize(btext)
        if cmap is None:
            rel = [t[2] for t in toks]
        else:
            rel = [(cmap[a], cmap[b - 1] + 1) for _, _, (a, b) in toks]
    else:
        toks = model.tokenize(word)
        rel = [t[2] for t in toks]
    return [t[0] for t in toks], [t[1] for t in toks], [a for a, _ in rel], [b for _, b in rel]


def encode_words(
    ns: NormalizedString,
    pattern: regex.Pattern,
    get: Callable[[str], WordEntry | None],
    byte_level: bool,
    entry_for: Callable[[str, bool], WordEntry],
    wrap: SingleTemplate | None,
) -> Encoding:
    """The encoding of the normalised text ``ns``: each match of ``pattern`` a word, its segmentation from
    ``get`` (the cache) or ``entry_for``; with ``wrap``, the template's special tokens around it."""
    starts, ends = ns.starts, ns.ends
    p = len(wrap.before_ids) if wrap is not None else 0
    ids: list[int] = list(wrap.before_ids) if wrap is not None else []
    tokens: list[str] = list(wrap.before_tokens) if wrap is not None else []
    tok_starts: list[int] = [0] * p  # the offsets as two columns (see Encoding)
    tok_ends: list[int] = [0] * p
    words: list[int | None] = [None] * p
    w = 0
    for m in pattern.finditer(ns.normalized):
        word = m.group()
        entry = get(word)
        if entry is None:
            entry = entry_for(word, byte_level)
        wids, wtoks, rel_starts, rel_ends = entry
        s, e = m.span()
        if len(wids) == 1:
            ids.append(wids[0])
            tokens.append(wtoks[0])
            if starts is None:
                tok_starts.append(s)
                tok_ends.append(e)
            else:
                tok_starts.append(starts[s])
                tok_ends.append(ends[e - 1])  # type: ignore[index]
            words.append(w)
        else:
            ids += wids
            tokens += wtoks
            if starts is None:
                tok_starts += [s + a for a in rel_starts]
                tok_ends += [s + b for b in rel_ends]
            else:
                tok_starts += [starts[s + a] for a in rel_starts]
                tok_ends += [ends[s + b - 1] for b in rel_ends]  # type: ignore[index]
            words += [w] * len(wids)
        w += 1
    n = len(ids) - p
    if wrap is None:
        return Encoding(
            ids, tokens, None, [0] * n, [0] * n, [1] * n, words, [0] * n, starts=tok_starts, ends=tok_ends
        )
    q = len(wrap.after_ids)
    ids += wrap.after_ids
    tokens += wrap.after_tokens
    tok_starts += [0] * q
    tok_ends += [0] * q
    words += [None] * q
    type_ids = [*wrap.before_types, *[wrap.type_id] * n, *wrap.after_types]
    special = [1] * p + [0] * n + [1] * q
    sequence: list[int | None] = [None] * p + [0] * n + [None] * q
    attention = [1] * (p + n + q)
    return Encoding(
        ids, tokens, None, type_ids, special, attention, words, sequence, starts=tok_starts, ends=tok_ends
    )
