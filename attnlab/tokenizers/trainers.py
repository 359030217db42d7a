"""Training subword vocabularies: BPE, byte-level BPE, WordPiece and Unigram.

Each trainer takes a corpus (files, an iterator of texts, or a ready ``{word: count}`` table) and returns a
ready model from :mod:`attnlab.tokenizers.models`::

    BpeTrainer(vocab_size=30_000, end_of_word_suffix="</w>").train(["a.txt", "b.txt"])   -> BPE
    WordPieceTrainer(vocab_size=30_000).train(["a.txt"])                                   -> WordPiece
    UnigramTrainer(vocab_size=8_000).train(["a.txt"])                                      -> Unigram

and :func:`train_tokenizer` wraps a trained model in the same normaliser / pre-tokeniser pipeline as the
factories (``bert_wordpiece``, ``byte_level_bpe``, ``sentencepiece_unigram``), counting the words that
pipeline produces.

The algorithms:

* BPE — Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword Units",
  §3.2: start from characters, repeatedly merge the most frequent adjacent pair. An end-of-word suffix
  (``"</w>"``) or a continuing-subword prefix marks word boundaries when asked.
* Byte-level BPE — Radford et al. (2019), GPT-2 §2.2: the same over the 256 byte values (as printable
  characters), so the alphabet is complete and no input is ever unknown.
* WordPiece — Schuster & Nakajima (2012); the merge chosen is the one that most raises the training
  data's likelihood under a unigram model of symbols: ``freq(ab) / (freq(a) * freq(b))``.
* Unigram — Kudo (2018), "Subword Regularization", §3.2: see :mod:`attnlab.tokenizers.train_unigram`.

``train(corpus)`` takes a path, a list or tuple of paths, or any other iterable of texts; use
:meth:`Trainer.train_from_iterator` to pass a list of *texts*, :meth:`Trainer.train_from_counts` for a
word-count table.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .train_counting import (
    CorpusStats,
    PreTokenize,
    count_words_in_files,
    count_words_in_texts,
)
from .train_merges import MergeState, run_merges

if TYPE_CHECKING:  # imported lazily at run time: the pipeline modules are not needed to count or merge
    from .models import BPE, Unigram, WordPiece
    from .tokenizer import Tokenizer

__all__ = [
    "Trainer",
    "BpeTrainer",
    "WordPieceTrainer",
    "UnigramTrainer",
    "make_trainer",
    "train_tokenizer",
    "TRAINER_KINDS",
]

def _is_file_list(corpus: Any) -> bool:
    if isinstance(corpus, (str, os.PathLike)):
        return True
    return isinstance(corpus, (list, tuple)) and all(isinstance(c, (str, os.PathLike)) for c in corpus)


class Trainer:
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
                files, self.pre_tokenize, self.processes,
                show_progress=self.show_progress, stats=self.corpus_stats,
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
            iter(texts), self.pre_tokenize, processes=1,
            show_progress=self.show_progress, stats=self.corpus_stats,
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


def _split_words(
    word_counts: Mapping[str, int],
    alphabet: set[str],
    prefix: str | None,
    suffix: str | None,
    id_to_token: list[str],
    token_to_id: dict[str, int],
    all_prefixed: bool = False,
) -> tuple[list[list[int]], list[int]]:
    """Words as lists of symbol ids; registers the prefixed/suffixed character symbols.

    A character outside ``alphabet`` cuts its word in two (it would be unknown at encoding time, so no merge
    may span it; HF tokenizers instead drops it and joins its neighbours, learning pairs that never occur).
    Symbols are registered in code-point order, so ids do not depend on the order of ``word_counts``.
    """
    chars = sorted(alphabet)
    for c in chars:
        if c not in token_to_id:
            token_to_id[c] = len(id_to_token)
            id_to_token.append(c)
    if prefix or suffix:
        words_list = [w for w in word_counts]
        variants: set[str] = set()
        if prefix:
            inner = set("".join(w[1:] for w in words_list)) & alphabet
            if all_prefixed:
                inner = set(alphabet)
            variants.update(prefix + c for c in inner)
        if suffix:
            last = {w[-1] for w in words_list if w[-1] in alphabet}
            single = {w for w in words_list if len(w) == 1} & alphabet
            if prefix:
                variants.update(c + suffix for c in single)
                ends = {w[-1] for w in words_list if len(w) > 1 and w[-1] in alphabet}
                variants.update(prefix + c + suffix for c in ends)
            else:
                variants.update(c + suffix for c in last)
        for v in sorted(variants, key=lambda s: (s.removeprefix(prefix or ""), s)):
            if v not in token_to_id:
                token_to_id[v] = len(id_to_token)
                id_to_token.append(v)
    tid = token_to_id
    words: list[list[int]] = []
    counts: list[int] = []
    full = len(alphabet) and all(c in alphabet for c in set("".join(word_counts)))
    for word, count in word_counts.items():
        if full and not suffix:  # the common cases, without the per-character branches below
            if prefix:
                words.append([tid[word[0]], *[tid[prefix + c] for c in word[1:]]])
            else:
                words.append([tid[c] for c in word])
            counts.append(count)
            continue
        n = len(word)
        seg: list[int] = []
        for i, ch in enumerate(word):
            if ch not in alphabet:
                if seg:
                    words.append(seg)
                    counts.append(count)
                    seg = []
                continue
            s = ch
            if prefix and i > 0:
                s = prefix + s
            if suffix and i == n - 1:
                s = s + suffix
            seg.append(tid[s])
        if seg:
            words.append(seg)
            counts.append(count)
    return words, counts


class BpeTrainer(Trainer):
    """Byte-pair encoding (Sennrich et al., 2016): merge the most frequent adjacent pair until ``vocab_size``.

    Args:
        continuing_subword_prefix: prefix of symbols that do not start a word (e.g. ``"##"``).
        end_of_word_suffix: suffix of symbols that end a word (Sennrich's ``"</w>"``).
        max_token_length: merged symbols longer than this many characters are not made.
        unk_token: the model's unknown token (added to the vocabulary as a special token when given).
        byte_fallback: passed to the model.
        See :class:`Trainer` for the rest.

    After training, ``merges_with_counts`` holds ``((left, right), pair count)`` per merge, in order.
    """

    def __init__(
        self,
        vocab_size: int = 30_000,
        min_frequency: int = 0,
        special_tokens: Sequence[str] = (),
        limit_alphabet: int | None = None,
        initial_alphabet: Iterable[str] = (),
        continuing_subword_prefix: str | None = None,
        end_of_word_suffix: str | None = None,
        max_token_length: int | None = None,
        unk_token: str | None = None,
        byte_fallback: bool = False,
        show_progress: bool = True,
        processes: int | None = None,
        pre_tokenize: PreTokenize | None = None,
    ) -> None:
        if unk_token is not None and unk_token not in special_tokens:
            special_tokens = [*special_tokens, unk_token]
        super().__init__(
            vocab_size, min_frequency, special_tokens, limit_alphabet, initial_alphabet,
            show_progress, processes, pre_tokenize,
        )  # fmt: skip
        self.continuing_subword_prefix = continuing_subword_prefix or None
        self.end_of_word_suffix = end_of_word_suffix or None
        self.max_token_length = max_token_length
        self.unk_token = unk_token
        self.byte_fallback = byte_fallback
        self.merges_with_counts: list[tuple[tuple[str, str], int]] = []

    def _make_token(self, left: str, right: str) -> str:
        prefix = self.continuing_subword_prefix
        if prefix and right.startswith(prefix):
            right = right[len(prefix) :]
        return left + right

    def learn(
        self, word_counts: Mapping[str, int], all_prefixed: bool = False, score: str = "frequency"
    ) -> tuple[dict[str, int], list[tuple[str, str]]]:
        """Run the merges on ``{word: count}``; returns ``(vocab, merges)``, ``vocab`` in id order.

        ``all_prefixed`` puts ``prefix + c`` in the alphabet for every character ``c`` (not only those seen
        inside words); ``score`` is ``"frequency"`` (BPE) or ``"likelihood"`` (WordPiece).
        """
        counts = self._check_counts(word_counts)
        alphabet = set(self._alphabet(counts))
        id_to_token, token_to_id = self._start_vocab()
        words, wcounts = _split_words(
            counts, alphabet, self.continuing_subword_prefix, self.end_of_word_suffix,
            id_to_token, token_to_id, all_prefixed,
        )  # fmt: skip
        self._check_size(len(id_to_token), "alphabet plus special tokens")
        state = MergeState(words, wcounts, track_symbols=score == "likelihood")
        progress = self._progress(self.vocab_size - len(id_to_token), "merge pairs")
        try:
            merges = run_merges(
                state, id_to_token, token_to_id, self.vocab_size, self._make_token,
                min_frequency=self.min_frequency, score=score,
                max_token_length=self.max_token_length, progress=progress,
            )  # fmt: skip
        finally:
            if progress is not None:
                progress.close()
        self.merges_with_counts = [((id_to_token[a], id_to_token[b]), c) for a, b, _, c in merges]
        vocab = {t: i for i, t in enumerate(id_to_token)}
        return vocab, [pair for pair, _ in self.merges_with_counts]

    def train_from_counts(self, word_counts: Mapping[str, int]) -> BPE:
        from .models import BPE

        vocab, merges = self.learn(word_counts)
        return BPE(
            vocab, merges, unk_token=self.unk_token,
            continuing_subword_prefix=self.continuing_subword_prefix,
            end_of_word_suffix=self.end_of_word_suffix, byte_fallback=self.byte_fallback,
        )  # fmt: skip


class WordPieceTrainer(BpeTrainer):
    """WordPiece (Schuster & Nakajima, 2012): merge the pair of highest ``freq(ab) / (freq(a) freq(b))``.

    Every kept character is in the vocabulary both as a word start (``c``) and as a continuation (``##c``),
    as in BERT's vocabulary, so that the WordPiece model can spell any word over the alphabet. (HF tokenizers'
    ``WordPieceTrainer`` instead runs frequency-based BPE with the ``##`` prefix and keeps only the ``##c``
    seen in the corpus.)

    ``min_frequency`` defaults to 2: the likelihood score is highest for pairs of rare symbols, and merging
    pairs seen once only memorises hapaxes.
    """

    def __init__(
        self,
        vocab_size: int = 30_000,
        min_frequency: int = 2,
        special_tokens: Sequence[str] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
        limit_alphabet: int | None = 1000,
        initial_alphabet: Iterable[str] = (),
        unk_token: str = "[UNK]",
        continuing_subword_prefix: str = "##",
        max_input_chars_per_word: int = 100,
        max_token_length: int | None = None,
        show_progress: bool = True,
        processes: int | None = None,
        pre_tokenize: PreTokenize | None = None,
    ) -> None:
        if not continuing_subword_prefix:
            raise ValueError("WordPiece needs a non-empty continuing_subword_prefix (BERT uses '##')")
        super().__init__(
            vocab_size, min_frequency, special_tokens, limit_alphabet, initial_alphabet,
            continuing_subword_prefix=continuing_subword_prefix, max_token_length=max_token_length,
            unk_token=unk_token, show_progress=show_progress, processes=processes, pre_tokenize=pre_tokenize,
        )  # fmt: skip
        self.max_input_chars_per_word = max_input_chars_per_word

    def learn(
        self, word_counts: Mapping[str, int], all_prefixed: bool = True, score: str = "likelihood"
    ) -> tuple[dict[str, int], list[tuple[str, str]]]:
        # Words longer than the model's limit are [UNK] at encoding time: do not learn from them.
        limit = self.max_input_chars_per_word
        counts = {w: c for w, c in word_counts.items() if len(w) <= limit}
        return super().learn(counts, all_prefixed=all_prefixed, score=score)

    def train_from_counts(self, word_counts: Mapping[str, int]) -> WordPiece:
        from .models import WordPiece

        vocab, _ = self.learn(word_counts)
        return WordPiece(
            vocab, unk_token=self.unk_token, continuing_subword_prefix=self.continuing_subword_prefix,
            max_input_chars_per_word=self.max_input_chars_per_word,
        )  # fmt: skip


class UnigramTrainer(Trainer):
    """Unigram language-model vocabulary (Kudo, 2018), trained by EM and pruned by loss.

    Args:
        unk_token: the unknown piece (a special token; the model's ``unk_id``).
        max_piece_length: longest piece, in characters (SentencePiece: 16).
        seed_size: pieces in the seed vocabulary (SentencePiece: 1,000,000).
        shrinking_factor: fraction of pieces kept per pruning round (SentencePiece: 0.75).
        n_sub_iterations: EM iterations between prunings (SentencePiece: 2).
        byte_fallback: passed to the model.
        See :class:`Trainer` for the rest; ``min_frequency`` drops rarer words before training.

    After training, ``pieces`` holds the final ``(piece, log probability)`` list.
    """

    def __init__(
        self,
        vocab_size: int = 8_000,
        min_frequency: int = 0,
        special_tokens: Sequence[str] = ("<unk>",),
        limit_alphabet: int | None = None,
        initial_alphabet: Iterable[str] = (),
        unk_token: str | None = "<unk>",
        max_piece_length: int = 16,
        seed_size: int = 1_000_000,
        shrinking_factor: float = 0.75,
        n_sub_iterations: int = 2,
        byte_fallback: bool = False,
        show_progress: bool = True,
        processes: int | None = None,
        pre_tokenize: PreTokenize | None = None,
    ) -> None:
        if unk_token is not None and unk_token not in special_tokens:
            special_tokens = [unk_token, *special_tokens]
        super().__init__(
            vocab_size, min_frequency, special_tokens, limit_alphabet, initial_alphabet,
            show_progress, processes, pre_tokenize,
        )  # fmt: skip
        if not 0.0 < shrinking_factor < 1.0:
            raise ValueError(f"shrinking_factor must be in (0, 1), got {shrinking_factor}")
        if max_piece_length < 1:
            raise ValueError(f"max_piece_length must be >= 1, got {max_piece_length}")
        self.unk_token = unk_token
        self.max_piece_length = max_piece_length
        self.seed_size = seed_size
        self.shrinking_factor = shrinking_factor
        self.n_sub_iterations = n_sub_iterations
        self.byte_fallback = byte_fallback
        self.pieces: list[tuple[str, float]] = []

    def learn(self, word_counts: Mapping[str, int]) -> list[tuple[str, float]]:
        """The trained pieces with their log probabilities, special tokens first (score 0)."""
        from .train_unigram import train_unigram

        counts = self._check_counts(word_counts)
        if self.min_frequency > 1:
            counts = {w: c for w, c in counts.items() if c >= self.min_frequency}
            if not counts:
                raise ValueError(f"no word is seen min_frequency={self.min_frequency} times")
        alphabet = self._alphabet(counts)
        self._check_size(len(self.special_tokens) + len(alphabet), "alphabet plus special tokens")
        pieces = train_unigram(
            counts, alphabet, self.vocab_size - len(self.special_tokens),
            max_piece_length=self.max_piece_length, seed_size=self.seed_size,
            shrinking_factor=self.shrinking_factor, n_sub_iterations=self.n_sub_iterations,
            show_progress=self.show_progress,
        )  # fmt: skip
        self.pieces = [(t, 0.0) for t in self.special_tokens] + pieces
        return self.pieces

    def train_from_counts(self, word_counts: Mapping[str, int]) -> Unigram:
        from .models import Unigram

        pieces = self.learn(word_counts)
        unk_id = self.special_tokens.index(self.unk_token) if self.unk_token is not None else None
        return Unigram(pieces, unk_id=unk_id, byte_fallback=self.byte_fallback)


# --------------------------------------------------------------------------------------------------------
# Whole tokenizers

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
    from . import decoders, normalizers, pre_tokenizers
    from .tokenizer import Tokenizer, bert_wordpiece, byte_level_bpe, sentencepiece_unigram

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
            normalizer=normalizers.BertNormalizer(lowercase=lowercase, strip_accents=False),
            pre_tokenizer=pre_tokenizers.BertPreTokenizer(),
            decoder=decoders.BPEDecoder(suffix="</w>"),
            special_tokens=required,
        )
    extra = [t for t in specials if t not in required]
    if extra:
        tok.add_special_tokens(extra)
    return tok


def _placeholder(kind: str, specials: list[str]) -> Any:
    """A model holding only the special tokens (and bytes), so the factory can build the pipeline to count."""
    from .models import BPE, Unigram, WordPiece
    from .pre_tokenizers import bytes_to_unicode

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
) -> Trainer:
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
        from .pre_tokenizers import bytes_to_unicode

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
