"""What every tokenizer trainer shares: the corpus front end (files, texts or word counts) and the vocabulary
settings (size, special tokens, alphabet limits).

``train(corpus)`` takes a path, a list or tuple of paths, or any other iterable of texts; use
:meth:`TokenizerTrainer.train_from_iterator` to pass a list of *texts*,
:meth:`TokenizerTrainer.train_from_counts` for a word-count table. The subclasses (BPE, WordPiece, Unigram)
are in :mod:`attnlab.tokenizers.train_bpe` and :mod:`attnlab.tokenizers.train_unigram`.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attnlab.tokenizers.train_counting import (
    CorpusStats,
    PreTokenize,
    count_words_in_files,
    count_words_in_texts,
)

__all__ = ["TokenizerTrainer"]


def _is_file_list(corpus: Any) -> bool:
    if isinstance(corpus, (str, os.PathLike)):
        return True
    return isinstance(corpus, (list, tuple)) and all(isinstance(c, (str, os.PathLike)) for c in corpus)


class TokenizerTrainer:
    """What every trainer shares: the corpus front end and the vocabulary settings.

    Args:
        vocab_size: the size of the trained vocabulary, special tokens included.
        min_frequency: pairs (BPE, WordPiece) or words (Unigram) seen fewer times are not used.
        special_tokens: tokens given the first ids, in this order.
        limit_alphabet: keep at most this many characters (the most frequent) in the initial alphabet;
            dropped characters split the words that hold them (they become unknown at encoding).
        initial_alphabet: characters always in the alphabet, seen or not.
        show_progress: tqdm bars for counting and training.
        processes: worker processes for counting (``None``: all cores).
        pre_tokenize: ``text -> pieces`` used to count words; ``None`` splits on whitespace.
            :func:`train_tokenizer` passes the pipeline's ``pre_tokenize_str``.
    """

    def __init__(
        self,
        vocab_size: int = 30_000,
        min_frequency: int = 0,
        special_tokens: Sequence[str] = (),
        limit_alphabet: int | None = None,
        initial_alphabet: Iterable[str] = (),
        show_progress: bool = True,
        processes: int | None = None,
        pre_tokenize: PreTokenize | None = None,
    ) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if min_frequency < 0:
            raise ValueError(f"min_frequency must be >= 0, got {min_frequency}")
        if limit_alphabet is not None and limit_alphabet < 0:
            raise ValueError(f"limit_alphabet must be >= 0 or None, got {limit_alphabet}")
        self.vocab_size = vocab_size
        self.min_frequency = min_frequency
        self.special_tokens = list(dict.fromkeys(special_tokens))
        self.limit_alphabet = limit_alphabet
        chars: list[str] = []
        for c in initial_alphabet:
            if not isinstance(c, str) or not c:
                raise ValueError(f"initial_alphabet entries must be non-empty strings, got {c!r}")
            chars.append(c[0])  # like HF: the first character of each entry
        self.initial_alphabet = sorted(set(chars))
        self.show_progress = show_progress
        self.processes = processes
        self.pre_tokenize = pre_tokenize
        self.corpus_stats = CorpusStats()
        self.word_counts: Counter[str] | None = None

    # -- corpus front end ---------------------------------------------------------------------------------
    def count_words(self, corpus: Any) -> Counter[str]:
        """Word counts of ``corpus`` (a path, a list/tuple of paths, or an iterable of texts)."""
        self.corpus_stats = CorpusStats()
        if _is_file_list(corpus):
            files = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
            return count_words_in_files(
                files,
                self.pre_tokenize,
                self.processes,
                show_progress=self.show_progress,
                stats=self.corpus_stats,
            )
        return count_words_in_texts(
            corpus, self.pre_tokenize, processes=1, show_progress=self.show_progress, stats=self.corpus_stats
        )

    def train(self, corpus: Any) -> Any:
        """Train on a path, a list/tuple of paths, or an iterable of texts; return the model."""
        return self.train_from_counts(self.count_words(corpus))

    def train_from_iterator(self, texts: Iterable[str]) -> Any:
        """Train on texts (each may hold several lines)."""
        self.corpus_stats = CorpusStats()
        counts = count_words_in_texts(
            iter(texts),
            self.pre_tokenize,
            processes=1,
            show_progress=self.show_progress,
            stats=self.corpus_stats,
        )
        return self.train_from_counts(counts)

    def train_from_counts(self, word_counts: Mapping[str, int]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------------------
    def _check_counts(self, word_counts: Mapping[str, int]) -> dict[str, int]:
        counts = {w: int(c) for w, c in word_counts.items() if w and c > 0}
        if not counts:
            raise ValueError("empty corpus: no words with a positive count to train on")
        self.word_counts = Counter(counts)
        return counts

    def _alphabet(self, word_counts: Mapping[str, int]) -> list[str]:
        """The kept characters, in code-point order (HF tokenizers' order, which fixes tie-breaking)."""
        if self.limit_alphabet is None:
            chars = set("".join(word_counts))
            chars.update(self.initial_alphabet)
            return sorted(chars)
        freq: dict[str, float] = {}
        for w, c in word_counts.items():
            for ch in w:
                freq[ch] = freq.get(ch, 0) + c
        for ch in self.initial_alphabet:
            freq[ch] = math.inf
        kept = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[: self.limit_alphabet]
        return sorted(ch for ch, _ in kept)

    def _start_vocab(self) -> tuple[list[str], dict[str, int]]:
        id_to_token = list(self.special_tokens)
        return id_to_token, {t: i for i, t in enumerate(id_to_token)}

    def _check_size(self, base: int, what: str) -> None:
        if self.vocab_size < base:
            raise ValueError(
                f"vocab_size={self.vocab_size} is smaller than the {what} ({base}: "
                f"{len(self.special_tokens)} special tokens + {base - len(self.special_tokens)} symbols); "
                f"raise vocab_size to at least {base} or lower limit_alphabet"
            )

    def _progress(self, total: int, desc: str) -> Any:
        if not self.show_progress:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False)
