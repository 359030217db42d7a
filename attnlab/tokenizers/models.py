"""Subword models: segment one pre-tokenised word into vocabulary tokens.

* :class:`WordPiece` (Schuster & Nakajima 2012; BERT, Devlin et al. 2019): greedy longest-match-first,
  "##" marks a continuation, a word that cannot be covered (or is over-long) becomes one [UNK].
* :class:`BPE` (Sennrich et al. 2016): characters merged by learnt merge rank; an optional end-of-word suffix
  ("</w>") and continuation prefix; GPT-2's byte-level BPE (Radford et al. 2019) is a ``BPE`` over the 256
  byte characters that the ``ByteLevel`` pre-tokeniser produces, so it never needs an unknown token.
* :class:`Unigram` (Kudo 2018): the segmentation of highest total log-probability (Viterbi), or one sampled
  from the lattice for subword regularisation.

Every model has ``tokenize(word) -> [(id, token, (start, end)), ...]`` with offsets in characters of ``word``,
and keeps a bounded per-word cache: the same words come back all the time in running text, so most calls are
one dict lookup. The returned lists are shared with the cache: callers must not modify them.
"""

from __future__ import annotations

import math
import random
from typing import Any

__all__ = ["Model", "WordPiece", "BPE", "Unigram", "Token"]

Token = tuple[int, str, tuple[int, int]]

DEFAULT_CACHE_CAPACITY = 200_000


class Model:
    """Shared vocabulary look-ups and the per-word cache."""

    vocab: dict[str, int]
    _id_to_token: list[str | None]

    def _init_vocab(self, vocab: dict[str, int], cache_capacity: int) -> None:
        self.vocab = dict(vocab)
        size = (max(self.vocab.values()) + 1) if self.vocab else 0
        table: list[str | None] = [None] * size
        for tok, i in self.vocab.items():
            if i < 0:
                raise ValueError(f"token {tok!r} has a negative id {i}")
            table[i] = tok
        self._id_to_token = table
        self.cache_capacity = cache_capacity
        self._cache: dict[str, list[Token]] = {}

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)

    def id_to_token(self, id: int) -> str | None:
        if 0 <= id < len(self._id_to_token):
            return self._id_to_token[id]
        return None

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, word: str) -> list[Token]:
        """Segment ``word``: ``[(id, token, (start, end)), ...]``, offsets in characters of ``word``."""
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        out = self._tokenize(word)
        if len(self._cache) >= self.cache_capacity:
            # A bounded cache: dropping everything at once is cheaper than LRU bookkeeping per lookup, and
            # the frequent words come straight back.
            self._cache.clear()
        self._cache[word] = out
        return out

    def clear_cache(self) -> None:
        self._cache.clear()

    def _tokenize(self, word: str) -> list[Token]:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # do not ship the cache to worker processes
        return state


