"""The field's tokenisation pipelines, built from a vocabulary: BERT's WordPiece, GPT-2/RoBERTa's byte-level
BPE, and SentencePiece-style Unigram/BPE (ALBERT, XLNet, T5), each as HF transformers builds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attnlab.tokenizers.decoders as dec
import attnlab.tokenizers.normalizers as norm
import attnlab.tokenizers.pre_tokenizers as pre
import attnlab.tokenizers.processors as proc
from attnlab.tokenizers.added_tokens import AddedToken
from attnlab.tokenizers.models import BPE, Unigram, WordPiece
from attnlab.tokenizers.tokenizer import Tokenizer

__all__ = [
    "BERT_SPECIAL_TOKENS",
    "bert_wordpiece",
    "byte_level_bpe",
    "sentencepiece_unigram",
    "sentencepiece_bpe",
]

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
