"""An attnlab tokenizer as HF transformers reads it: ``tokenizer.json``, the classic vocabulary files and a
``tokenizer_config.json`` whose ``tokenizer_class`` rebuilds the same pipeline.

HF transformers 5 builds a family's tokenizer class (``BertTokenizerFast``, ``AlbertTokenizerFast``, ...)
from the vocabulary in ``tokenizer.json`` but its normaliser from the class's own arguments
(``do_lower_case``, ``strip_accents``, ``keep_accents``, ``add_prefix_space``): those are read back from the
tokenizer's pipeline here. A pipeline no family class rebuilds exactly (Sennrich BPE, a custom normaliser)
is declared ``PreTrainedTokenizerFast``, which loads ``tokenizer.json`` as it is.

=======================================================  ==========================================
attnlab pipeline (``tokenizer.json``)                    ``tokenizer_class``
=======================================================  ==========================================
WordPiece, BertNormalizer, BertPreTokenizer, [CLS]/[SEP]  BertTokenizerFast (ELECTRA: Electra...,
                                                          DistilBERT: DistilBert...)
byte-level BPE, RobertaProcessing                         RobertaTokenizerFast
byte-level BPE, no template (GPT-2's)                     GPT2TokenizerFast
Unigram, ALBERT normaliser, Metaspace, [CLS] A [SEP]      AlbertTokenizerFast
anything else                                             PreTrainedTokenizerFast
=======================================================  ==========================================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.tokenizers.files import save_vocab_files, tokenizer_to_json

GENERIC_CLASS = "PreTrainedTokenizerFast"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
GPT2_EOT = "<|endoftext|>"
_WORDPIECE_CLASS = {"electra": "ElectraTokenizerFast", "distilbert": "DistilBertTokenizerFast"}
# ALBERT's normaliser as HF builds it: quotes, NFKD, then StripAccents unless keep_accents, Lowercase
# with do_lower_case.
_ALBERT_QUOTES = [
    {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
    {"type": "Replace", "pattern": {"String": "''"}, "content": '"'},
    {"type": "NFKD"},
]


def _specials(data: dict[str, Any], **roles: str) -> dict[str, str]:
    """``{role}_token`` entries for the roles whose token the tokenizer has (special or in the vocabulary)."""
    known = {a["content"] for a in data.get("added_tokens", [])}
    vocab = data["model"].get("vocab")
    if isinstance(vocab, dict):
        known |= set(vocab)
    elif isinstance(vocab, list):
        known |= {piece for piece, _ in vocab}
    return {f"{role}_token": token for role, token in roles.items() if token in known}


def _wordpiece(data: dict[str, Any], family: str | None) -> dict[str, Any] | None:
    norm, post = data.get("normalizer") or {}, data.get("post_processor") or {}
    if (
        norm.get("type") != "BertNormalizer"
        or (data.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer"
        or post.get("type") != "BertProcessing"
        or not norm.get("clean_text", True)
    ):
        return None
    config: dict[str, Any] = {
        "tokenizer_class": _WORDPIECE_CLASS.get(family or "", "BertTokenizerFast"),
        "do_lower_case": bool(norm.get("lowercase", True)),
        "tokenize_chinese_chars": bool(norm.get("handle_chinese_chars", True)),
        "strip_accents": norm.get("strip_accents"),
    }
    config.update(
        _specials(
            data,
            unk=data["model"].get("unk_token", "[UNK]"),
            cls=post["cls"][0],
            sep=post["sep"][0],
            pad="[PAD]",
            mask="[MASK]",
        )
    )
    return config


def _roberta(data: dict[str, Any]) -> dict[str, Any] | None:
    pre, post = data.get("pre_tokenizer") or {}, data.get("post_processor") or {}
    if (
        data["model"].get("type") != "BPE"
        or data.get("normalizer")
        or pre.get("type") != "ByteLevel"
        or post.get("type") != "RobertaProcessing"
    ):
        return None
    config: dict[str, Any] = {
        "tokenizer_class": "RobertaTokenizerFast",
        "add_prefix_space": bool(pre.get("add_prefix_space", False)),
        "trim_offsets": bool(post.get("trim_offsets", True)),
    }
    cls, sep = post["cls"][0], post["sep"][0]
    config.update(
        _specials(data, bos=cls, eos=sep, cls=cls, sep=sep, unk="<unk>", pad="<pad>", mask="<mask>")
    )
    return config


def _gpt2(data: dict[str, Any]) -> dict[str, Any] | None:
    """GPT-2's pipeline: byte-level BPE with no template (a causal LM's prompts take no ``<s>``/``</s>``);
    its one special token, ``<|endoftext|>``, is BOS, EOS and UNK as in GPT-2's files."""
    pre, post = data.get("pre_tokenizer") or {}, data.get("post_processor") or {}
    if (
        data["model"].get("type") != "BPE"
        or data.get("normalizer")
        or pre.get("type") != "ByteLevel"
        or post.get("type", "ByteLevel") != "ByteLevel"
    ):
        return None
    config: dict[str, Any] = {
        "tokenizer_class": "GPT2TokenizerFast",
        "add_prefix_space": bool(pre.get("add_prefix_space", False)),
    }
    config.update(_specials(data, bos=GPT2_EOT, eos=GPT2_EOT, unk=GPT2_EOT))
    return config