class WordPiece(Model):
    """Greedy longest-match-first WordPiece.

    Args:
        vocab: token -> id.
        unk_token: the token for a word that cannot be segmented; must be in ``vocab``.
        continuing_subword_prefix: marks a token that continues a word ("##").
        max_input_chars_per_word: longer words become ``unk_token`` at once (as BERT does).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        unk_token: str = "[UNK]",
        continuing_subword_prefix: str = "##",
        max_input_chars_per_word: int = 100,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        self._init_vocab(vocab, cache_capacity)
        if unk_token not in self.vocab:
            raise ValueError(f"WordPiece: the unknown token {unk_token!r} is not in the vocabulary")
        self.unk_token = unk_token
        self.unk_id = self.vocab[unk_token]
        self.continuing_subword_prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        # Longest token lengths bound the inner search (most vocabularies have tokens of <= ~20 characters).
        p = len(continuing_subword_prefix)
        self._max_first = max(
            (len(t) for t in self.vocab if not t.startswith(continuing_subword_prefix)), default=1
        )
        self._max_cont = max(
            (len(t) - p for t in self.vocab if p and t.startswith(continuing_subword_prefix)), default=1
        )
        if not p:
            self._max_cont = self._max_first

    def _tokenize(self, word: str) -> list[Token]:
        n = len(word)
        if n > self.max_input_chars_per_word:
            return [(self.unk_id, self.unk_token, (0, n))]
        vocab = self.vocab
        prefix = self.continuing_subword_prefix
        out: list[Token] = []
        start = 0
        while start < n:
            end = min(n, start + (self._max_cont if start else self._max_first))
            found: Token | None = None
            while end > start:
                sub = word[start:end] if start == 0 else prefix + word[start:end]
                i = vocab.get(sub)
                if i is not None:
                    found = (i, sub, (start, end))
                    break
                end -= 1
            if found is None:
                return [(self.unk_id, self.unk_token, (0, n))]
            out.append(found)
            start = end
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "WordPiece",
            "unk_token": self.unk_token,
            "continuing_subword_prefix": self.continuing_subword_prefix,
            "max_input_chars_per_word": self.max_input_chars_per_word,
            "vocab": self.vocab,
        }


class BPE(Model):
    """Byte-pair encoding applied by merge rank (Sennrich et al. 2016).

    The word starts as characters (non-first ones carrying ``continuing_subword_prefix``, the last one
    ``end_of_word_suffix`` such as "</w>"); the adjacent pair with the best (lowest) rank is merged, leftmost
    first, until no pair has a merge.

    Args:
        vocab: token -> id.
        merges: merge rules in rank order; each pair's concatenation must be in ``vocab``.
        unk_token: the token for characters not in ``vocab`` (``None``: such characters are dropped, as in HF
            tokenizers; byte-level BPE never meets one).
        continuing_subword_prefix, end_of_word_suffix: see above.
        byte_fallback: unknown characters become their UTF-8 bytes as "<0xAB>" tokens (SentencePiece BPE).
        fuse_unk: consecutive unknown characters become one unknown token.
        ignore_merges: a word that is itself in ``vocab`` is returned whole.
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: list[tuple[str, str]],
        unk_token: str | None = None,
        continuing_subword_prefix: str | None = None,
        end_of_word_suffix: str | None = None,
        byte_fallback: bool = False,
        fuse_unk: bool = False,
        ignore_merges: bool = False,
        dropout: float | None = None,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        self._init_vocab(vocab, cache_capacity)
        if unk_token is not None and unk_token not in self.vocab:
            raise ValueError(f"BPE: the unknown token {unk_token!r} is not in the vocabulary")
        if dropout is not None and not 0.0 <= dropout <= 1.0:
            raise ValueError(f"BPE: dropout must lie in [0, 1], got {dropout}")
        self.unk_token = unk_token
        self.continuing_subword_prefix = continuing_subword_prefix
        self.end_of_word_suffix = end_of_word_suffix
        self.byte_fallback = byte_fallback
        self.fuse_unk = fuse_unk
        self.ignore_merges = ignore_merges
        self.dropout = dropout
        self.merges = [tuple(m) for m in merges]
        plen = len(continuing_subword_prefix or "")
        # (left id, right id) -> (rank, merged id)
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (a, b) in enumerate(self.merges):
            ia, ib = self.vocab.get(a), self.vocab.get(b)
            if ia is None or ib is None:
                missing = a if ia is None else b
                raise ValueError(
                    f"BPE: merge {rank} ({a!r}, {b!r}) uses {missing!r}, which is not in the vocabulary"
                )
            merged = a + (b[plen:] if plen and b.startswith(continuing_subword_prefix or "") else b)
            im = self.vocab.get(merged)
            if im is None:
                raise ValueError(
                    f"BPE: merge {rank} ({a!r}, {b!r}) gives {merged!r}, which is not in the vocabulary"
                )
            self._ranks.setdefault((ia, ib), (rank, im))

    def tokenize(self, word: str) -> list[Token]:
        if self.dropout:  # stochastic: never cached
            return self._tokenize(word)
        return super().tokenize(word)

    def _initial_symbols(self, word: str) -> tuple[list[int], list[int], list[int]]:
        vocab = self.vocab
        prefix = self.continuing_subword_prefix
        suffix = self.end_of_word_suffix
        ids: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        unk_id = vocab.get(self.unk_token) if self.unk_token is not None else None
        last = len(word) - 1
        prev_unk = False
        for i, ch in enumerate(word):
            s = ch
            if prefix and i > 0:
                s = prefix + s
            if suffix and i == last:
                s = s + suffix
            tid = vocab.get(s)
            if tid is not None:
                ids.append(tid)
                starts.append(i)
                ends.append(i + 1)
                prev_unk = False
                continue
            if self.byte_fallback:
                byte_ids = [vocab.get(f"<0x{b:02X}>") for b in ch.encode("utf-8")]
                if all(b is not None for b in byte_ids):
                    for b in byte_ids:
                        ids.append(b)  # type: ignore[arg-type]
                        starts.append(i)
                        ends.append(i + 1)
                    prev_unk = False
                    continue
            if unk_id is None:
                continue  # no unknown token: the character is dropped
            if self.fuse_unk and prev_unk:
                ends[-1] = i + 1
            else:
                ids.append(unk_id)
                starts.append(i)
                ends.append(i + 1)
            prev_unk = True
        return ids, starts, ends

    def _tokenize(self, word: str) -> list[Token]:
        if self.ignore_merges:
            tid = self.vocab.get(word)
            if tid is not None:
                return [(tid, word, (0, len(word)))]
        ids, starts, ends = self._initial_symbols(word)
        ranks = self._ranks
        dropout = self.dropout
        inf = 1 << 62
        while len(ids) > 1:
            best_rank = inf
            best_i = -1
            best_new = -1
            for i in range(len(ids) - 1):
                r = ranks.get((ids[i], ids[i + 1]))
                if r is not None and r[0] < best_rank:
                    if dropout and random.random() < dropout:
                        continue
                    best_rank, best_i, best_new = r[0], i, r[1]
            if best_i < 0:
                break
            ids[best_i : best_i + 2] = [best_new]
            del starts[best_i + 1]
            del ends[best_i]
        table = self._id_to_token
        return [(i, table[i], (s, e)) for i, s, e in zip(ids, starts, ends)]  # type: ignore[misc]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "BPE",
            "dropout": self.dropout,
            "unk_token": self.unk_token,
            "continuing_subword_prefix": self.continuing_subword_prefix,
            "end_of_word_suffix": self.end_of_word_suffix,
            "fuse_unk": self.fuse_unk,
            "byte_fallback": self.byte_fallback,
            "ignore_merges": self.ignore_merges,
            "vocab": self.vocab,
            "merges": [list(m) for m in self.merges],
        }


