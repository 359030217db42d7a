"""BPE and WordPiece vocabularies: merge adjacent symbol pairs until the vocabulary is full.

* BPE: Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with Subword Units",
  §3.2: start from characters, repeatedly merge the most frequent adjacent pair. An end-of-word suffix
  (``"</w>"``) or a continuing-subword prefix marks word boundaries when asked.
* Byte-level BPE: Radford et al. (2019), GPT-2 §2.2: the same over the 256 byte values (as printable
  characters), so the alphabet is complete and no input is ever unknown.
* WordPiece: Schuster & Nakajima (2012); the merge chosen is the one that most raises the training
  data's likelihood under a unigram model of symbols: ``freq(ab) / (freq(a) * freq(b))``.

The merge loop itself is :mod:`attnlab.tokenizers.train_merges`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from attnlab.tokenizers.models import BPE, WordPiece
from attnlab.tokenizers.train_counting import PreTokenize
from attnlab.tokenizers.train_merges import MergeState, run_merges
from attnlab.tokenizers.trainer_base import TokenizerTrainer

__all__ = ["BpeTrainer", "WordPieceTrainer"]


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


class BpeTrainer(TokenizerTrainer):
    """Byte-pair encoding (Sennrich et al., 2016): merge the most frequent adjacent pair until ``vocab_size``.

    Args:
        continuing_subword_prefix: prefix of symbols that do not start a word (e.g. ``"##"``).
        end_of_word_suffix: suffix of symbols that end a word (Sennrich's ``"</w>"``).
        max_token_length: merged symbols longer than this many characters are not made.
        unk_token: the model's unknown token (added to the vocabulary as a special token when given).
        byte_fallback: passed to the model.
        See :class:`~attnlab.tokenizers.trainer_base.TokenizerTrainer` for the rest.

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
        vocab, _ = self.learn(word_counts)
        return WordPiece(
            vocab, unk_token=self.unk_token, continuing_subword_prefix=self.continuing_subword_prefix,
            max_input_chars_per_word=self.max_input_chars_per_word,
        )  # fmt: skip
