"""The field's tokenizer files: read and write them, and load a checkpoint directory's tokenizer.

* ``vocab.txt`` (BERT): one token per line, the line number is the id.
* ``vocab.json`` + ``merges.txt`` (GPT-2, RoBERTa): token -> id, and one merge "a b" per line, with or without
  the ``#version: 0.2`` header.
* ``tokenizer.json`` (HF tokenizers): normalizer, pre_tokenizer, model, post_processor, decoder, added_tokens,
  truncation and padding, for WordPiece, BPE / byte-level BPE and Unigram pipelines.
* ``spiece.model`` / ``sentencepiece.bpe.model`` (SentencePiece protobuf) or a SentencePiece ``.vocab`` file
  (piece TAB score).

:func:`load_tokenizer` picks whichever a directory has (``tokenizer.json`` first) and reads
``tokenizer_config.json`` / ``special_tokens_map.json`` for ``do_lower_case`` and special tokens.
Errors name the file, the line or the JSON field, and what was expected.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from attnlab.atomic import write_json_atomic
from attnlab.manifest import verify_directory, verify_file
from attnlab.tokenizers import decoders as dec
from attnlab.tokenizers import normalizers as norm
from attnlab.tokenizers import pre_tokenizers as pre
from attnlab.tokenizers import processors as proc
from attnlab.tokenizers.json_floats import serde_float
from attnlab.tokenizers.models import BPE, Model, Unigram, WordPiece
from attnlab.tokenizers.precompiled import Precompiled, PrecompiledFormatError
from attnlab.tokenizers.tokenizer import (
    AddedToken,
    Tokenizer,
    bert_wordpiece,
    byte_level_bpe,
    sentencepiece_bpe,
    sentencepiece_unigram,
)

__all__ = [
    "TokenizerFileError",
    "read_vocab_txt",
    "write_vocab_txt",
    "read_vocab_json",
    "write_vocab_json",
    "read_merges_txt",
    "write_merges_txt",
    "read_sentencepiece_model",
    "read_sentencepiece_vocab",
    "tokenizer_to_json",
    "tokenizer_from_json",
    "tokenizer_from_json_str",
    "load_tokenizer_json",
    "save_tokenizer_json",
    "load_tokenizer",
    "save_vocab_files",
]


class TokenizerFileError(ValueError):
    """A tokenizer file is missing, malformed or uses an unsupported component."""


@contextmanager
def _open_utf8(path: str | os.PathLike) -> Iterator[TextIO]:
    """``open(path, encoding="utf-8")`` whose bytes that are not UTF-8 are a TokenizerFileError naming the
    file, line and byte offset (Python's error names neither the file nor the line)."""
    with open(path, encoding="utf-8") as f:
        try:
            yield f
        except UnicodeDecodeError:
            # The decoder's offset is inside one chunk of the file: find the first bad byte from the start.
            data = Path(path).read_bytes()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                line = data.count(b"\n", 0, e.start) + 1
                raise TokenizerFileError(
                    f"{path}:{line}: not valid UTF-8 (byte {e.start}: {e.reason}); expected a UTF-8 file"
                ) from None
            raise


# ----------------------------------------------------------------------------------------------------------
# vocab.txt


def read_vocab_txt(path: str | os.PathLike) -> dict[str, int]:
    """BERT's ``vocab.txt``: token on line i (0-based) has id i."""
    vocab: dict[str, int] = {}
    with _open_utf8(path) as f:
        for i, line in enumerate(f):
            token = line.rstrip("\n").rstrip("\r")
            if not token:
                raise TokenizerFileError(f"{path}:{i + 1}: empty line; expected one token per line")
            if token in vocab:
                raise TokenizerFileError(
                    f"{path}:{i + 1}: token {token!r} already on line {vocab[token] + 1}; "
                    "expected unique tokens"
                )
            vocab[token] = i
    if not vocab:
        raise TokenizerFileError(f"{path}: empty vocabulary file")
    return vocab


def _tokens_by_id(vocab: dict[str, int], what: str) -> list[str]:
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    for expect, (_tok, i) in enumerate(by_id):
        if i != expect:
            raise ValueError(f"{what}: ids must be 0..{len(vocab) - 1} without gaps; id {expect} is missing")
    return [t for t, _ in by_id]


def write_vocab_txt(vocab: dict[str, int], path: str | os.PathLike) -> None:
    tokens = _tokens_by_id(vocab, "write_vocab_txt")
    bad = [t for t in tokens if "\n" in t or not t]
    if bad:
        raise ValueError(f"write_vocab_txt: tokens {bad[:5]} cannot be written one per line")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))


# ----------------------------------------------------------------------------------------------------------
# vocab.json + merges.txt


