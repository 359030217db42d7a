"""The field's vocabulary files, read and written with errors that name the file and line.

* ``vocab.txt`` (BERT): one token per line, the line number is the id.
* ``vocab.json`` + ``merges.txt`` (GPT-2, RoBERTa): token -> id, and one merge "a b" per line, with or without
  the ``#version: 0.2`` header.
* ``spiece.model`` / ``sentencepiece.bpe.model`` (SentencePiece protobuf, read with a minimal wire-format
  decoder) or a SentencePiece ``.vocab`` file (piece TAB score).

``tokenizer.json`` is :mod:`attnlab.tokenizers.tokenizer_json`; a checkpoint directory's tokenizer is loaded
by :func:`attnlab.tokenizers.files.load_tokenizer`.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "TokenizerFileError",
    "open_utf8",
    "read_vocab_txt",
    "write_vocab_txt",
    "read_vocab_json",
    "write_vocab_json",
    "read_merges_txt",
    "write_merges_txt",
    "read_sentencepiece_model",
    "read_sentencepiece_vocab",
]


class TokenizerFileError(ValueError):
    """A tokenizer file is missing, malformed or uses an unsupported component."""


@contextmanager
def open_utf8(path: str | os.PathLike) -> Iterator[TextIO]:
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
    with open_utf8(path) as f:
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
        with open_utf8(path) as f:
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
    with open_utf8(path) as f:
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
    with open_utf8(path) as f:
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
