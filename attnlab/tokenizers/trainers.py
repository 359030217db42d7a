"""Training subword vocabularies and whole tokenizers: BPE, byte-level BPE, WordPiece and Unigram.

Each trainer takes a corpus (files, an iterator of texts, or a ready ``{word: count}`` table) and returns a
ready model from :mod:`attnlab.tokenizers.models`::

    BpeTrainer(vocab_size=30_000, end_of_word_suffix="</w>").train(["a.txt", "b.txt"])   -> BPE
    WordPieceTrainer(vocab_size=30_000).train(["a.txt"])                                   -> WordPiece
    UnigramTrainer(vocab_size=8_000).train(["a.txt"])                                      -> Unigram

and :func:`train_tokenizer` wraps a trained model in the same normaliser / pre-tokeniser pipeline as the
factories (``bert_wordpiece``, ``byte_level_bpe``, ``sentencepiece_unigram``), counting the words that
pipeline produces.

Where each part lives: the shared corpus front end in :mod:`~attnlab.tokenizers.trainer_base`
(``TokenizerTrainer``), word counting in :mod:`~attnlab.tokenizers.train_counting`, BPE and WordPiece
(Sennrich et al. 2016; Schuster & Nakajima 2012) in :mod:`~attnlab.tokenizers.train_bpe` over the merge loop
of :mod:`~attnlab.tokenizers.train_merges`, Unigram (Kudo 2018, §3.2) in
:mod:`~attnlab.tokenizers.train_unigram`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attnlab.tokenizers.decoders as dec
import attnlab.tokenizers.normalizers as norm
import attnlab.tokenizers.pre_tokenizers as pre
from attnlab.tokenizers.factories import bert_wordpiece, byte_level_bpe, sentencepiece_unigram
from attnlab.tokenizers.models import BPE, Unigram, WordPiece
from attnlab.tokenizers.pre_tokenizers import bytes_to_unicode
from attnlab.tokenizers.tokenizer import Tokenizer
from attnlab.tokenizers.train_bpe import BpeTrainer, WordPieceTrainer
from attnlab.tokenizers.train_counting import PreTokenize
from attnlab.tokenizers.train_unigram import UnigramTrainer
from attnlab.tokenizers.trainer_base import TokenizerTrainer

__all__ = [
    "TokenizerTrainer",
    "BpeTrainer",
    "WordPieceTrainer",
    "UnigramTrainer",
    "make_trainer",
    "train_tokenizer",
    "TRAINER_KINDS",
]

TRAINER_KINDS = ("wordpiece", "bpe", "byte_level_bpe", "unigram")


_DEFAULT_SPECIALS = {
    "wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "bpe": ["<unk>"],
    "byte_level_bpe": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    "unigram": ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"],
}
_DEFAULT_LOWERCASE = {"wordpiece": True, "bpe": False, "byte_level_bpe": False, "unigram": True}
_UNK = {"wordpiece": "[UNK]", "bpe": "<unk>", "byte_level_bpe": None, "unigram": "<unk>"}


def _specials(kind: str, given: Sequence[str] | None) -> list[str]:
    """The user's special tokens in their order, then any the kind's template needs that they left out."""
    names = list(dict.fromkeys(given)) if given else []
    for t in _DEFAULT_SPECIALS[kind]:
        if t not in names:
            names.append(t)
    return names


def _pipeline(kind: str, model: Any, specials: list[str], lowercase: bool) -> Tokenizer:
    """The factory pipeline of ``kind`` around ``model`` (a trained model, or a placeholder for counting)."""
    required = _DEFAULT_SPECIALS[kind]
    if kind == "wordpiece":
        tok = bert_wordpiece(model, lowercase=lowercase)
    elif kind == "byte_level_bpe":
        tok = byte_level_bpe(model, template="roberta", special_tokens=required)
    elif kind == "unigram":
        tok = sentencepiece_unigram(model, lowercase=lowercase, template="albert", special_tokens=required)
    else:  # Sennrich's BPE: BERT-style clean-up and split, "</w>" ends words
        tok = Tokenizer(
            model,
            normalizer=norm.BertNormalizer(lowercase=lowercase, strip_accents=False),
            pre_tokenizer=pre.BertPreTokenizer(),
            decoder=dec.BPEDecoder(suffix="</w>"),
            special_tokens=required,
        )
    extra = [t for t in specials if t not in required]
    if extra:
        tok.add_special_tokens(extra)
    return tok


def _placeholder(kind: str, specials: list[str]) -> Any:
    """A model holding only the special tokens (and bytes), so the factory can build the pipeline to count."""
    vocab = {t: i for i, t in enumerate(specials)}
    if kind == "wordpiece":
        return WordPiece(vocab, unk_token="[UNK]")
    if kind == "unigram":
        return Unigram([(t, 0.0) for t in specials], unk_id=specials.index("<unk>"))
    if kind == "byte_level_bpe":
        for c in bytes_to_unicode().values():
            vocab.setdefault(c, len(vocab))
        return BPE(vocab, [])
    return BPE(vocab, [], unk_token="<unk>", end_of_word_suffix="</w>")


def make_trainer(
    kind: str,
    vocab_size: int,
    *,
    special_tokens: Sequence[str] | None = None,
    min_frequency: int | None = None,
    limit_alphabet: int | None = None,
    show_progress: bool = True,
    processes: int | None = None,
    pre_tokenize: PreTokenize | None = None,
    **trainer_kwargs: Any,
) -> TokenizerTrainer:
    """The trainer ``train_tokenizer`` uses for ``kind`` (exposed to train on ready word counts)."""
    if kind not in TRAINER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(TRAINER_KINDS)}; got {kind!r}")
    specials = _specials(kind, special_tokens)
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, special_tokens=specials, show_progress=show_progress,
        processes=processes, pre_tokenize=pre_tokenize, **trainer_kwargs,
    )  # fmt: skip
    if min_frequency is not None:
        common["min_frequency"] = min_frequency
    if kind == "wordpiece":
        if limit_alphabet is not None:
            common["limit_alphabet"] = limit_alphabet
        return WordPieceTrainer(unk_token="[UNK]", **common)
    if kind == "unigram":
        return UnigramTrainer(unk_token="<unk>", limit_alphabet=limit_alphabet, **common)
    if kind == "byte_level_bpe":
        if limit_alphabet is not None:
            raise ValueError("limit_alphabet does not apply to byte_level_bpe: its alphabet is the 256 bytes")
        return BpeTrainer(initial_alphabet=list(bytes_to_unicode().values()), **common)
    return BpeTrainer(unk_token="<unk>", end_of_word_suffix="</w>", limit_alphabet=limit_alphabet, **common)


def train_tokenizer(
    kind: str,
    files: Any,
    vocab_size: int,
    *,
    lowercase: bool | None = None,
    min_frequency: int | None = None,
    special_tokens: Sequence[str] | None = None,
    limit_alphabet: int | None = None,
    show_progress: bool = True,
    processes: int | None = None,
    **trainer_kwargs: Any,
) -> Tokenizer:
    """Train a whole tokenizer of a given kind on files (a path or list of paths) or an iterable of texts.

    ``kind`` picks the field's pipeline, the same one the factories build:

    ==================  ======================================================  ==========================
    kind                pipeline                                                special tokens (always)
    ==================  ======================================================  ==========================
    ``wordpiece``       ``bert_wordpiece``: clean, (lowercase + strip accents),  ``[PAD] [UNK] [CLS] [SEP]
                        whitespace/punctuation split, WordPiece ``##``           [MASK]``
    ``bpe``             Sennrich: BERT clean-up, (lowercase), whitespace/        ``<unk>``
                        punctuation split, BPE with ``</w>``, BPE decoder
    ``byte_level_bpe``  ``byte_level_bpe`` (RoBERTa template): GPT-2 bytes,      ``<s> <pad> </s> <unk>
                        256-symbol alphabet, never unknown                      <mask>``
    ``unigram``         ``sentencepiece_unigram`` (ALBERT): NFKD, (lowercase),   ``<pad> <unk> [CLS] [SEP]
                        Metaspace ``▁``                                         [MASK]``
    ==================  ======================================================  ==========================

    ``special_tokens`` come first, in the order given, followed by those the template needs that are missing.
    ``lowercase=None`` takes the kind's default (``True`` for wordpiece and unigram). Extra keyword arguments
    go to the trainer (e.g. ``max_token_length``, ``shrinking_factor``).
    """
    if kind not in TRAINER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(TRAINER_KINDS)}; got {kind!r}")
    if lowercase is None:
        lowercase = _DEFAULT_LOWERCASE[kind]
    if kind == "byte_level_bpe" and lowercase:
        raise ValueError("byte_level_bpe keeps text as bytes: lowercase is not supported")
    specials = _specials(kind, special_tokens)
    counter = _pipeline(kind, _placeholder(kind, specials), specials, lowercase)
    trainer = make_trainer(
        kind, vocab_size, special_tokens=specials, min_frequency=min_frequency, limit_alphabet=limit_alphabet,
        show_progress=show_progress, processes=processes, pre_tokenize=counter.pre_tokenize_str,
        **trainer_kwargs,
    )  # fmt: skip
    model = trainer.train(files)
    tokenizer = _pipeline(kind, model, specials, lowercase)
    return tokenizer