# Unknown characters score this much below the least likely piece (SentencePiece's kUnkPenalty).
UNK_PENALTY = 10.0


class Unigram(Model):
    """Unigram language-model segmentation (Kudo 2018).

    Args:
        pieces: ``[(piece, log-probability), ...]``; a piece's id is its position.
        unk_id: id of the unknown piece (``None``: an unsegmentable character is an error).
        byte_fallback: an unknown character becomes its UTF-8 bytes as "<0xAB>" pieces when they exist.

    ``tokenize(word)`` returns the Viterbi segmentation; ``tokenize(word, sample=True, alpha=0.1)`` samples a
    segmentation with probability proportional to ``P(segmentation) ** alpha`` (subword regularisation).
    Consecutive unknown characters become one unknown token whose text is the unknown characters themselves.
    """

    def __init__(
        self,
        pieces: list[tuple[str, float]],
        unk_id: int | None = 0,
        byte_fallback: bool = False,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        vocab: dict[str, int] = {}
        for i, (p, _) in enumerate(pieces):
            vocab.setdefault(p, i)
        self._init_vocab(vocab, cache_capacity)
        self._id_to_token = [p for p, _ in pieces]
        self.pieces = [(p, float(s)) for p, s in pieces]
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise ValueError(f"Unigram: unk_id {unk_id} is outside the {len(pieces)} pieces")
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self._scores: dict[str, tuple[int, float]] = {p: (vocab[p], s) for p, s in self.pieces}
        self.min_score = min((s for _, s in self.pieces), default=0.0)
        self.unk_score = self.min_score - UNK_PENALTY
        self._max_len = max((len(p) for p, _ in self.pieces), default=1)

    @property
    def unk_token(self) -> str | None:
        return None if self.unk_id is None else self.pieces[self.unk_id][0]

    def tokenize(self, word: str, sample: bool = False, alpha: float = 0.1) -> list[Token]:  # type: ignore[override]
        if sample:
            return self._finish(word, self._sample(word, alpha))
        return super().tokenize(word)

    def _tokenize(self, word: str) -> list[Token]:
        return self._finish(word, self._viterbi(word))

    def _edges(self, word: str, s: int) -> list[tuple[int, int, float]]:
        """Pieces starting at ``s``: ``(end, id, score)``, shortest first, with an unknown edge if needed."""
        out: list[tuple[int, int, float]] = []
        scores = self._scores
        has_single = False
        for e in range(s + 1, min(len(word), s + self._max_len) + 1):
            hit = scores.get(word[s:e])
            if hit is not None:
                out.append((e, hit[0], hit[1]))
                if e == s + 1:
                    has_single = True
        if not has_single:
            if self.unk_id is None:
                raise ValueError(
                    f"Unigram: cannot segment {word[s]!r} (no piece for it and no unknown piece)"
                )
            out.append((s + 1, -1, self.unk_score))  # -1: unknown
        return out

    def _viterbi(self, word: str) -> list[tuple[int, int, int]]:
        n = len(word)
        best = [0.0] + [-math.inf] * n
        back: list[tuple[int, int] | None] = [None] * (n + 1)
        for s in range(n):
            if s and back[s] is None:
                continue
            base = best[s]
            for e, tid, score in self._edges(word, s):
                cand = base + score
                if back[e] is None or cand > best[e]:
                    best[e] = cand
                    back[e] = (s, tid)
        path: list[tuple[int, int, int]] = []
        e = n
        while e > 0:
            s, tid = back[e]  # type: ignore[misc]
            path.append((s, e, tid))
            e = s
        path.reverse()
        return path

    def _sample(self, word: str, alpha: float) -> list[tuple[int, int, int]]:
        """Forward-filtering backward-sampling over the lattice, scores scaled by ``alpha``."""
        n = len(word)
        fwd = [0.0] + [-math.inf] * n
        incoming: list[list[tuple[int, int, float]]] = [[] for _ in range(n + 1)]
        for s in range(n):
            if fwd[s] == -math.inf:
                continue
            for e, tid, score in self._edges(word, s):
                w = alpha * score
                incoming[e].append((s, tid, w))
                fwd[e] = _logaddexp(fwd[e], fwd[s] + w)
        path: list[tuple[int, int, int]] = []
        e = n
        while e > 0:
            cands = incoming[e]
            logits = [fwd[s] + w for s, _, w in cands]
            m = max(logits)
            weights = [math.exp(x - m) for x in logits]
            s, tid, _ = random.choices(cands, weights=weights)[0]
            path.append((s, e, tid))
            e = s
        path.reverse()
        return path

    def _finish(self, word: str, path: list[tuple[int, int, int]]) -> list[Token]:
        # Fuse consecutive unknown characters.
        fused: list[tuple[int, int, int]] = []
        for s, e, tid in path:
            if tid == -1 and fused and fused[-1][2] == -1:
                fused[-1] = (fused[-1][0], e, -1)
            else:
                fused.append((s, e, tid))
        out: list[Token] = []
        for s, e, tid in fused:
            piece = word[s:e]
            if tid >= 0:
                out.append((tid, self._id_to_token[tid], (s, e)))  # type: ignore[arg-type]
                continue
            if self.byte_fallback:
                byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in piece.encode("utf-8")]
                if all(b is not None for b in byte_ids):
                    out.extend((b, self._id_to_token[b], (s, e)) for b in byte_ids)  # type: ignore[misc]
                    continue
            out.append((self.unk_id, piece, (s, e)))  # type: ignore[arg-type]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "Unigram",
            "unk_id": self.unk_id,
            "vocab": [[p, s] for p, s in self.pieces],
            "byte_fallback": self.byte_fallback,
        }


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))
