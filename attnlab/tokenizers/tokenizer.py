"""The tokenisation pipeline: added tokens -> normaliser -> pre-tokeniser -> model -> post-processor.

``Tokenizer.encode(text, pair)`` returns an :class:`Encoding` (ids, tokens, offsets into the original text,
type ids, special-tokens mask, attention mask, word ids) after truncation (with overflowing windows and a
stride) and padding, as HF tokenizers does; ``decode`` inverts it. The field's pipelines are built by
:mod:`attnlab.tokenizers.factories`; ``tokenizer.json`` is read and written by
:mod:`attnlab.tokenizers.tokenizer_json`, and the ids-only path is :mod:`attnlab.tokenizers.ids_only`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import regex

import attnlab.tokenizers.decoders as dec
import attnlab.tokenizers.ids_only as ids_only
import attnlab.tokenizers.normalizers as norm
import attnlab.tokenizers.pre_tokenizers as pre
import attnlab.tokenizers.processors as proc
import attnlab.tokenizers.tokenizer_json as tokenizer_json
from attnlab.tokenizers.added_tokens import AddedToken, alternation, split_added
from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.models import Model
from attnlab.tokenizers.truncation import (
    TRUNCATION_STRATEGIES,
    flatten_overflowing,
    pad_encodings,
    truncate_encodings,
)
from attnlab.tokenizers.word_split import (
    SingleTemplate,
    WordEntry,
    encode_words,
    single_template,
    word_entry,
    word_split_pattern,
)

__all__ = ["AddedToken", "Tokenizer", "TRUNCATION_STRATEGIES", "flatten_overflowing"]

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
        self._added_re = alternation(raw)
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
            self._norm_added = (alternation(list(table)), table)
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

    def _fast_pattern(self) -> tuple[regex.Pattern, bool] | None:
        """``(word regex, byte_level)`` when the pipeline can take the hot path (see
        :func:`~attnlab.tokenizers.word_split.word_split_pattern`), else ``None``."""
        return word_split_pattern(self.pre_tokenizer, self.model)

    def _fast_split(self, text: str) -> tuple[regex.Pattern, bool] | None:
        """``_fast_pattern()`` when ``text`` can take the hot path (no added token in it), else ``None``."""
        if self._normalized_added()[0] is None and (
            self._added_re is None or self._added_re.search(text) is None
        ):
            return self._fast_pattern()
        return None

    def _single_template(self, add_special_tokens: bool) -> SingleTemplate | None:
        """:func:`~attnlab.tokenizers.word_split.single_template` of the post-processor, cached."""
        key = (self.post_processor, add_special_tokens)
        cache = self.__dict__.setdefault("_wrap_cache", {})
        if key not in cache:
            cache[key] = single_template(self.post_processor, add_special_tokens)
        return cache[key]

    def _word_entry(self, word: str, byte_level: bool) -> WordEntry:
        """:func:`~attnlab.tokenizers.word_split.word_entry`, cached per word (bounded)."""
        entry = word_entry(self.model, word, byte_level)
        if len(self._word_cache) >= _WORD_CACHE_CAPACITY:
            self._word_cache.clear()
        self._word_cache[word] = entry
        return entry

    def _encode_fast(
        self, text: str, pattern: regex.Pattern, byte_level: bool, wrap: SingleTemplate | None = None
    ) -> Encoding:
        """``_encode_sequence`` for regex pre-tokenisers and texts without added tokens (the hot path); with
        ``wrap``, the post-processed encoding itself (the template's special tokens put around it here)."""
        key = (self.model, self.pre_tokenizer)
        if self._word_cache_model != key:
            self._word_cache = {}
            self._word_cache_model = key
        return encode_words(
            self.normalize(text), pattern, self._word_cache.get, byte_level, self._word_entry, wrap
        )

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
        fast = self._fast_split(text)
        if fast is not None:
            return self._encode_fast(text, *fast)
        norm_re, norm_table = self._normalized_added()
        ids: list[int] = []
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        words: list[int | None] = []
        tokenize = self.model.tokenize
        word = 0
        for seg_i, (s0, e0, added) in enumerate(split_added(text, self._added_re, self.added_tokens)):
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
            for a0, b0, added in split_added(norm_text, norm_re, norm_table):
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
        if pair is None and self.truncation is None and isinstance(text, str) and not is_pretokenized:
            # The hot path: one text, its template's special tokens put around it as it is encoded.
            wrap = self._single_template(add_special_tokens)
            fast = self._fast_split(text) if wrap is not None else None
            if fast is not None:
                out = self._encode_fast(text, *fast, wrap)
                if self.padding is not None:
                    self._pad([out], single=True)
                return out
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
        assert self.truncation is not None
        added = 0
        if add_special_tokens and self.post_processor is not None:
            added = self.post_processor.added_tokens(len(encodings) == 2)
        truncate_encodings(encodings, self.truncation, added)

    def _pad(self, encodings: list[Encoding], single: bool = False) -> None:
        assert self.padding is not None
        pad_encodings(encodings, self.padding, single)

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
        # rescan the growing batch again and again costs more than the encoding (benchmarks/tokenizers.py).
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
        return ids_only.encode_ids_batch(self, texts, add_special_tokens)

    def encode_ids_flat(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``encode_ids_batch`` as arrays: ``ids`` (N,) int64, all texts' ids in order, and ``lengths`` (L,)
        int64, each text's number of ids (what corpus encoding stores)."""
        return ids_only.encode_ids_flat(self, texts, add_special_tokens)

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
        """HF tokenizers' ``tokenizer.json`` structure."""
        return tokenizer_json.pipeline_to_json(
            self.model, self.normalizer, self.pre_tokenizer, self.post_processor, self.decoder,
            self.added_tokens, self.truncation, self.padding,
        )  # fmt: skip

    def save(self, path: str | os.PathLike, pretty: bool = True) -> str:
        """Write ``tokenizer.json`` into the directory ``path``, or to ``path`` if it ends in ``.json``."""
        return tokenizer_json.write_tokenizer_json(self.to_json(), path, pretty=pretty)

    @classmethod
    def from_json(cls, data: Any, source: str = "tokenizer.json") -> Tokenizer:
        """Build a tokenizer from the parsed JSON of HF tokenizers' ``tokenizer.json`` (errors name ``source``
        and the field)."""
        spec = tokenizer_json.pipeline_from_json(data, source)
        tok = cls(spec.model, spec.normalizer, spec.pre_tokenizer, spec.post_processor, spec.decoder)
        for tid, added in spec.added_tokens:
            tok.added_tokens[added.content] = (tid, added)
            tok._added_ids[tid] = added.content
        tok._compile_added()
        if spec.truncation is not None:
            tok.enable_truncation(**spec.truncation)
        if spec.padding is not None:
            tok.enable_padding(**spec.padding)
        return tok

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        """Load HF tokenizers' ``tokenizer.json`` (a file, or a directory holding one)."""
        data, source = tokenizer_json.read_tokenizer_json(path)
        return cls.from_json(data, source)

    @classmethod
    def from_str(cls, text: str, source: str = "tokenizer.json") -> Tokenizer:
        return cls.from_json(tokenizer_json.parse_tokenizer_json(text, source), source)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_word_cache"] = {}  # caches stay behind when the tokenizer is sent to worker processes
        state["_word_cache_model"] = None
        state.pop("_wrap_cache", None)
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

_WORD_CACHE_CAPACITY = 200_000  # words kept in the hot path's cache (cleared at once when full)
