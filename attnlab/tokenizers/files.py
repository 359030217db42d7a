"""A checkpoint directory's tokenizer, whichever files it has, and the file functions by their public names.

:func:`load_tokenizer` picks what a directory holds (``tokenizer.json`` first, then ``vocab.txt``,
``vocab.json`` + ``merges.txt``, SentencePiece files) and reads ``tokenizer_config.json`` /
``special_tokens_map.json`` for ``do_lower_case`` and special tokens. The formats themselves are
:mod:`attnlab.tokenizers.vocab_files` (the vocabulary files) and :mod:`attnlab.tokenizers.tokenizer_json`.
Errors name the file, the line or the JSON field, and what was expected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attnlab.manifest import verify_directory
from attnlab.tokenizers.factories import (
    bert_wordpiece,
    byte_level_bpe,
    sentencepiece_bpe,
    sentencepiece_unigram,
)
from attnlab.tokenizers.models import BPE, Unigram, WordPiece
from attnlab.tokenizers.tokenizer import Tokenizer
from attnlab.tokenizers.vocab_files import (
    SP_CONTROL,
    SP_UNKNOWN,
    SP_USER_DEFINED,
    TokenizerFileError,
    open_utf8,
    read_merges_txt,
    read_sentencepiece_model,
    read_sentencepiece_vocab,
    read_vocab_json,
    read_vocab_txt,
    write_merges_txt,
    write_vocab_json,
    write_vocab_txt,
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


def tokenizer_from_json(data: Any, source: str = "tokenizer.json") -> Tokenizer:
    """Build a :class:`Tokenizer` from the parsed JSON of HF tokenizers' ``tokenizer.json``."""
    return Tokenizer.from_json(data, source)


def tokenizer_from_json_str(text: str, source: str = "tokenizer.json") -> Tokenizer:
    return Tokenizer.from_str(text, source)


def load_tokenizer_json(path: str | os.PathLike) -> Tokenizer:
    """Load ``tokenizer.json`` (a file, or a directory containing one)."""
    return Tokenizer.from_file(path)


def tokenizer_to_json(tok: Tokenizer) -> dict[str, Any]:
    """HF tokenizers' ``tokenizer.json`` structure for ``tok``."""
    return tok.to_json()


def save_tokenizer_json(tok: Tokenizer, path: str | os.PathLike, pretty: bool = True) -> str:
    """Write ``tokenizer.json`` into the directory ``path`` (made if missing), or to ``path`` itself when it
    names a ``.json`` file; returns the file name (see ``Tokenizer.save``)."""
    return tok.save(path, pretty=pretty)


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
        with open_utf8(path) as f:
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
