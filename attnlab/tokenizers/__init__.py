"""attnlab.tokenizers: normalisers, pre-tokenisers, WordPiece / BPE / byte-level BPE / Unigram models,
the encoding API and the field's vocabulary files (see docs/architecture.md).
Pure Python + ``regex``, no torch."""

from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.files import load_tokenizer
from attnlab.tokenizers.models import BPE, Unigram, WordPiece
from attnlab.tokenizers.tokenizer import (
    AddedToken,
    Tokenizer,
    bert_wordpiece,
    byte_level_bpe,
    flatten_overflowing,
    sentencepiece_bpe,
    sentencepiece_unigram,
)
from attnlab.tokenizers.trainers import (
    BpeTrainer,
    TokenizerTrainer,
    UnigramTrainer,
    WordPieceTrainer,
    train_tokenizer,
)

__all__ = [
    "AddedToken",
    "BPE",
    "BpeTrainer",
    "Encoding",
    "Tokenizer",
    "TokenizerTrainer",
    "Unigram",
    "UnigramTrainer",
    "WordPiece",
    "WordPieceTrainer",
    "bert_wordpiece",
    "byte_level_bpe",
    "flatten_overflowing",
    "load_tokenizer",
    "sentencepiece_bpe",
    "sentencepiece_unigram",
    "train_tokenizer",
]
