"""attnlab.tokenizers: normalisers, pre-tokenisers, WordPiece / BPE / byte-level BPE / Unigram models,
the encoding API and the field's vocabulary files (see docs/architecture.md).
Pure Python + ``regex``, no torch."""

from attnlab.tokenizers.added_tokens import AddedToken
from attnlab.tokenizers.encoding import Encoding
from attnlab.tokenizers.factories import (
    bert_wordpiece,
    byte_level_bpe,
    sentencepiece_bpe,
    sentencepiece_unigram,
)
from attnlab.tokenizers.files import load_tokenizer
from attnlab.tokenizers.models import BPE, Unigram, WordPiece
from attnlab.tokenizers.tokenizer import Tokenizer
from attnlab.tokenizers.trainers import (
    BpeTrainer,
    TokenizerTrainer,
    UnigramTrainer,
    WordPieceTrainer,
    train_tokenizer,
)
from attnlab.tokenizers.truncation import flatten_overflowing

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
