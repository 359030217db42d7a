"""The tokenisation pipeline: added tokens -> normaliser -> pre-tokeniser -> model -> post-processor.

``Tokenizer.encode(text, pair)`` returns an :class:`Encoding` (ids, tokens, offsets into the original text,
type ids, special-tokens mask, attention mask, word ids) after truncation (with overflowing windows and a
stride) and padding, as HF tokenizers does; ``decode`` inverts it. The factories at the end build the
field's pipelines: BERT's WordPiece, GPT-2/RoBERTa's byte-level BPE, and SentencePiece-style Unigram/BPE
(ALBERT, XLNet, T5).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import regex

from attnlab.tokenizers import decoders as dec
from attnlab.tokenizers import normalizers as norm
from attnlab.tokenizers import pre_tokenizers as pre
from attnlab.tokenizers import processors as proc
from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.models import BPE, Model, Unigram, WordPiece
from attnlab.tokenizers.unicode_compat import is_alnum

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "AddedToken",
    "Tokenizer",
    "TRUNCATION_STRATEGIES",
    "bert_wordpiece",
    "byte_level_bpe",
    "sentencepiece_unigram",
    "sentencepiece_bpe",
    "flatten_overflowing",
]

TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second")
PADDING_STRATEGIES = ("longest", "max_length")


@dataclass(frozen=True)
class AddedToken:
    """A token matched in the raw text before normalisation and never split (``[CLS]``, ``<mask>``, ...).

    ``lstrip``/``rstrip`` let the match swallow whitespace on that side (RoBERTa's ``<mask>``);
    ``single_word`` matches only at word boundaries; ``special`` tokens are skipped by
    ``decode(skip_special_tokens=True)``.
    ``normalized`` tokens are matched in the normalised text (so "Hello" also matches "HELLO" under an
    uncased normaliser); the others in the original text.
    """

    content: str
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False
    special: bool = True


Input = str | tuple[str, str] | list[str] | tuple[list[str], list[str]]


class Tokenizer:
    """A full tokenisation pipeline.

    Args:
        model: the subword model (WordPiece, BPE or Unigram).
        normalizer, pre_tokenizer, post_processor, decoder: the pipeline's stages (each optional).
        special_tokens: special tokens (strings or :class:`AddedToken`) matched whole in the text; those
            not in the model's vocabulary get new ids after it.
    """

    def __init__(
        self,
        model: Model,
        normalizer: norm.Normalizer | None = None,
        pre_tokenizer: pre.PreTokenizer | None = None,
        post_processor: proc.PostProcessor | None = None,
        decoder: dec.Decoder | None = None,
        special_tokens: Iterable[str | AddedToken] = (),
    ) -> None:
        self.model = model
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.added_tokens: dict[str, tuple[int, AddedToken]] = {}
        self._added_ids: dict[int, str] = {}
        self._added_re: regex.Pattern | None = None
        self._norm_added_for: object = _UNSET
        self._norm_added: tuple[regex.Pattern | None, dict[str, tuple[int, AddedToken]]] = (None, {})
        self._word_cache: dict[str, tuple[list[int], list[str], list[tuple[int, int]]]] = {}
        self._word_cache_model: tuple[Any, Any] | None = None  # (model, pre-tokeniser) the cache is for
        self.truncation: dict[str, Any] | None = None
        self.padding: dict[str, Any] | None = None
        self.add_special_tokens(list(special_tokens))

    # ------------------------------------------------------------------------------------------------------
    # Vocabulary

    def _add(self, tokens: Sequence[str | AddedToken], special: bool) -> int:
        n_new = 0
        for t in tokens:
            tok = t if isinstance(t, AddedToken) else AddedToken(t, special=special, normalized=not special)
            if not tok.content:
                raise ValueError("an added token cannot be empty")
            if tok.content in self.added_tokens:
                old_id = self.added_tokens[tok.content][0]
                self.added_tokens[tok.content] = (old_id, tok)
                continue
            tid = self.model.token_to_id(tok.content)
            if tid is None:
                tid = max([self.model.vocab_size - 1, len(self.model._id_to_token) - 1, *self._added_ids]) + 1
                n_new += 1
            self.added_tokens[tok.content] = (tid, tok)
            self._added_ids[tid] = tok.content
        self._compile_added()
        return n_new

    def add_special_tokens(self, tokens: Sequence[str | AddedToken]) -> int:
        """Add special tokens; returns how many were new to the vocabulary."""
        return self._add(tokens, special=True)

    def add_tokens(self, tokens: Sequence[str | AddedToken]) -> int:
        """Add ordinary (non-special) whole tokens; returns how many were new to the vocabulary."""
        return self._add(tokens, special=False)

    def _compile_added(self) -> None:
        raw = [c for c, (_, t) in self.added_tokens.items() if not t.normalized]
        # longest match first
        self._added_re = _alternation(raw)
        self._norm_added_for: object = _UNSET  # normalised forms are computed lazily, per normaliser

    def _normalized_added(self) -> tuple[regex.Pattern | None, dict[str, tuple[int, AddedToken]]]:
        """The regex and table of the normalised added tokens, for the current normaliser."""
        if self._norm_added_for is not self.normalizer:
            table: dict[str, tuple[int, AddedToken]] = {}
            for c, (i, t) in self.added_tokens.items():
                if t.normalized:
                    key = self.normalizer.normalize_str(c) if self.normalizer is not None else c
                    if key:
                        table.setdefault(key, (i, t))
            self._norm_added = (_alternation(list(table)), table)
            self._norm_added_for = self.normalizer
        return self._norm_added

    @property
    def special_tokens(self) -> list[str]:
        return [c for c, (_, t) in self.added_tokens.items() if t.special]

    @property
    def all_special_ids(self) -> set[int]:
        return {i for i, t in self.added_tokens.values() if t.special}

    def token_to_id(self, token: str) -> int | None:
        hit = self.added_tokens.get(token)
        if hit is not None:
            return hit[0]
        return self.model.token_to_id(token)

    def id_to_token(self, id: int) -> str | None:
        tok = self._added_ids.get(id)
        if tok is None:
            return self.model.id_to_token(id)
        if self.added_tokens[tok][1].normalized and self.normalizer is not None:
            return self.normalizer.normalize_str(tok)  # as HF tokenizers: a normalised token's normal form
        return tok

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        vocab = self.model.get_vocab()
        if with_added_tokens:
            vocab.update({c: i for c, (i, _) in self.added_tokens.items()})
        return vocab

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return len(self.get_vocab(with_added_tokens))

    @property
    def vocab_size(self) -> int:
        return self.get_vocab_size(True)

    # ------------------------------------------------------------------------------------------------------
    # Settings

    def enable_truncation(
        self, max_length: int, stride: int = 0, strategy: str = "longest_first", direction: str = "right"
    ) -> None:
        """Truncate to ``max_length`` tokens (special tokens included); the rest become overflowing windows
        that overlap their predecessor by ``stride`` tokens."""
        if strategy not in TRUNCATION_STRATEGIES:
            raise ValueError(
                f"unknown truncation strategy {strategy!r}; expected one of {TRUNCATION_STRATEGIES}"
            )
        if direction not in ("left", "right"):
            raise ValueError(f"truncation direction must be 'left' or 'right', got {direction!r}")
        if max_length < 0 or stride < 0:
            raise ValueError(f"max_length ({max_length}) and stride ({stride}) must be >= 0")
        self.truncation = {
            "max_length": max_length,
            "stride": stride,
            "strategy": strategy,
            "direction": direction,
        }

    def no_truncation(self) -> None:
        self.truncation = None

    def enable_padding(
        self,
        direction: str = "right",
        pad_id: int | None = None,
        pad_type_id: int = 0,
        pad_token: str | None = None,
        length: int | None = None,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        """Pad to ``length`` (strategy max_length) or, when ``None``, to the longest of the batch."""
        if direction not in ("left", "right"):
            raise ValueError(f"padding direction must be 'left' or 'right', got {direction!r}")
        if pad_token is None:
            pad_token = next((t for t in ("[PAD]", "<pad>") if self.token_to_id(t) is not None), "[PAD]")
        if pad_id is None:
            pad_id = self.token_to_id(pad_token)
            if pad_id is None:
                raise ValueError(f"padding token {pad_token!r} is not in the vocabulary; pass pad_id")
        self.padding = {
            "direction": direction,
            "pad_id": pad_id,
            "pad_type_id": pad_type_id,
            "pad_token": pad_token,
            "length": length,
            "pad_to_multiple_of": pad_to_multiple_of,
        }

    def no_padding(self) -> None:
        self.padding = None

    # ------------------------------------------------------------------------------------------------------
    # Normalise and pre-tokenise

    def normalize(self, text: str) -> norm.NormalizedString:
        ns = norm.NormalizedString(text)
        return self.normalizer.normalize(ns) if self.normalizer is not None else ns

    def _pieces(self, ns: norm.NormalizedString, first: bool) -> list[pre.Piece]:
        text = ns.normalized
        if not text:
            return []
        if self.pre_tokenizer is None:
            return [(text, 0, len(text), None)]
        return self.pre_tokenizer.split([(text, 0, len(text), None)], first)

    def pre_tokenize_str(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        """Normalise and pre-tokenise ``text``: ``[(word, (start, end)), ...]`` with spans in ``text``.

        The words are what the model is trained on and applied to (byte characters for byte-level pipelines).
        """
        ns = self.normalize(text)
        out: list[tuple[str, tuple[int, int]]] = []
        for ptext, s, e, cmap in self._pieces(ns, True):
            if cmap is not None and cmap:
                s, e = cmap[0], cmap[-1] + 1
            out.append((ptext, ns.original_span(s, e) if e > s else (s, s)))
        return out

    # ------------------------------------------------------------------------------------------------------
    # Encode

    def _split_added(
        self,
        text: str,
        pattern: regex.Pattern | None = None,
        table: dict[str, tuple[int, AddedToken]] | None = None,
    ) -> list[tuple[int, int, int | None]]:
        """Cut ``text`` into ``(start, end, added token id or None)`` segments (default: the added tokens
        matched in the original text)."""
        if pattern is None and table is None:
            pattern = self._added_re
            table = self.added_tokens
        if pattern is None:
            return [(0, len(text), None)]
        assert table is not None
        segs: list[tuple[int, int, int | None]] = []
        pos = 0
        n = len(text)
        for m in pattern.finditer(text):
            s, e = m.span()
            if s < pos:
                continue
            tid, tok = table[m.group()]
            if tok.single_word and (
                (s > 0 and _is_word_char(text[s - 1])) or (e < n and _is_word_char(text[e]))
            ):
                continue
            if tok.lstrip:
                while s > pos and text[s - 1].isspace():
                    s -= 1
            if tok.rstrip:
                while e < n and text[e].isspace():
                    e += 1
            if s > pos:
                segs.append((pos, s, None))
            segs.append((s, e, tid))
            pos = e
        if pos < n:
            segs.append((pos, n, None))
        return segs

    def _fast_pattern(self) -> tuple[regex.Pattern, bool] | None:
        """``(word regex, byte_level)`` when the pre-tokeniser is one plain regex split (BERT-style, or
        GPT-2's byte-level split without a prefix space) and the model is deterministic; else ``None``."""
        pt = self.pre_tokenizer
        if getattr(self.model, "dropout", None):
            return None
        kind = type(pt)
        if kind in _REGEX_PRE_TOKENIZERS:
            return _REGEX_PRE_TOKENIZERS[kind], False
        if kind is pre.ByteLevel and pt.use_regex and not pt.add_prefix_space:  # type: ignore[union-attr]
            return pre._GPT2_RE, True
        return None

    def _word_entry(self, word: str, byte_level: bool) -> tuple[list[int], list[str], list[tuple[int, int]]]:
        """The model's segmentation of ``word`` as three lists (offsets in characters of ``word``), cached per
        word (bounded)."""
        if byte_level:
            btext, _, _, cmap = pre.ByteLevel._to_bytes((word, 0, len(word), None))
            toks = self.model.tokenize(btext)
            if cmap is None:
                rel = [t[2] for t in toks]
            else:
                rel = [(cmap[a], cmap[b - 1] + 1) for _, _, (a, b) in toks]
        else:
            toks = self.model.tokenize(word)
            rel = [t[2] for t in toks]
        entry = ([t[0] for t in toks], [t[1] for t in toks], rel)
        if len(self._word_cache) >= _WORD_CACHE_CAPACITY:
            self._word_cache.clear()
        self._word_cache[word] = entry
        return entry

    def _encode_fast(self, text: str, pattern: regex.Pattern, byte_level: bool) -> Encoding:
        """``_encode_sequence`` for regex pre-tokenisers and texts without added tokens (the hot path)."""
        ns = self.normalize(text)
        starts, ends = ns.starts, ns.ends
        key = (self.model, self.pre_tokenizer)
        if self._word_cache_model != key:
            self._word_cache = {}
            self._word_cache_model = key
        get = self._word_cache.get
        entry_for = self._word_entry
        ids: list[int] = []
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        words: list[int | None] = []
        w = 0
        for m in pattern.finditer(ns.normalized):
            word = m.group()
            entry = get(word)
            if entry is None:
                entry = entry_for(word, byte_level)
            wids, wtoks, rel = entry
            if len(wids) == 1:
                ids.append(wids[0])
                tokens.append(wtoks[0])
                if starts is None:
                    offsets.append(m.span())
                else:
                    s, e = m.span()
                    offsets.append((starts[s], ends[e - 1]))  # type: ignore[index]
                words.append(w)
            else:
                s = m.start()
                ids += wids
                tokens += wtoks
                if starts is None:
                    offsets += [(s + a, s + b) for a, b in rel]
                else:
                    offsets += [(starts[s + a], ends[s + b - 1]) for a, b in rel]  # type: ignore[index]
                words += [w] * len(wids)
            w += 1
        n = len(ids)
        return Encoding(ids, tokens, offsets, [0] * n, [0] * n, [1] * n, words, [0] * n)

    def _encode_input(self, x: str | Sequence[str], is_pretokenized: bool, what: str) -> Encoding:
        if not is_pretokenized:
            if not isinstance(x, str):
                raise TypeError(
                    f"encode: {what} must be a str (or pass is_pretokenized=True), got {type(x).__name__}"
                )
            return self._encode_sequence(x)
        if isinstance(x, str) or not all(isinstance(w, str) for w in x):
            raise TypeError(f"encode(is_pretokenized=True): {what} must be a list of str")
        out = Encoding()
        for w, word in enumerate(x):
            e = self._encode_sequence(word)
            e.word_ids = [w] * len(e.ids)
            out.extend(e)
        return out

    def _encode_sequence(self, text: str) -> Encoding:
        """Tokens of one text, no special tokens: ids, tokens, offsets and word ids."""
        norm_re, norm_table = self._normalized_added()
        if norm_re is None and (self._added_re is None or self._added_re.search(text) is None):
            fast = self._fast_pattern()
            if fast is not None:
                return self._encode_fast(text, *fast)
        ids: list[int] = []
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        words: list[int | None] = []
        tokenize = self.model.tokenize
        word = 0
        for seg_i, (s0, e0, added) in enumerate(self._split_added(text)):
            if added is not None:
                ids.append(added)
                # The token's text is what matched, whitespace swallowed by lstrip/rstrip included (as HF).
                tokens.append(text[s0:e0])
                offsets.append((s0, e0))
                words.append(word)
                word += 1
                continue
            ns = self.normalize(text[s0:e0] if (s0, e0) != (0, len(text)) else text)
            starts, ends = ns.starts, ns.ends
            norm_text = ns.normalized
            for a0, b0, added in self._split_added(norm_text, norm_re, norm_table):
                if added is not None:  # an added token matched in the normalised text
                    os_, oe = ns.original_span(a0, b0)
                    ids.append(added)
                    tokens.append(norm_text[a0:b0])
                    offsets.append((s0 + os_, s0 + oe))
                    words.append(word)
                    word += 1
                    continue
                if a0 == b0:
                    continue
                first = seg_i == 0 and a0 == 0
                if self.pre_tokenizer is None:
                    pieces: list[pre.Piece] = [(norm_text[a0:b0], a0, b0, None)]
                else:
                    pieces = self.pre_tokenizer.split([(norm_text[a0:b0], a0, b0, None)], first)
                for ptext, pstart, _pend, cmap in pieces:
                    toks = tokenize(ptext)
                    if not toks:
                        continue
                    for tid, tok, (a, b) in toks:
                        if cmap is None:
                            na, nb = pstart + a, pstart + b
                        else:
                            na, nb = cmap[a], cmap[b - 1] + 1
                        if starts is None:
                            offsets.append((s0 + na, s0 + nb))
                        else:
                            offsets.append((s0 + starts[na], s0 + ends[nb - 1]))  # type: ignore[index]
                        ids.append(tid)
                        tokens.append(tok)
                    words.extend([word] * len(toks))
                    word += 1
        n = len(ids)
        return Encoding(ids, tokens, offsets, [0] * n, [0] * n, [1] * n, words, [0] * n)

    def encode(
        self,
        text: str | Sequence[str],
        pair: str | Sequence[str] | None = None,
        add_special_tokens: bool = True,
        return_overflowing: bool = True,
        is_pretokenized: bool = False,
    ) -> Encoding:
        """Encode a text or a text pair (truncated and padded per the tokenizer's settings).

        With ``is_pretokenized`` each input is a list of words (as CoNLL NER gives them): word ids are the
        list indices and, as in HF tokenizers, offsets are relative to each word.
        Returns an :class:`Encoding` of length T; with truncation, the windows cut off are in
        ``encoding.overflowing`` (unless ``return_overflowing`` is False).
        """
        encodings = [self._encode_input(text, is_pretokenized, "text")]
        if pair is not None:
            second = self._encode_input(pair, is_pretokenized, "pair")
            second.type_ids = [1] * len(second.ids)
            second.sequence_ids = [1] * len(second.ids)
            encodings.append(second)
        if self.truncation is not None:
            self._truncate(encodings, add_special_tokens)
        if self.post_processor is not None:
            out = self.post_processor.process(encodings, add_special_tokens)
        else:
            out = proc.PostProcessor().process(encodings, add_special_tokens)
        if not return_overflowing:
            out.overflowing = []
        if self.padding is not None:
            self._pad([out], single=True)
        return out

    def _truncate(self, encodings: list[Encoding], add_special_tokens: bool) -> None:
        t = self.truncation
        assert t is not None
        max_length = t["max_length"]
        if add_special_tokens and self.post_processor is not None:
            max_length -= self.post_processor.added_tokens(len(encodings) == 2)
            max_length = max(max_length, 0)
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

    def _pad(self, encodings: list[Encoding], single: bool = False) -> None:
        p = self.padding
        assert p is not None
        if p["length"] is not None:
            target = p["length"]
        elif single:
            return _pad_multiple(encodings, p, None)
        else:
            target = max((len(e.ids) for e in encodings), default=0)
        _pad_multiple(encodings, p, target)

    def encode_batch(
        self,
        inputs: Sequence[Input],
        add_special_tokens: bool = True,
        return_overflowing: bool = True,
        is_pretokenized: bool = False,
    ) -> list[Encoding]:
        """Encode texts or ``(text, pair)`` tuples (with ``is_pretokenized``: word lists or pairs of them);
        padding to the longest applies across the batch."""
        padding, self.padding = self.padding, None
        # The encodings are acyclic lists of ints, strings and tuples; letting the cyclic garbage collector
        # rescan the growing batch again and again costs more than the encoding itself (2-3x on 2 MB).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if is_pretokenized:
                out = [
                    self.encode(x, None, add_special_tokens, return_overflowing, True)
                    if not x or isinstance(x[0], str)
                    else self.encode(x[0], x[1], add_special_tokens, return_overflowing, True)
                    for x in inputs
                ]
            else:
                out = [
                    self.encode(x, None, add_special_tokens, return_overflowing)
                    if isinstance(x, str)
                    else self.encode(x[0], x[1], add_special_tokens, return_overflowing)
                    for x in inputs
                ]
        finally:
            self.padding = padding
            if gc_was_enabled:
                gc.enable()
        if padding is not None:
            self._pad(out)
        return out

    def encode_ids_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Only the ids of ``encode_batch(texts, add_special_tokens)``: exactly the same ids, without tokens,
        offsets or word ids, several times faster on running text (see :mod:`attnlab.tokenizers.ids_only`)."""
        from attnlab.tokenizers.ids_only import encode_ids_batch

        return encode_ids_batch(self, texts, add_special_tokens)

    def encode_ids_flat(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``encode_ids_batch`` as arrays: ``ids`` (N,) int64, all texts' ids in order, and ``lengths`` (L,)
        int64, each text's number of ids (what corpus encoding stores)."""
        from attnlab.tokenizers.ids_only import encode_ids_flat

        return encode_ids_flat(self, texts, add_special_tokens)

    # ------------------------------------------------------------------------------------------------------
    # Decode

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids back to text (the decoder joins "##" continuations, byte-level pieces or "▁" words)."""
        special = self.all_special_ids if skip_special_tokens else set()
        tokens: list[str] = []
        for i in ids:
            i = int(i)
            if i in special:
                continue
            tok = self.id_to_token(i)
            if tok is None:
                raise ValueError(f"decode: id {i} is not in the vocabulary (size {self.vocab_size})")
            tokens.append(tok)
        if self.decoder is None:
            return " ".join(tokens)
        return self.decoder.decode(tokens)

    def decode_batch(self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in batch]

    # ------------------------------------------------------------------------------------------------------
    # Files

    def to_json(self) -> dict[str, Any]:
        from attnlab.tokenizers.files import tokenizer_to_json

        return tokenizer_to_json(self)

    def save(self, path: str | os.PathLike, pretty: bool = True) -> str:
        """Write ``tokenizer.json`` into the directory ``path``, or to ``path`` if it ends in ``.json``."""
        from attnlab.tokenizers.files import save_tokenizer_json

        return save_tokenizer_json(self, path, pretty=pretty)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        """Load HF tokenizers' ``tokenizer.json``."""
        from attnlab.tokenizers.files import load_tokenizer_json

        return load_tokenizer_json(path)

    @classmethod
    def from_str(cls, text: str) -> Tokenizer:
        from attnlab.tokenizers.files import tokenizer_from_json_str

        return tokenizer_from_json_str(text)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_word_cache"] = {}  # caches stay behind when the tokenizer is sent to worker processes
        state["_word_cache_model"] = None
        state.pop("_ids_cache", None)  # see attnlab.tokenizers.ids_only
        state.pop("_ids_cache_model", None)
        return state

    def __repr__(self) -> str:
        parts = [type(self.model).__name__, f"vocab_size={self.vocab_size}"]
        for name in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            obj = getattr(self, name)
            if obj is not None:
                parts.append(f"{name}={type(obj).__name__}")
        return f"Tokenizer({', '.join(parts)})"


_UNSET = object()


def _alternation(contents: list[str]) -> regex.Pattern | None:
    """One regex matching any of ``contents``, longest first (``None`` for none)."""
    if not contents:
        return None
    return regex.compile("|".join(regex.escape(c) for c in sorted(contents, key=len, reverse=True)))


# Pre-tokenisers that are one regex split (the words are the matches): the encoder's hot path.
_REGEX_PRE_TOKENIZERS: dict[type, regex.Pattern] = {
    pre.BertPreTokenizer: pre._BERT_RE,
    pre.Whitespace: pre._WHITESPACE_RE,
    pre.WhitespaceSplit: pre._WHITESPACE_SPLIT_RE,
}
_WORD_CACHE_CAPACITY = 200_000


def _pad_multiple(encodings: list[Encoding], p: dict[str, Any], target: int | None) -> None:
    for e in encodings:
        length = len(e.ids) if target is None else target
        m = p["pad_to_multiple_of"]
        if m and length % m:
            length += m - length % m
        e.pad(length, p["pad_id"], p["pad_type_id"], p["pad_token"], p["direction"])


def _is_word_char(ch: str) -> bool:
    return is_alnum(ch) or ch == "_"


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


# ----------------------------------------------------------------------------------------------------------
# Factories: the field's pipelines.

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _require(vocab: dict[str, int], tokens: Iterable[str], what: str) -> None:
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise ValueError(f"{what}: special token(s) {missing} missing from the vocabulary")


def bert_wordpiece(
    vocab: dict[str, int] | WordPiece,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    unk_token: str = "[UNK]",
    cls_token: str = "[CLS]",
    sep_token: str = "[SEP]",
    pad_token: str = "[PAD]",
    mask_token: str = "[MASK]",
    max_input_chars_per_word: int = 100,
) -> Tokenizer:
    """BERT's tokenizer: basic normalisation, whitespace/punctuation split, WordPiece, BERT's template.

    ``lowercase=True`` (uncased checkpoints) also strips accents unless ``strip_accents=False``.
    """
    model = vocab if isinstance(vocab, WordPiece) else None
    v = model.vocab if model is not None else vocab
    _require(v, [unk_token, cls_token, sep_token, pad_token, mask_token], "bert_wordpiece")  # type: ignore[arg-type]
    if model is None:
        model = WordPiece(v, unk_token=unk_token, max_input_chars_per_word=max_input_chars_per_word)  # type: ignore[arg-type]
    return Tokenizer(
        model,
        normalizer=norm.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=handle_chinese_chars,
            strip_accents=strip_accents,
            lowercase=lowercase,
        ),
        pre_tokenizer=pre.BertPreTokenizer(),
        post_processor=proc.BertProcessing(sep=(sep_token, v[sep_token]), cls=(cls_token, v[cls_token])),
        decoder=dec.WordPiece(prefix=model.continuing_subword_prefix),
        special_tokens=[pad_token, unk_token, cls_token, sep_token, mask_token],
    )


def byte_level_bpe(
    vocab: dict[str, int] | BPE,
    merges: list[tuple[str, str]] | None = None,
    template: str = "roberta",
    add_prefix_space: bool | None = None,
    special_tokens: Sequence[str] | None = None,
) -> Tokenizer:
    """GPT-2 (``template="gpt2"``: no special tokens, ``<|endoftext|>``) or RoBERTa (``"roberta"``:
    ``<s> A </s></s> B </s>``, ``<mask>`` swallowing the space before it) byte-level BPE."""
    if template not in ("roberta", "gpt2"):
        raise ValueError(f"unknown byte-level template {template!r}; expected 'roberta' or 'gpt2'")
    if isinstance(vocab, BPE):
        model = vocab
    else:
        if merges is None:
            raise ValueError("byte_level_bpe: merges are required with a vocabulary dict")
        model = BPE(vocab, merges)
    v = model.vocab
    if add_prefix_space is None:
        add_prefix_space = False
    pre_tok = pre.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    decoder = dec.ByteLevel()
    if template == "gpt2":
        specials: list[str | AddedToken] = list(special_tokens or ["<|endoftext|>"])
        _require(v, [s for s in specials if isinstance(s, str)], "byte_level_bpe (gpt2)")
        post: proc.PostProcessor = proc.ByteLevelProcessing(
            trim_offsets=False, add_prefix_space=add_prefix_space
        )
        return Tokenizer(model, None, pre_tok, post, decoder, specials)
    names = list(special_tokens or ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    _require(v, names, "byte_level_bpe (roberta)")
    specials = [AddedToken(t, lstrip=(t == "<mask>")) for t in names]
    post = proc.RobertaProcessing(
        sep=("</s>", v["</s>"]), cls=("<s>", v["<s>"]), trim_offsets=True, add_prefix_space=add_prefix_space
    )
    return Tokenizer(model, None, pre_tok, post, decoder, specials)


def sentencepiece_unigram(
    pieces: list[tuple[str, float]] | Unigram,
    unk_id: int | None = None,
    lowercase: bool = True,
    keep_accents: bool = False,
    template: str = "albert",
    special_tokens: Sequence[str] | None = None,
) -> Tokenizer:
    """ALBERT/XLNet-style SentencePiece Unigram (Kudo & Richardson 2018), built as HF transformers builds
    ALBERT's tokenizer: ```` `` ```` and ``''`` to ``"``, NFKD + accent stripping (unless ``keep_accents``),
    lowercasing (ALBERT), whitespace split then "▁" before every word, and ``[CLS] A [SEP] B [SEP]`` (ALBERT)
    or ``A <sep> <cls>`` (XLNet, ``<cls>`` with type id 2).

    ``unk_id`` defaults to the id of ``<unk>`` (or ``[UNK]``) in ``pieces``, else 0.
    Deviation: SentencePiece's compiled ``nmt_nfkc`` character map (``Precompiled`` in ``tokenizer.json``) is
    not applied; the whitespace split already covers its whitespace handling.
    """
    if isinstance(pieces, Unigram):
        model = pieces
    else:
        if unk_id is None:
            names_ = [p for p, _ in pieces]
            unk_id = next((names_.index(t) for t in ("<unk>", "[UNK]") if t in names_), 0)
        model = Unigram(pieces, unk_id=unk_id)
    steps: list[norm.Normalizer] = [norm.Replace("``", '"'), norm.Replace("''", '"')]
    if not keep_accents:
        steps += [norm.NFKD(), norm.StripAccents()]
    if lowercase:
        steps.append(norm.Lowercase())
    v = model.vocab
    if template == "albert":
        names = list(special_tokens or ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"])
        _require(v, names, "sentencepiece_unigram (albert)")
        post: proc.PostProcessor | None = proc.bert_template(("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"]))
    elif template == "xlnet":
        names = list(special_tokens or ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>"])
        _require(v, names, "sentencepiece_unigram (xlnet)")
        post = proc.TemplateProcessing(
            "$A:0 <sep>:0 <cls>:2",
            "$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
            [("<sep>", v["<sep>"]), ("<cls>", v["<cls>"])],
        )
    elif template == "none":
        names = list(special_tokens or [])
        post = None
    else:
        raise ValueError(f"unknown template {template!r}; expected 'albert', 'xlnet' or 'none'")
    return Tokenizer(
        model,
        normalizer=norm.Sequence(steps),
        pre_tokenizer=pre.Sequence([pre.WhitespaceSplit(), pre.Metaspace("▁", prepend_scheme="always")]),
        post_processor=post,
        decoder=dec.Metaspace("▁", prepend_scheme="always"),
        special_tokens=names,
    )


def sentencepiece_bpe(
    vocab: dict[str, int] | BPE,
    merges: list[tuple[str, str]] | None = None,
    unk_token: str = "<unk>",
    special_tokens: Sequence[str] | None = None,
    byte_fallback: bool = True,
) -> Tokenizer:
    """SentencePiece-style BPE (Metaspace "▁", byte fallback), no template."""
    if isinstance(vocab, BPE):
        model = vocab
    else:
        if merges is None:
            raise ValueError("sentencepiece_bpe: merges are required with a vocabulary dict")
        model = BPE(
            vocab,
            merges,
            unk_token=unk_token if unk_token in vocab else None,
            byte_fallback=byte_fallback,
            fuse_unk=True,
        )
    names = list(special_tokens or [t for t in ("<unk>", "<s>", "</s>") if t in model.vocab])
    return Tokenizer(
        model,
        pre_tokenizer=pre.Metaspace("▁", prepend_scheme="always"),
        decoder=dec.Sequence([dec.Replace("▁", " "), dec.ByteFallback(), dec.Fuse(), dec.Strip(" ", 1, 0)]),
        special_tokens=names,
    )