def read_vocab_json(path: str | os.PathLike) -> dict[str, int]:
    """GPT-2/RoBERTa ``vocab.json``: an object token -> id."""
    try:
        with _open_utf8(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise TokenizerFileError(f"{path}: expected a JSON object of token -> id, got {type(data).__name__}")
    for tok, i in data.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise TokenizerFileError(f"{path}: token {tok!r} has id {i!r}; expected a non-negative integer")
    return data


def write_vocab_json(vocab: dict[str, int], path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(sorted(vocab.items(), key=lambda kv: kv[1])), f, ensure_ascii=False)


def read_merges_txt(path: str | os.PathLike) -> list[tuple[str, str]]:
    """``merges.txt``: one merge "left right" per line, in rank order; an optional ``#version`` first line."""
    merges: list[tuple[str, str]] = []
    with _open_utf8(path) as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n").rstrip("\r")
            if i == 0 and line.startswith("#version"):
                continue
            if not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise TokenizerFileError(
                    f"{path}:{i + 1}: expected two tokens separated by one space, got {line!r}"
                )
            merges.append((parts[0], parts[1]))
    return merges


def write_merges_txt(merges: list[tuple[str, str]], path: str | os.PathLike, header: bool = True) -> None:
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write("#version: 0.2\n")
        for a, b in merges:
            if " " in a or " " in b or "\n" in a + b:
                raise ValueError(f"write_merges_txt: merge ({a!r}, {b!r}) cannot be written as 'a b'")
            f.write(f"{a} {b}\n")


# ----------------------------------------------------------------------------------------------------------
# SentencePiece model files (protobuf, read with a minimal wire-format decoder: no protobuf dependency)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise IndexError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Decode one protobuf message level: ``[(field number, wire type, value), ...]``."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos : pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos : pos + n], pos + n
        elif wt == 5:
            val, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        out.append((num, wt, val))
    return out


SP_NORMAL, SP_UNKNOWN, SP_CONTROL, SP_USER_DEFINED, SP_UNUSED, SP_BYTE = 1, 2, 3, 4, 5, 6


def read_sentencepiece_model(path: str | os.PathLike) -> dict[str, Any]:
    """Read a SentencePiece ``.model``: pieces ``[(piece, score, type)]``, model type, normaliser flags."""
    data = Path(path).read_bytes()
    pieces: list[tuple[str, float, int]] = []
    model_type = 1  # UNIGRAM
    add_dummy_prefix = True
    remove_extra_whitespaces = True
    byte_fallback = False
    norm_name = "nmt_nfkc"
    try:
        for num, wt, val in _fields(data):
            if num == 1 and wt == 2:  # SentencePiece
                piece, score, ptype = "", 0.0, SP_NORMAL
                for n2, w2, v2 in _fields(val):
                    if n2 == 1:
                        piece = v2.decode("utf-8")
                    elif n2 == 2 and w2 == 5:
                        score = struct.unpack("<f", v2)[0]
                    elif n2 == 3:
                        ptype = v2
                pieces.append((piece, score, ptype))
            elif num == 2 and wt == 2:  # TrainerSpec
                for n2, _, v2 in _fields(val):
                    if n2 == 3:
                        model_type = v2
                    elif n2 == 35:
                        byte_fallback = bool(v2)
            elif num == 3 and wt == 2:  # NormalizerSpec
                for n2, _, v2 in _fields(val):
                    if n2 == 1:
                        norm_name = v2.decode("utf-8")
                    elif n2 == 3:
                        add_dummy_prefix = bool(v2)
                    elif n2 == 4:
                        remove_extra_whitespaces = bool(v2)
    except (IndexError, ValueError, UnicodeDecodeError, struct.error) as e:
        raise TokenizerFileError(f"{path}: not a valid SentencePiece model ({e})") from None
    if not pieces:
        raise TokenizerFileError(f"{path}: no pieces found; expected a SentencePiece model (protobuf)")
    return {
        "pieces": pieces,
        "model_type": {1: "unigram", 2: "bpe", 3: "word", 4: "char"}.get(model_type, str(model_type)),
        "add_dummy_prefix": add_dummy_prefix,
        "remove_extra_whitespaces": remove_extra_whitespaces,
        "byte_fallback": byte_fallback,
        "normalization": norm_name,
    }


def read_sentencepiece_vocab(path: str | os.PathLike) -> list[tuple[str, float]]:
    """A SentencePiece ``.vocab`` file: ``piece<TAB>score`` per line."""
    pieces: list[tuple[str, float]] = []
    with _open_utf8(path) as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n")
            if not line:
                continue
            piece, tab, score = line.rpartition("\t")
            try:
                if not tab:
                    raise ValueError
                pieces.append((piece, float(score)))
            except ValueError:
                raise TokenizerFileError(
                    f"{path}:{i + 1}: expected 'piece<TAB>score', got {line!r}"
                ) from None
    return pieces


# ----------------------------------------------------------------------------------------------------------
# tokenizer.json


class _Fields:
    """Typed access to a JSON object with errors that name the field."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        if not isinstance(data, dict):
            raise TokenizerFileError(
                f"{source}: field '{where}': expected an object, got {type(data).__name__}"
            )
        self.data = data
        self.where = where
        self.source = source

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., nullable: bool = False) -> Any:
        if key not in self.data:
            if default is ...:
                raise TokenizerFileError(f"{self.source}: field '{self.path(key)}' is missing")
            return default
        val = self.data[key]
        if val is None and nullable:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(val, kinds) and not (isinstance(val, bool) and bool not in kinds)
        if float in kinds and isinstance(val, int) and not isinstance(val, bool):
            ok = True
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise TokenizerFileError(
                f"{self.source}: field '{self.path(key)}': expected {names}, "
                f"got {type(val).__name__} ({val!r:.60})"
            )
        return val

    def sub(self, key: str) -> _Fields:
        return _Fields(self.get(key, dict), self.path(key), self.source)


def _unsupported(f: _Fields, kind: str, known: list[str]) -> TokenizerFileError:
    return TokenizerFileError(
        f"{f.source}: field '{f.path('type')}': unsupported {kind} type {f.data.get('type')!r}; "
        f"supported: {', '.join(sorted(known))}"
    )


def _pattern(f: _Fields) -> tuple[str, bool]:
    p = f.sub("pattern")
    if "Regex" in p.data:
        return p.get("Regex", str), True
    if "String" in p.data:
        return p.get("String", str), False
    raise TokenizerFileError(f"{f.source}: field '{p.where}': expected {{'String': ...}} or {{'Regex': ...}}")


def _normalizer_from_json(data: Any, where: str, source: str) -> norm.Normalizer | None:
    if data is None:
        return None
    f = _Fields(data, where, source)
    t = f.get("type", str)
    if t == "BertNormalizer":
        return norm.BertNormalizer(
            clean_text=f.get("clean_text", bool, True),
            handle_chinese_chars=f.get("handle_chinese_chars", bool, True),
            strip_accents=f.get("strip_accents", bool, None, nullable=True),
            lowercase=f.get("lowercase", bool, True),
        )
    simple = {
        "Lowercase": norm.Lowercase,
        "StripAccents": norm.StripAccents,
        "NFD": norm.NFD,
        "NFKD": norm.NFKD,
        "NFC": norm.NFC,
        "NFKC": norm.NFKC,
    }
    if t in simple:
        return simple[t]()
    if t == "Replace":
        pattern, is_regex = _pattern(f)
        return norm.Replace(pattern, f.get("content", str), is_regex=is_regex)
    if t == "Prepend":
        return norm.Prepend(f.get("prepend", str))
    if t == "Strip":
        return norm.Strip(f.get("strip_left", bool, True), f.get("strip_right", bool, True))
    if t == "Sequence":
        items = f.get("normalizers", list)
        out = [_normalizer_from_json(x, f"{f.path('normalizers')}[{i}]", source) for i, x in enumerate(items)]
        return norm.Sequence([n for n in out if n is not None])
    if t == "Precompiled":
        # SentencePiece's compiled character map, base64 (None in files whose model had no rules).
        charsmap = f.get("precompiled_charsmap", str, None, nullable=True)
        if not charsmap:
            return None
        try:
            return Precompiled(charsmap)
        except PrecompiledFormatError as e:
            raise TokenizerFileError(f"{source}: field '{f.path('precompiled_charsmap')}': {e}") from None
    known = ["BertNormalizer", "Sequence", "Replace", "Prepend", "Strip", "Precompiled", *simple]
    raise _unsupported(f, "normalizer", known)


def _pre_tokenizer_from_json(data: Any, where: str, source: str) -> pre.PreTokenizer | None:
    if data is None:
        return None
    f = _Fields(data, where, source)
    t = f.get("type", str)
    if t == "BertPreTokenizer":
        return pre.BertPreTokenizer()
    if t == "Whitespace":
        return pre.Whitespace()
    if t == "WhitespaceSplit":
        return pre.WhitespaceSplit()
    if t == "ByteLevel":
        return pre.ByteLevel(
            add_prefix_space=f.get("add_prefix_space", bool, True),
            use_regex=f.get("use_regex", bool, True),
            trim_offsets=f.get("trim_offsets", bool, True),
        )
    if t == "Metaspace":
        if "prepend_scheme" in f.data:
            scheme = f.get("prepend_scheme", str)
        else:  # tokenizers < 0.14 wrote add_prefix_space
            scheme = "always" if f.get("add_prefix_space", bool, True) else "never"
        try:
            return pre.Metaspace(f.get("replacement", str, "▁"), scheme, f.get("split", bool, True))
        except ValueError as e:
            raise TokenizerFileError(f"{source}: field '{where}': {e}") from None
    if t == "Punctuation":
        return pre.Punctuation(_behavior(f))
    if t == "Digits":
        return pre.Digits(f.get("individual_digits", bool, False))
    if t == "Split":
        pattern, is_regex = _pattern(f)
        return pre.Split(pattern, _behavior(f), f.get("invert", bool, False), is_regex=is_regex)
    if t == "Sequence":
        items = f.get("pretokenizers", list)
        out = [
            _pre_tokenizer_from_json(x, f"{f.path('pretokenizers')}[{i}]", source)
            for i, x in enumerate(items)
        ]
        return pre.Sequence([p for p in out if p is not None])
    known = ["BertPreTokenizer", "Whitespace", "WhitespaceSplit", "ByteLevel", "Metaspace", "Punctuation"]
    raise _unsupported(f, "pre_tokenizer", [*known, "Digits", "Split", "Sequence"])


def _behavior(f: _Fields) -> str:
    name = f.get("behavior", str, "Isolated")
    try:
        return pre.behavior_from_json(name)
    except ValueError as e:
        raise TokenizerFileError(f"{f.source}: field '{f.path('behavior')}': {e}") from None


def _model_from_json(data: Any, where: str, source: str) -> Model:
    f = _Fields(data, where, source)
    t = f.get("type", str, None)
    if t is None:  # very old files omit the type: infer it from the fields
        t = (
            "BPE"
            if "merges" in f.data
            else "Unigram"
            if isinstance(f.data.get("vocab"), list)
            else "WordPiece"
        )
    try:
        if t == "WordPiece":
            return WordPiece(
                _vocab_field(f),
                unk_token=f.get("unk_token", str, "[UNK]"),
                continuing_subword_prefix=f.get("continuing_subword_prefix", str, "##"),
                max_input_chars_per_word=f.get("max_input_chars_per_word", int, 100),
            )
        if t == "BPE":
            raw = f.get("merges", list)
            merges: list[tuple[str, str]] = []
            for i, m in enumerate(raw):
                if isinstance(m, str):
                    parts = m.split(" ")
                elif isinstance(m, list):
                    parts = m
                else:
                    parts = []
                if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
                    raise TokenizerFileError(
                        f"{source}: field '{f.path('merges')}[{i}]': "
                        f'expected "a b" or ["a", "b"], got {m!r}'
                    )
                merges.append((parts[0], parts[1]))
            return BPE(
                _vocab_field(f),
                merges,
                unk_token=f.get("unk_token", str, None, nullable=True),
                continuing_subword_prefix=f.get("continuing_subword_prefix", str, None, nullable=True),
                end_of_word_suffix=f.get("end_of_word_suffix", str, None, nullable=True),
                byte_fallback=f.get("byte_fallback", bool, False),
                fuse_unk=f.get("fuse_unk", bool, False),
                ignore_merges=f.get("ignore_merges", bool, False),
                dropout=f.get("dropout", float, None, nullable=True),
            )
        if t == "Unigram":
            raw = f.get("vocab", list)
            pieces: list[tuple[str, float]] = []
            for i, p in enumerate(raw):
                if (
                    not isinstance(p, list)
                    or len(p) != 2
                    or not isinstance(p[0], str)
                    or not isinstance(p[1], (int, float))
                ):
                    raise TokenizerFileError(
                        f"{source}: field '{f.path('vocab')}[{i}]': expected [piece, score], got {p!r:.60}"
                    )
                pieces.append((p[0], float(p[1])))
            return Unigram(
                pieces,
                unk_id=f.get("unk_id", int, None, nullable=True),
                byte_fallback=f.get("byte_fallback", bool, False),
            )
    except TokenizerFileError:
        raise
    except ValueError as e:
        raise TokenizerFileError(f"{source}: field '{where}': {e}") from None
    known = ["WordPiece", "BPE", "Unigram"]
    raise _unsupported(f, "model", known)


def _vocab_field(f: _Fields) -> dict[str, int]:
    vocab = f.get("vocab", dict)
    for tok, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise TokenizerFileError(
                f"{f.source}: field '{f.path('vocab')}': token {tok!r} has id {i!r}; expected an integer >= 0"
            )
    return vocab


def _pair(f: _Fields, key: str) -> tuple[str, int]:
    val = f.get(key, list)
    if len(val) != 2 or not isinstance(val[0], str) or not isinstance(val[1], int):
        raise TokenizerFileError(f"{f.source}: field '{f.path(key)}': expected [token, id], got {val!r}")
    return val[0], val[1]


def _processor_from_json(data: Any, where: str, source: str) -> proc.PostProcessor | None:
    if data is None:
        return None
    f = _Fields(data, where, source)
    t = f.get("type", str)
    if t == "BertProcessing":
        return proc.BertProcessing(sep=_pair(f, "sep"), cls=_pair(f, "cls"))
    if t == "RobertaProcessing":
        return proc.RobertaProcessing(
            sep=_pair(f, "sep"),
            cls=_pair(f, "cls"),
            trim_offsets=f.get("trim_offsets", bool, True),
            add_prefix_space=f.get("add_prefix_space", bool, True),
        )
    if t == "ByteLevel":
        return proc.ByteLevelProcessing(
            trim_offsets=f.get("trim_offsets", bool, True),
            add_prefix_space=f.get("add_prefix_space", bool, True),
            use_regex=f.get("use_regex", bool, True),
        )
    if t == "TemplateProcessing":
        specials: list[tuple[str, int]] = []
        for name, spec in f.get("special_tokens", dict).items():
            sf = _Fields(spec, f"{f.path('special_tokens')}.{name}", source)
            ids = sf.get("ids", list)
            toks = sf.get("tokens", list)
            if len(ids) != 1 or len(toks) != 1:
                raise TokenizerFileError(
                    f"{source}: field '{sf.where}': special tokens of several ids are not supported"
                )
            specials.append((sf.get("id", str), ids[0]))

        def template(key: str) -> list[proc.TemplateItem]:
            items: list[proc.TemplateItem] = []
            for i, item in enumerate(f.get(key, list)):
                itf = _Fields(item, f"{f.path(key)}[{i}]", source)
                if "Sequence" in item:
                    s = itf.sub("Sequence")
                    sid = s.get("id", str)
                    if sid not in ("A", "B"):
                        raise TokenizerFileError(f"{source}: field '{s.path('id')}': expected 'A' or 'B'")
                    items.append(("sequence", int(sid == "B"), s.get("type_id", int, 0)))
                elif "SpecialToken" in item:
                    s = itf.sub("SpecialToken")
                    items.append(("special", s.get("id", str), s.get("type_id", int, 0)))
                else:
                    raise TokenizerFileError(
                        f"{source}: field '{itf.where}': expected a 'Sequence' or 'SpecialToken' item"
                    )
            return items

        try:
            return proc.TemplateProcessing(template("single"), template("pair") or None, specials)
        except ValueError as e:
            raise TokenizerFileError(f"{source}: field '{where}': {e}") from None
    if t == "Sequence":
        items = f.get("processors", list)
        out = [_processor_from_json(x, f"{f.path('processors')}[{i}]", source) for i, x in enumerate(items)]
        return proc.Sequence([p for p in out if p is not None])
    known = ["BertProcessing", "RobertaProcessing", "ByteLevel", "TemplateProcessing", "Sequence"]
    raise _unsupported(f, "post_processor", known)


def _decoder_from_json(data: Any, where: str, source: str) -> dec.Decoder | None:
    if data is None:
        return None
    f = _Fields(data, where, source)
    t = f.get("type", str)
    if t == "WordPiece":
        return dec.WordPiece(f.get("prefix", str, "##"), f.get("cleanup", bool, True))
    if t == "ByteLevel":
        return dec.ByteLevel()
    if t == "Metaspace":
        if "prepend_scheme" in f.data:
            scheme = f.get("prepend_scheme", str)
        else:
            scheme = "always" if f.get("add_prefix_space", bool, True) else "never"
        return dec.Metaspace(f.get("replacement", str, "▁"), scheme, f.get("split", bool, True))
    if t == "BPEDecoder":
        return dec.BPEDecoder(f.get("suffix", str, "</w>"))
    if t == "ByteFallback":
        return dec.ByteFallback()
    if t == "Fuse":
        return dec.Fuse()
    if t == "Replace":
        pattern, is_regex = _pattern(f)
        if is_regex:
            raise TokenizerFileError(
                f"{source}: field '{f.path('pattern')}': regex Replace decoders are not supported"
            )
        return dec.Replace(pattern, f.get("content", str))
    if t == "Strip":
        return dec.Strip(f.get("content", str, " "), f.get("start", int, 0), f.get("stop", int, 0))
    if t == "Sequence":
        items = f.get("decoders", list)
        out = [_decoder_from_json(x, f"{f.path('decoders')}[{i}]", source) for i, x in enumerate(items)]
        return dec.Sequence([d for d in out if d is not None])
    known = ["WordPiece", "ByteLevel", "Metaspace", "BPEDecoder", "ByteFallback", "Fuse", "Replace", "Strip"]
    raise _unsupported(f, "decoder", [*known, "Sequence"])


_STRATEGY_FROM_JSON = {
    "LongestFirst": "longest_first",
    "OnlyFirst": "only_first",
    "OnlySecond": "only_second",
}
_STRATEGY_TO_JSON = {v: k for k, v in _STRATEGY_FROM_JSON.items()}


def tokenizer_from_json(data: Any, source: str = "tokenizer.json") -> Tokenizer:
    """Build a :class:`Tokenizer` from the parsed JSON of HF tokenizers' ``tokenizer.json``."""
    f = _Fields(data, "", source)
    model = _model_from_json(f.get("model", dict), "model", source)
    tok = Tokenizer(
        model,
        normalizer=_normalizer_from_json(
            f.get("normalizer", dict, None, nullable=True), "normalizer", source
        ),
        pre_tokenizer=_pre_tokenizer_from_json(
            f.get("pre_tokenizer", dict, None, nullable=True), "pre_tokenizer", source
        ),
        post_processor=_processor_from_json(
            f.get("post_processor", dict, None, nullable=True), "post_processor", source
        ),
        decoder=_decoder_from_json(f.get("decoder", dict, None, nullable=True), "decoder", source),
    )
    for i, item in enumerate(f.get("added_tokens", list, [])):
        af = _Fields(item, f"added_tokens[{i}]", source)
        content = af.get("content", str)
        added = AddedToken(
            content,
            single_word=af.get("single_word", bool, False),
            lstrip=af.get("lstrip", bool, False),
            rstrip=af.get("rstrip", bool, False),
            normalized=af.get("normalized", bool, False),
            special=af.get("special", bool, False),
        )
        tid = af.get("id", int)
        tok.added_tokens[content] = (tid, added)
        tok._added_ids[tid] = content
    tok._compile_added()
    trunc = f.get("truncation", dict, None, nullable=True)
    if trunc is not None:
        tf = _Fields(trunc, "truncation", source)
        strategy = tf.get("strategy", str, "LongestFirst")
        if strategy not in _STRATEGY_FROM_JSON:
            raise TokenizerFileError(
                f"{source}: field 'truncation.strategy': expected one of {sorted(_STRATEGY_FROM_JSON)}, "
                f"got {strategy!r}"
            )
        tok.enable_truncation(
            tf.get("max_length", int),
            tf.get("stride", int, 0),
            _STRATEGY_FROM_JSON[strategy],
            tf.get("direction", str, "Right").lower(),
        )
    pad = f.get("padding", dict, None, nullable=True)
    if pad is not None:
        pf = _Fields(pad, "padding", source)
        strategy = pf.get("strategy", (str, dict), "BatchLongest")
        length = strategy.get("Fixed") if isinstance(strategy, dict) else None
        tok.enable_padding(
            direction=pf.get("direction", str, "Right").lower(),
            pad_id=pf.get("pad_id", int, 0),
            pad_type_id=pf.get("pad_type_id", int, 0),
            pad_token=pf.get("pad_token", str, "[PAD]"),
            length=length,
            pad_to_multiple_of=pf.get("pad_to_multiple_of", int, None, nullable=True),
        )
    return tok


def tokenizer_from_json_str(text: str, source: str = "tokenizer.json") -> Tokenizer:
    try:
        # Numbers as HF's Rust reader parses them (json_floats): the same Unigram scores, to the last bit.
        data = json.loads(text, parse_float=serde_float)
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{source}: not valid JSON ({e})") from None
    return tokenizer_from_json(data, source)


def load_tokenizer_json(path: str | os.PathLike) -> Tokenizer:
    """Load ``tokenizer.json`` (a file, or a directory containing one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise TokenizerFileError(f"{p}: no such file; expected HF tokenizers' tokenizer.json")
    verify_file(p)  # against its directory's manifest.json, when that lists it
    with _open_utf8(p) as f:
        text = f.read()
    return tokenizer_from_json_str(text, str(p))


def tokenizer_to_json(tok: Tokenizer) -> dict[str, Any]:
    """HF tokenizers' ``tokenizer.json`` structure for ``tok``."""
    trunc = None
    if tok.truncation is not None:
        t = tok.truncation
        trunc = {
            "direction": t["direction"].capitalize(),
            "max_length": t["max_length"],
            "strategy": _STRATEGY_TO_JSON[t["strategy"]],
            "stride": t["stride"],
        }
    pad = None
    if tok.padding is not None:
        p = tok.padding
        pad = {
            "strategy": {"Fixed": p["length"]} if p["length"] is not None else "BatchLongest",
            "direction": p["direction"].capitalize(),
            "pad_to_multiple_of": p["pad_to_multiple_of"],
            "pad_id": p["pad_id"],
            "pad_type_id": p["pad_type_id"],
            "pad_token": p["pad_token"],
        }
    added = [
        {
            "id": i,
            "content": c,
            "single_word": t.single_word,
            "lstrip": t.lstrip,
            "rstrip": t.rstrip,
            "normalized": t.normalized,
            "special": t.special,
        }
        for c, (i, t) in sorted(tok.added_tokens.items(), key=lambda kv: kv[1][0])
    ]
    return {
        "version": "1.0",
        "truncation": trunc,
        "padding": pad,
        "added_tokens": added,
        "normalizer": tok.normalizer.to_json() if tok.normalizer is not None else None,
        "pre_tokenizer": tok.pre_tokenizer.to_json() if tok.pre_tokenizer is not None else None,
        "post_processor": tok.post_processor.to_json() if tok.post_processor is not None else None,
        "decoder": tok.decoder.to_json() if tok.decoder is not None else None,
        "model": tok.model.to_json(),
    }


def save_tokenizer_json(tok: Tokenizer, path: str | os.PathLike, pretty: bool = True) -> str:
    """Write ``tokenizer.json`` into the directory ``path`` (made if missing), or to ``path`` itself when it
    names a ``.json`` file; returns the file name. Another dot does not make a file name (``tok_v1.0`` is a
    directory), and an existing file that is not ``.json`` is an error, never overwritten."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    elif p.suffix != ".json":
        if p.exists():
            raise NotADirectoryError(
                f"{p}: exists and is not a directory; save a tokenizer into a directory or to a .json file"
            )
        p.mkdir(parents=True)
        p = p / "tokenizer.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(tokenizer_to_json(tok), p, indent=2 if pretty else None, ensure_ascii=False)
    return str(p)


def save_vocab_files(tok: Tokenizer, directory: str | os.PathLike) -> list[str]:
    """Write the model's classic files: ``vocab.txt`` (WordPiece) or ``vocab.json`` + ``merges.txt`` (BPE)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    m = tok.model
    if isinstance(m, WordPiece):
        write_vocab_txt(m.vocab, d / "vocab.txt")
        return [str(d / "vocab.txt")]
    if isinstance(m, BPE):
        write_vocab_json(m.vocab, d / "vocab.json")
        write_merges_txt(m.merges, d / "merges.txt")  # type: ignore[arg-type]
        return [str(d / "vocab.json"), str(d / "merges.txt")]
    raise ValueError(f"save_vocab_files: {type(m).__name__} has no classic vocabulary files; use save()")


# ----------------------------------------------------------------------------------------------------------
# Checkpoint directories


def _read_json_if(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        with _open_utf8(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise TokenizerFileError(f"{path}: expected a JSON object")
    return data


def _special(config: dict[str, Any], key: str, default: str) -> str:
    val = config.get(key, default)
    if isinstance(val, dict):  # {"content": "[UNK]", "lstrip": false, ...}
        val = val.get("content", default)
    return val if isinstance(val, str) else default


# Every file `load_tokenizer` may read (config.json: a model's, for its vocabulary size and lowercasing)
TOKENIZER_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
    "tokenizer_config.json", "special_tokens_map.json", "config.json",
)  # fmt: skip


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """Load the tokenizer of a BERT, RoBERTa, ALBERT, XLNet or GPT-2 checkpoint directory.

    Looks for, in order: ``tokenizer.json``; ``vocab.txt`` (BERT WordPiece); ``vocab.json`` + ``merges.txt``
    (byte-level BPE, RoBERTa's template when ``<s>``/``</s>`` exist, else GPT-2's); ``spiece.model`` or
    ``sentencepiece.bpe.model`` (SentencePiece); a SentencePiece ``*.vocab`` file. ``tokenizer_config.json``
    and ``special_tokens_map.json`` give ``do_lower_case``, ``strip_accents`` and special tokens when present.
    """
    d = Path(directory)
    if not d.is_dir():
        raise TokenizerFileError(f"{d}: not a directory")
    # A model directory written by attnlab lists its tokenizer files in manifest.json: a replaced or damaged
    # one (another tokenizer's vocab.txt: other ids for the same model) is an IntegrityError, as the weights'
    verify_directory(d, TOKENIZER_FILES)
    config = {**_read_json_if(d / "special_tokens_map.json"), **_read_json_if(d / "tokenizer_config.json")}
    model_config = _read_json_if(d / "config.json")
    if (d / "tokenizer.json").is_file():
        return load_tokenizer_json(d / "tokenizer.json")
    if (d / "vocab.txt").is_file():
        vocab = read_vocab_txt(d / "vocab.txt")
        specials = {
            "unk_token": _special(config, "unk_token", "[UNK]"),
            "cls_token": _special(config, "cls_token", "[CLS]"),
            "sep_token": _special(config, "sep_token", "[SEP]"),
            "pad_token": _special(config, "pad_token", "[PAD]"),
            "mask_token": _special(config, "mask_token", "[MASK]"),
        }
        missing = [f"{k}={v!r}" for k, v in specials.items() if v not in vocab]
        if missing:
            raise TokenizerFileError(
                f"{d / 'vocab.txt'}: special tokens missing from the vocabulary: {missing}"
            )
        lower = config.get("do_lower_case", True)
        return bert_wordpiece(
            vocab,
            lowercase=bool(lower),
            strip_accents=config.get("strip_accents"),
            handle_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
            **specials,
        )
    if (d / "vocab.json").is_file() and (d / "merges.txt").is_file():
        vocab = read_vocab_json(d / "vocab.json")
        merges = read_merges_txt(d / "merges.txt")
        try:
            model = BPE(vocab, merges)
        except ValueError as e:
            raise TokenizerFileError(f"{d / 'merges.txt'}: {e}") from None
        cls_name = str(config.get("tokenizer_class", "")) + str(model_config.get("model_type", ""))
        is_gpt2 = "gpt2" in cls_name.lower() or "GPT2" in cls_name
        roberta_tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        if not is_gpt2 and "roberta" not in cls_name.lower() and any(t not in vocab for t in roberta_tokens):
            is_gpt2 = True
        add_prefix_space = bool(config.get("add_prefix_space", False))
        try:
            if is_gpt2:
                eos = _special(config, "eos_token", "<|endoftext|>")
                return byte_level_bpe(
                    model, template="gpt2", add_prefix_space=add_prefix_space, special_tokens=[eos]
                )
            names = [
                _special(config, f"{k}_token", t)
                for k, t in zip(["bos", "pad", "eos", "unk", "mask"], roberta_tokens)
            ]
            return byte_level_bpe(
                model, template="roberta", add_prefix_space=add_prefix_space, special_tokens=names
            )
        except ValueError as e:
            raise TokenizerFileError(f"{d / 'vocab.json'}: {e}") from None
    for name in ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model"):
        if (d / name).is_file():
            return _from_sentencepiece(d / name, config, model_config)
    vocabs = sorted(d.glob("*.vocab"))
    if vocabs:
        pieces = read_sentencepiece_vocab(vocabs[0])
        unk = next((i for i, (p, _) in enumerate(pieces) if p in ("<unk>", "[UNK]")), 0)
        return sentencepiece_unigram(
            pieces, unk_id=unk, lowercase=bool(config.get("do_lower_case", False)), template="none"
        )
    raise TokenizerFileError(
        f"{d}: no tokenizer files found; expected tokenizer.json, vocab.txt, vocab.json + merges.txt, "
        f"spiece.model or a SentencePiece .vocab file"
    )


def _from_sentencepiece(path: Path, config: dict[str, Any], model_config: dict[str, Any]) -> Tokenizer:
    sp = read_sentencepiece_model(path)
    pieces = [(p, s) for p, s, _ in sp["pieces"]]
    kind = (str(model_config.get("model_type", "")) + str(config.get("tokenizer_class", ""))).lower()
    if sp["model_type"] == "unigram":
        unk = next((i for i, (_, _, t) in enumerate(sp["pieces"]) if t == SP_UNKNOWN), 0)
        model = Unigram(pieces, unk_id=unk, byte_fallback=sp["byte_fallback"])
        template = "albert" if "albert" in kind else "xlnet" if "xlnet" in kind else "none"
        if template == "none" and "[CLS]" in model.vocab and "[SEP]" in model.vocab:
            template = "albert"
        lower = bool(config.get("do_lower_case", template == "albert"))
        keep_accents = bool(config.get("keep_accents", False))
        controls = [p for p, _, t in sp["pieces"] if t in (SP_CONTROL, SP_USER_DEFINED, SP_UNKNOWN)]
        try:
            return sentencepiece_unigram(
                model,
                lowercase=lower,
                keep_accents=keep_accents,
                template=template,
                special_tokens=controls if template == "none" else None,
            )
        except ValueError as e:
            raise TokenizerFileError(f"{path}: {e}") from None
    if sp["model_type"] == "bpe":
        # SentencePiece BPE stores pieces with scores; merges follow from the pieces' order (score).
        vocab = {p: i for i, (p, _) in enumerate(pieces)}
        merges = _merges_from_pieces(pieces)
        model = BPE(
            vocab,
            merges,
            unk_token="<unk>" if "<unk>" in vocab else None,
            byte_fallback=sp["byte_fallback"],
            fuse_unk=True,
        )
        return sentencepiece_bpe(model)
    raise TokenizerFileError(f"{path}: SentencePiece model type {sp['model_type']!r} is not supported")


def _merges_from_pieces(pieces: list[tuple[str, float]]) -> list[tuple[str, str]]:
    """Recover BPE merges from SentencePiece BPE pieces: every split of a piece into two known pieces,
    ranked by the merged piece's score (higher first) then by the parts' ranks."""
    rank = {p: i for i, (p, _) in enumerate(pieces)}
    found: list[tuple[float, int, int, str, str]] = []
    for piece, score in pieces:
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in rank and b in rank:
                found.append((-score, rank[a], rank[b], a, b))
    found.sort()
    return [(a, b) for *_, a, b in found]