def _albert(data: dict[str, Any]) -> dict[str, Any] | None:
    norm, pre, post = (
        data.get("normalizer") or {},
        data.get("pre_tokenizer") or {},
        data.get("post_processor") or {},
    )
    steps = norm.get("normalizers") if norm.get("type") == "Sequence" else None
    if data["model"].get("type") != "Unigram" or steps is None or steps[:3] != _ALBERT_QUOTES:
        return None
    rest = [s.get("type") for s in steps[3:]]
    if rest not in ([], ["StripAccents"], ["Lowercase"], ["StripAccents", "Lowercase"]):
        return None
    pieces = [p.get("type") for p in pre.get("pretokenizers", [])] if pre.get("type") == "Sequence" else []
    if pieces != ["WhitespaceSplit", "Metaspace"]:
        return None
    single = [next(iter(x.values()))["id"] for x in post.get("single", [])]
    pair = [next(iter(x.values()))["id"] for x in post.get("pair", [])]
    if post.get("type") != "TemplateProcessing" or single != ["[CLS]", "A", "[SEP]"]:
        return None
    if pair != ["[CLS]", "A", "[SEP]", "B", "[SEP]"]:
        return None
    config: dict[str, Any] = {
        "tokenizer_class": "AlbertTokenizerFast",
        "do_lower_case": "Lowercase" in rest,
        "keep_accents": "StripAccents" not in rest,
    }
    config.update(_specials(data, cls="[CLS]", sep="[SEP]", unk="<unk>", pad="<pad>", mask="[MASK]"))
    return config


def hf_tokenizer_config(
    tokenizer: Any,
    family: str | None = None,
    model_max_length: int | None = None,
    token_types: bool | None = None,
) -> dict:
    """The ``tokenizer_config.json`` that makes ``transformers.AutoTokenizer`` rebuild ``tokenizer``: its
    ``tokenizer_class`` (see the module docstring; ``family`` picks among the WordPiece classes), the
    normaliser's options and the special tokens.

    ``token_types`` (the model has segment embeddings) writes ``model_input_names`` with or without
    ``token_type_ids``: HF 5's ALBERT tokenizer leaves them out by default, so a pair would reach the
    model as one segment.
    """
    data = tokenizer_to_json(tokenizer)
    config = _wordpiece(data, family) or _roberta(data) or _gpt2(data) or _albert(data)
    if config is None:
        config = {"tokenizer_class": GENERIC_CLASS}
        config.update(_specials(data, unk="[UNK]", cls="[CLS]", sep="[SEP]", pad="[PAD]", mask="[MASK]"))
        config.update(
            _specials(data, **{k: v for k, v in (("unk", "<unk>"), ("pad", "<pad>"), ("mask", "<mask>"))})
        )
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    if token_types is not None:
        types = ["token_type_ids"] if token_types else []
        config["model_input_names"] = ["input_ids", *types, "attention_mask"]
    return config


def save_hf_tokenizer(
    tokenizer: Any,
    directory: str | os.PathLike,
    family: str | None = None,
    model_max_length: int | None = None,
    token_types: bool | None = None,
) -> list[str]:
    """Write ``tokenizer.json``, ``vocab.txt`` or ``vocab.json`` + ``merges.txt`` (when the model has them)
    and ``tokenizer_config.json`` (`hf_tokenizer_config`) into ``directory``; returns the files written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tokenizer.save(d / "tokenizer.json")
    written = [str(d / "tokenizer.json")]
    try:
        written += save_vocab_files(tokenizer, d)
    except ValueError:
        pass  # Unigram: no classic vocabulary file; tokenizer.json holds it
    config = hf_tokenizer_config(tokenizer, family, model_max_length, token_types)
    write_json_atomic(config, d / TOKENIZER_CONFIG_NAME)
    return [*written, str(d / TOKENIZER_CONFIG_NAME)]
