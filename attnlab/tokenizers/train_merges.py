"""The bottom-up merge loop shared by the BPE and WordPiece trainers.

Both trainers start from words split into characters and repeatedly merge one adjacent pair of symbols
into a new symbol. They differ only in which pair they pick:

* BPE (Sennrich et al., 2016, §3.2): the most frequent pair;
* WordPiece (Schuster & Nakajima, 2012; the variant BERT's vocabulary comes from): the pair that most raises
  the likelihood of the training data under a unigram model of symbols, i.e. the highest
  ``freq(ab) / (freq(a) * freq(b))``.

Pair statistics are kept incrementally, as subword-nmt and HF tokenizers do: ``pair -> count`` and
``pair -> words that contain it``; a merge visits only the words that hold the merged pair and updates the
counts of the pairs around each occurrence. The best pair comes from a heap with lazily corrected
entries: a popped entry whose score is stale is pushed again with its current score. That is exact as
long as every pair has an entry whose recorded score is at least its current one:

* BPE: a pair's count can only fall after it was pushed, except for pairs with the new symbol, which are
  pushed when they appear;
* WordPiece: merging ``(x, y)`` lowers ``freq(x)`` and ``freq(y)``, which *raises* the score of every
  pair containing ``x`` or ``y``; those pairs are pushed again (``pairs_of`` indexes them).

Ties are broken towards the pair of smaller symbol ids ``(a, b)``; ids are assigned special tokens first,
then the alphabet in code-point order, then merged symbols in order of creation, as HF tokenizers' BPE
trainer does, so the two agree on merge order wherever a corpus has ties.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

__all__ = ["MergeState", "run_merges"]

_SHIFT = 32  # a pair (a, b) of symbol ids is keyed by the int a << 32 | b: ordered like the tuple
_MASK = (1 << _SHIFT) - 1


class MergeState:
    """Words as lists of symbol ids, with incremental pair statistics.

    Args:
        words: each distinct word as a list of symbol ids (length >= 1).
        counts: the word's count in the corpus.
        track_symbols: also keep symbol frequencies and a ``symbol -> pairs`` index (for WordPiece).
    """

    def __init__(self, words: list[list[int]], counts: list[int], track_symbols: bool = False) -> None:
        self.words = words
        self.counts = counts
        self.track_symbols = track_symbols
        pair_counts: dict[int, int] = {}
        where: dict[int, set[int]] = {}
        sym_counts: dict[int, int] = {}
        for wi, w in enumerate(words):
            c = counts[wi]
            if track_symbols:
                for s in w:
                    sym_counts[s] = sym_counts.get(s, 0) + c
            for i in range(len(w) - 1):
                key = w[i] << _SHIFT | w[i + 1]
                pair_counts[key] = pair_counts.get(key, 0) + c
                ws = where.get(key)
                if ws is None:
                    where[key] = {wi}
                else:
                    ws.add(wi)
        self.pair_counts = pair_counts
        self.where = where
        self.sym_counts = sym_counts
        self.pairs_of: dict[int, set[int]] = {}
        if track_symbols:
            for key in pair_counts:
                self._index_pair(key)

    def _index_pair(self, key: int) -> None:
        a, b = key >> _SHIFT, key & _MASK
        for s in (a, b):
            ps = self.pairs_of.get(s)
            if ps is None:
                self.pairs_of[s] = {key}
            else:
                ps.add(key)

    def merge(self, a: int, b: int, new: int) -> dict[int, int]:
        """Replace every non-overlapping ``a b`` (left to right) by ``new``; return the changed pair counts.

        The returned dict maps pair keys to their count change; the pair ``(a, b)`` itself is removed.
        """
        words, counts, where = self.words, self.counts, self.where
        ab = a << _SHIFT | b
        changes: dict[int, int] = {}
        merged_total = 0
        for wi in where.pop(ab, ()):
            w = words[wi]
            n = len(w)
            if n < 2 or a not in w:
                continue  # a stale entry: an earlier merge consumed the pair in this word
            c = counts[wi]
            out: list[int] = []
            i = 0
            prev_merged = False
            hits = 0
            while i < n:
                if w[i] == a and i + 1 < n and w[i + 1] == b:
                    hits += 1
                    if i > 0 and not prev_merged:
                        k = w[i - 1] << _SHIFT | a
                        changes[k] = changes.get(k, 0) - c
                    if out:
                        k = out[-1] << _SHIFT | new
                        changes[k] = changes.get(k, 0) + c
                        ws = where.get(k)
                        if ws is None:
                            where[k] = {wi}
                        else:
                            ws.add(wi)
                    if i + 2 < n:
                        nxt = w[i + 2]
                        k = b << _SHIFT | nxt
                        changes[k] = changes.get(k, 0) - c
                        if not (nxt == a and i + 3 < n and w[i + 3] == b):
                            k = new << _SHIFT | nxt
                            changes[k] = changes.get(k, 0) + c
                            ws = where.get(k)
                            if ws is None:
                                where[k] = {wi}
                            else:
                                ws.add(wi)
                    out.append(new)
                    i += 2
                    prev_merged = True
                else:
                    out.append(w[i])
                    i += 1
                    prev_merged = False
            if hits:
                words[wi] = out
                merged_total += hits * c
        pair_counts = self.pair_counts
        pair_counts.pop(ab, None)
        changes.pop(ab, None)
        for k, d in changes.items():
            v = pair_counts.get(k, 0) + d
            if v > 0:
                if k not in pair_counts and self.track_symbols:
                    self._index_pair(k)
                pair_counts[k] = v
            else:
                pair_counts.pop(k, None)
                where.pop(k, None)
        if self.track_symbols:
            sc = self.sym_counts
            sc[a] -= merged_total
            sc[b] -= merged_total  # a == b: two symbols consumed per occurrence, subtracted twice
            sc[new] = sc.get(new, 0) + merged_total
        self.merged_total = merged_total
        return changes


class _LikelihoodQueue:
    """The best WordPiece pair, ``freq(ab) / (freq(a) freq(b))``, without re-scoring all pairs per merge.

    Merging ``(x, y)`` lowers ``freq(x)`` and ``freq(y)`` and so raises the score of every pair holding
    them: for a frequent symbol, thousands of pairs per merge. The score factors, which avoids that:

    * every pair is filed under one of its two symbols, its *hub* (the one with more pairs when the pair
      appears); a hub's heap orders its pairs by ``freq(ab) / freq(other)``, which does not involve the
      hub's own frequency;
    * a global heap holds, per hub, its best pair's score ``key / freq(hub)``.

    When ``freq(s)`` falls, the pairs filed under ``s`` keep their order: one global entry is pushed for
    ``s``. Only the pairs where ``s`` is the *other* symbol (few, since hubs are the busy symbols) are
    pushed again. All heaps are lazy: an entry's recorded value is never below the truth (any rise is
    pushed when it happens), stale entries are corrected when they reach the top. The pair chosen is
    exactly the arg max, ties broken towards the smaller ``(a, b)``.
    """

    COMPACT_AT = 500_000  # heap entries (at least 4 per live pair) that trigger a rebuild without stale ones

    def __init__(self, state: MergeState, min_frequency: int) -> None:
        self.state = state
        self.min_count = max(min_frequency, 1)
        self._rebuild()

    def _rebuild(self) -> None:
        state, m = self.state, self.min_count
        self.hub_of: dict[int, int] = {}
        self.heaps: dict[int, list[tuple[float, int]]] = {}
        self.others: dict[int, set[int]] = {}  # symbol -> pairs filed under the other symbol (or (s, s))
        self.top: list[tuple[float, int, int]] = []
        self.entries = 0
        for k, c in state.pair_counts.items():
            if c >= m:
                self._push_pair(k, c)
        self.top.sort()  # a sorted list is a heap

    def _hub(self, k: int) -> int:
        hub = self.hub_of.get(k)
        if hub is None:
            a, b = k >> _SHIFT, k & _MASK
            pairs_of = self.state.pairs_of
            hub = a if len(pairs_of.get(a, ())) >= len(pairs_of.get(b, ())) else b
            self.hub_of[k] = hub
            other = b if hub == a else a
            os_ = self.others.get(other)
            if os_ is None:
                self.others[other] = {k}
            else:
                os_.add(k)
        return hub

    def _push_pair(self, k: int, c: int) -> None:
        """File pair ``k`` (count ``c``) with its exact key, and offer it to the global heap."""
        hub = self._hub(k)
        a, b = k >> _SHIFT, k & _MASK
        sc = self.state.sym_counts
        other = b if hub == a else a
        h = self.heaps.get(hub)
        if h is None:
            h = self.heaps[hub] = []
        heapq.heappush(h, (-(c / sc[other]), k))
        heapq.heappush(self.top, (-(c / (sc[a] * sc[b])), k, hub))
        self.entries += 2

    def _group_best(self, hub: int) -> int | None:
        """The best live pair filed under ``hub`` (stale tops corrected on the way), or ``None``."""
        h = self.heaps.get(hub)
        if not h:
            return None
        pair_counts, sc, m = self.state.pair_counts, self.state.sym_counts, self.min_count
        while h:
            neg, k = h[0]
            c = pair_counts.get(k, 0)
            if c < m:
                heapq.heappop(h)  # gone, or too rare for good: pair counts only fall
                continue
            a, b = k >> _SHIFT, k & _MASK
            key = c / sc[b if hub == a else a]
            if key != -neg:
                heapq.heapreplace(h, (-key, k))
                continue
            return k
        return None

    def _offer_group(self, hub: int) -> None:
        k = self._group_best(hub)
        if k is not None:
            a, b = k >> _SHIFT, k & _MASK
            sc = self.state.sym_counts
            heapq.heappush(self.top, (-(self.state.pair_counts[k] / (sc[a] * sc[b])), k, hub))
            self.entries += 1

    def after_merge(self, a: int, b: int, new: int, changes: dict[int, int]) -> None:
        state = self.state
        pair_counts, m = state.pair_counts, self.min_count
        for k, d in changes.items():
            if d > 0:  # appeared or grew (the pairs around the new symbol): file with the exact key
                c = pair_counts.get(k, 0)
                if c >= m:
                    self._push_pair(k, c)
        for s in {a, b}:
            if state.sym_counts.get(s, 0) <= 0:
                continue  # merged away entirely: all its pairs are gone
            self._offer_group(s)  # its own pairs: same order, higher scores
            ks = self.others.get(s)
            if ks:
                dead = []
                for k in ks:  # pairs where s is the other symbol: their keys rose
                    c = pair_counts.get(k, 0)
                    if c <= 0:
                        dead.append(k)
                    elif c >= m:
                        self._push_pair(k, c)
                ks.difference_update(dead)
        if self.entries > max(4 * len(pair_counts), self.COMPACT_AT):  # drop stale entries now and then
            self._rebuild()

    def pop_best(self) -> int | None:
        """The key of the best pair, or ``None`` when no pair qualifies."""
        top, sc, pair_counts = self.top, self.state.sym_counts, self.state.pair_counts
        while top:
            neg, k, hub = top[0]
            best = self._group_best(hub)
            if best is None:
                heapq.heappop(top)
                continue
            a, b = best >> _SHIFT, best & _MASK
            v = pair_counts[best] / (sc[a] * sc[b])
            if v == -neg and best == k:
                heapq.heappop(top)
                return best
            heapq.heapreplace(top, (-v, best, hub))
        return None


def run_merges(
    state: MergeState,
    id_to_token: list[str],
    token_to_id: dict[str, int],
    vocab_size: int,
    make_token: Callable[[str, str], str],
    min_frequency: int = 0,
    score: str = "frequency",
    max_token_length: int | None = None,
    progress: Any = None,
) -> list[tuple[int, int, int, int]]:
    """Merge pairs until the vocabulary has ``vocab_size`` entries or no pair qualifies.

    Args:
        state: the words and their pair statistics (``track_symbols=True`` for ``score="likelihood"``).
        id_to_token, token_to_id: the vocabulary so far; new symbols are appended to both.
        vocab_size: target number of entries.
        make_token: the string of the merged symbol, from its two parts' strings.
        min_frequency: pairs seen fewer times are never merged.
        score: ``"frequency"`` (BPE) or ``"likelihood"`` (WordPiece).
        max_token_length: merged symbols longer than this (in characters) are skipped.
        progress: a tqdm bar updated once per vocabulary entry added.

    Returns:
        The merges in order, as ``(a, b, new, pair count)``.
    """
    if score not in ("frequency", "likelihood"):
        raise ValueError(f"score must be 'frequency' or 'likelihood', got {score!r}")
    likelihood = score == "likelihood"
    pair_counts = state.pair_counts
    min_count = max(min_frequency, 1)
    queue = _LikelihoodQueue(state, min_frequency) if likelihood else None
    heap: list[tuple[int, int]] = []
    if queue is None:
        heap = [(-c, k) for k, c in pair_counts.items() if c >= min_count]
        heapq.heapify(heap)
    merges: list[tuple[int, int, int, int]] = []
    skipped: set[int] = set()  # pairs refused for length; their count can only fall
    while len(id_to_token) < vocab_size:
        if queue is not None:
            key = queue.pop_best()
            if key is None:
                break
            count = pair_counts[key]
        else:
            if not heap:
                break
            neg, key = heapq.heappop(heap)
            count = pair_counts.get(key, 0)
            if count < min_count:
                continue  # counts of existing pairs only fall: it never qualifies again
            if count != -neg:
                heapq.heappush(heap, (-count, key))
                continue
        if key in skipped:
            continue
        a, b = key >> _SHIFT, key & _MASK
        token = make_token(id_to_token[a], id_to_token[b])
        if max_token_length is not None and len(token) > max_token_length:
            skipped.add(key)
            continue
        new = token_to_id.get(token)
        if new is None:
            new = len(id_to_token)
            id_to_token.append(token)
            token_to_id[token] = new
            if progress is not None:
                progress.update(1)
        merges.append((a, b, new, count))
        changes = state.merge(a, b, new)
        if queue is not None:
            queue.after_merge(a, b, new, changes)
        else:
            for k, d in changes.items():
                if d > 0:
                    c = pair_counts.get(k, 0)
                    if c >= min_count:
                        heapq.heappush(heap, (-c, k))
    return merges
