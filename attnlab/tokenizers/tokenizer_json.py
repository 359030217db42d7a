"""HF tokenizers' ``tokenizer.json``: each pipeline part from and to its JSON.

The file holds normalizer, pre_tokenizer, model (WordPiece, BPE / byte-level BPE, Unigram), post_processor,
decoder, added_tokens, truncation and padding. :func:`pipeline_from_json` reads them into a
:class:`PipelineSpec`, which ``Tokenizer.from_json`` assembles; :func:`pipeline_to_json` writes them back.
Errors name the file and the JSON field, and what was expected.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attnlab.tokenizers.decoders as dec
import attnlab.tokenizers.normalizers as norm
import attnlab.tokenizers.pre_tokenizers as pre
import attnlab.tokenizers.processors as proc
from attnlab.atomic import write_json_atomic
from attnlab.manifest import verify_file
from attnlab.tokenizers.added_tokens import AddedToken
from attnlab.tokenizers.json_floats import serde_float
from attnlab.tokenizers.models import BPE, Model, Unigram, WordPiece
from attnlab.tokenizers.precompiled import Precompiled, PrecompiledFormatError
from attnlab.tokenizers.vocab_files import TokenizerFileError, open_utf8

__all__ = [
    "PipelineSpec",
    "pipeline_from_json",
    "pipeline_to_json",
    "parse_tokenizer_json",
    "read_tokenizer_json",
    "write_tokenizer_json",
]


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


@dataclass
class PipelineSpec:
    """The parts of a tokenizer read from ``tokenizer.json``, for ``Tokenizer.from_json`` to assemble."""

    model: Model
    normalizer: norm.Normalizer | None
    pre_tokenizer: pre.PreTokenizer | None
    post_processor: proc.PostProcessor | None
    decoder: dec.Decoder | None
    added_tokens: list[tuple[int, AddedToken]]  # (id, token) in the file's order
    truncation: dict[str, Any] | None  # keyword arguments of Tokenizer.enable_truncation
    padding: dict[str, Any] | None  # keyword arguments of Tokenizer.enable_padding


def pipeline_from_json(data: Any, source: str = "tokenizer.json") -> PipelineSpec:
    """The parts of the parsed JSON of HF tokenizers' ``tokenizer.json``; errors name ``source`` and the
    field."""
    f = _Fields(data, "", source)
    model = _model_from_json(f.get("model", dict), "model", source)
    normalizer = _normalizer_from_json(f.get("normalizer", dict, None, nullable=True), "normalizer", source)
    pre_tokenizer = _pre_tokenizer_from_json(
        f.get("pre_tokenizer", dict, None, nullable=True), "pre_tokenizer", source
    )
    post_processor = _processor_from_json(
        f.get("post_processor", dict, None, nullable=True), "post_processor", source
    )
    decoder = _decoder_from_json(f.get("decoder", dict, None, nullable=True), "decoder", source)
    added: list[tuple[int, AddedToken]] = []
    for i, item in enumerate(f.get("added_tokens", list, [])):
        af = _Fields(item, f"added_tokens[{i}]", source)
        token = AddedToken(
            af.get("content", str),
            single_word=af.get("single_word", bool, False),
            lstrip=af.get("lstrip", bool, False),
            rstrip=af.get("rstrip", bool, False),
            normalized=af.get("normalized", bool, False),
            special=af.get("special", bool, False),
        )
        added.append((af.get("id", int), token))
    truncation = None
    trunc = f.get("truncation", dict, None, nullable=True)
    if trunc is not None:
        tf = _Fields(trunc, "truncation", source)
        strategy = tf.get("strategy", str, "LongestFirst")
        if strategy not in _STRATEGY_FROM_JSON:
            raise TokenizerFileError(
                f"{source}: field 'truncation.strategy': expected one of {sorted(_STRATEGY_FROM_JSON)}, "
                f"got {strategy!r}"
            )
        truncation = {
            "max_length": tf.get("max_length", int),
            "stride": tf.get("stride", int, 0),
            "strategy": _STRATEGY_FROM_JSON[strategy],
            "direction": tf.get("direction", str, "Right").lower(),
        }
    padding = None
    pad = f.get("padding", dict, None, nullable=True)
    if pad is not None:
        pf = _Fields(pad, "padding", source)
        strategy = pf.get("strategy", (str, dict), "BatchLongest")
        padding = {
            "direction": pf.get("direction", str, "Right").lower(),
            "pad_id": pf.get("pad_id", int, 0),
            "pad_type_id": pf.get("pad_type_id", int, 0),
            "pad_token": pf.get("pad_token", str, "[PAD]"),
            "length": strategy.get("Fixed") if isinstance(strategy, dict) else None,
            "pad_to_multiple_of": pf.get("pad_to_multiple_of", int, None, nullable=True),
        }
    return PipelineSpec(model, normalizer, pre_tokenizer, post_processor, decoder, added, truncation, padding)


def parse_tokenizer_json(text: str, source: str = "tokenizer.json") -> Any:
    """The JSON of ``text``, numbers read as HF's Rust reader parses them (json_floats: the same Unigram
    scores, to the last bit)."""
    try:
        return json.loads(text, parse_float=serde_float)
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{source}: not valid JSON ({e})") from None


def read_tokenizer_json(path: str | os.PathLike) -> tuple[Any, str]:
    """The parsed ``tokenizer.json`` (a file, or a directory containing one) and the file's name."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise TokenizerFileError(f"{p}: no such file; expected HF tokenizers' tokenizer.json")
    verify_file(p)  # against its directory's manifest.json, when that lists it
    with open_utf8(p) as f:
        text = f.read()
    return parse_tokenizer_json(text, str(p)), str(p)


def pipeline_to_json(
    model: Model,
    normalizer: norm.Normalizer | None,
    pre_tokenizer: pre.PreTokenizer | None,
    post_processor: proc.PostProcessor | None,
    decoder: dec.Decoder | None,
    added_tokens: dict[str, tuple[int, AddedToken]],
    truncation: dict[str, Any] | None,
    padding: dict[str, Any] | None,
) -> dict[str, Any]:
    """HF tokenizers' ``tokenizer.json`` structure for a pipeline's parts (``Tokenizer.to_json``)."""
    trunc = None
    if truncation is not None:
        t = truncation
        trunc = {
            "direction": t["direction"].capitalize(),
            "max_length": t["max_length"],
            "strategy": _STRATEGY_TO_JSON[t["strategy"]],
            "stride": t["stride"],
        }
    pad = None
    if padding is not None:
        p = padding
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
        for c, (i, t) in sorted(added_tokens.items(), key=lambda kv: kv[1][0])
    ]
    return {
        "version": "1.0",
        "truncation": trunc,
        "padding": pad,
        "added_tokens": added,
        "normalizer": normalizer.to_json() if normalizer is not None else None,
        "pre_tokenizer": pre_tokenizer.to_json() if pre_tokenizer is not None else None,
        "post_processor": post_processor.to_json() if post_processor is not None else None,
        "decoder": decoder.to_json() if decoder is not None else None,
        "model": model.to_json(),
    }


def write_tokenizer_json(data: dict[str, Any], path: str | os.PathLike, pretty: bool = True) -> str:
    """Write ``data`` as ``tokenizer.json`` into the directory ``path`` (made if missing), or to ``path``
    itself when it names a ``.json`` file; returns the file name. Another dot does not make a file name
    (``tok_v1.0`` is a directory), and an existing file that is not ``.json`` is an error, never
    overwritten."""
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
    write_json_atomic(data, p, indent=2 if pretty else None, ensure_ascii=False)
    return str(p)
