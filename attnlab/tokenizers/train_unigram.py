"""Training a unigram language-model vocabulary (Kudo, 2018, "Subword Regularization", §3.2).

A word's probability is the sum over its segmentations ``x = (x_1 .. x_M)`` of ``prod_i p(x_i)``; the
vocabulary and the ``p`` are fitted as SentencePiece does:

1. **Seed** — every character plus the most frequent substrings (up to ``max_piece_length`` characters,
   seen at least twice), ranked by ``frequency * length``; ``log p`` starts at their normalised score.
2. **EM** — the E-step runs forward-backward over each word's lattice of pieces and adds the expected
   number of occurrences of every piece (times the word's count); the M-step re-estimates
   ``log p = digamma(n_piece) - digamma(sum n)`` (SentencePiece's Bayesian/variational EM, a sparse prior
   that drives rare pieces to zero) and drops pieces expected fewer than 0.5 times.
3. **Prune** — each piece's loss is how much the corpus log-likelihood drops if it is removed and its
   Viterbi occurrences are re-spelt with its best alternative segmentation; the pieces with the smallest
   loss go, keeping ``max(target, shrinking_factor * size)``. Pieces that Viterbi never uses, or that
   Viterbi itself splits, go first.
4. Repeat 2-3 until the vocabulary is within 10% of the target, then keep every character and the
   highest-scoring pieces up to exactly the target size.

Single characters are never pruned (Kudo §3.2: "we always keep the subwords consisting of a single
character to avoid out-of-vocabulary"); during EM a character whose expected count falls under the
threshold keeps a floor count instead of being dropped, so every word stays segmentable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attnlab.tokenizers.models import Unigram
from attnlab.tokenizers.train_counting import PreTokenize
from attnlab.tokenizers.trainer_base import TokenizerTrainer

__all__ = ["UnigramTrainer", "train_unigram", "digamma", "viterbi", "forward_backward", "prefix_table"]

_EXPECTED_THRESHOLD = 0.5  # SentencePiece's kExpectedFrequencyThreshold
_CHAR_FLOOR = 1e-3  # expected count given to characters under the threshold (their log p is then ~ -1000)
_DESIRED_SLACK = 1.1  # EM/prune rounds stop within 10% of the target, as SentencePiece does


def digamma(x: float) -> float:
    """The digamma function psi(x) for x > 0 (recurrence up to x >= 6, then the asymptotic series)."""
    if x <= 0:
        raise ValueError(f"digamma needs x > 0, got {x}")
    result = 0.0
    while x < 6.0:
        result -= 1.0 / x
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    # psi(x) ~ ln x - 1/2x - 1/12x^2 + 1/120x^4 - 1/252x^6 + 1/240x^8 - 1/132x^10
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return result + math.log(x) - 0.5 * inv - series


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


def prefix_table(ids: Mapping[str, int]) -> dict[str, int]:
    """``ids`` plus every proper prefix of a piece mapped to -1: one look-up tells the lattice whether a
    substring is a piece, and whether a longer one could still be (a miss ends the extension)."""
    table: dict[str, int] = {}
    for p in ids:
        for j in range(1, len(p)):
            table.setdefault(p[:j], -1)
    table.update(ids)
    return table


def _lattice(
    word: str, ids: Mapping[str, int], max_len: int, table: Mapping[str, int] | None = None
) -> list[list[tuple[int, int]]]:
    """``ends[j]`` = the ``(start, piece id)`` of every vocabulary piece that ends at character ``j``."""
    n = len(word)
    ends: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    if table is not None:
        get = table.get
        for i in range(n):
            for j in range(i + 1, min(n, i + max_len) + 1):
                pid = get(word[i:j])
                if pid is None:
                    break
                if pid >= 0:
                    ends[j].append((i, pid))
        return ends
    get = ids.get
    for i in range(n):
        for j in range(i + 1, min(n, i + max_len) + 1):
            pid = get(word[i:j])
            if pid is not None:
                ends[j].append((i, pid))
    return ends


def viterbi(
    word: str,
    ids: Mapping[str, int],
    scores: list[float],
    max_len: int,
    exclude: int = -1,
    table: Mapping[str, int] | None = None,
) -> tuple[float, list[int]]:
    """The best segmentation of ``word``: (total log p, piece ids). ``exclude`` is a piece id not to use.

    Returns ``(-inf, [])`` when the word cannot be segmented.
    """
    ends = _lattice(word, ids, max_len, table)
    n = len(word)
    best = [-math.inf] * (n + 1)
    back: list[tuple[int, int]] = [(-1, -1)] * (n + 1)
    best[0] = 0.0
    for j in range(1, n + 1):
        for i, pid in ends[j]:
            if pid == exclude or best[i] == -math.inf:
                continue
            s = best[i] + scores[pid]
            if s > best[j]:
                best[j] = s
                back[j] = (i, pid)
    if best[n] == -math.inf:
        return -math.inf, []
    out: list[int] = []
    j = n
    while j > 0:
        i, pid = back[j]
        out.append(pid)
        j = i
    out.reverse()
    return best[n], out


def forward_backward(
    word: str,
    ids: Mapping[str, int],
    scores: list[float],
    max_len: int,
    weight: float,
    expected: list[float],
    table: Mapping[str, int] | None = None,
    linear: tuple[list[float], float] | None = None,
) -> float:
    """Add ``weight`` times the expected count of each piece in ``word`` to ``expected``; return log Z.

    ``linear = (q, k)`` with ``q[pid] = exp(scores[pid] + k * len(piece))`` runs the recursions on plain
    probabilities (several times faster than log-space): every segmentation of the word covers its ``n``
    characters, so the ``exp(k)`` per character scales all of them by ``exp(k n)`` and leaves the
    posteriors unchanged, while keeping products near 1. Log space is the fallback when ``Z`` still under-
    or overflows.
    """
    ends = _lattice(word, ids, max_len, table)
    n = len(word)
    if linear is not None:
        q, k = linear
        alpha_l = [0.0] * (n + 1)
        alpha_l[0] = 1.0
        for j in range(1, n + 1):
            a_sum = 0.0
            for i, pid in ends[j]:
                a_sum += alpha_l[i] * q[pid]
            alpha_l[j] = a_sum
        zl = alpha_l[n]
        if 1e-280 < zl < 1e280:
            beta_l = [0.0] * (n + 1)
            beta_l[n] = 1.0
            scale = weight / zl
            for j in range(n, 0, -1):
                bj = beta_l[j]
                if bj == 0.0:
                    continue
                for i, pid in ends[j]:
                    t = q[pid] * bj
                    beta_l[i] += t
                    expected[pid] += scale * alpha_l[i] * t
            return math.log(zl) - k * n
    alpha = [-math.inf] * (n + 1)
    alpha[0] = 0.0
    for j in range(1, n + 1):
        a = -math.inf
        for i, pid in ends[j]:
            if alpha[i] != -math.inf:
                a = _logaddexp(a, alpha[i] + scores[pid])
        alpha[j] = a
    z = alpha[n]
    if z == -math.inf:
        return z
    beta = [-math.inf] * (n + 1)
    beta[n] = 0.0
    for j in range(n, 0, -1):
        if beta[j] == -math.inf:
            continue
        bj = beta[j]
        for i, pid in ends[j]:
            if alpha[i] == -math.inf:
                continue
            s = scores[pid]
            beta[i] = _logaddexp(beta[i], s + bj)
            expected[pid] += weight * math.exp(alpha[i] + s + bj - z)
    return z


def _seed(
    counts: Mapping[str, int], alphabet: list[str], max_len: int, seed_size: int
) -> list[tuple[str, float]]:
    """Characters plus the top substrings by ``frequency * length``, as ``(piece, log p)``."""
    allowed = set(alphabet)
    char_freq = dict.fromkeys(alphabet, 0)
    sub_freq: dict[str, int] = {}
    for word, c in counts.items():
        n = len(word)
        for ch in word:
            if ch in char_freq:
                char_freq[ch] += c
        for i in range(n):
            for j in range(i + 2, min(n, i + max_len) + 1):
                s = word[i:j]
                sub_freq[s] = sub_freq.get(s, 0) + c
    if len(allowed) < len(set("".join(counts))):
        sub_freq = {s: f for s, f in sub_freq.items() if set(s) <= allowed}
    ranked = sorted(((f * len(s), s) for s, f in sub_freq.items() if f >= 2), key=lambda x: (-x[0], x[1]))
    ranked = ranked[: max(0, seed_size - len(alphabet))]
    seed = [(ch, float(max(f, 1))) for ch, f in char_freq.items()] + [(s, float(sc)) for sc, s in ranked]
    logsum = math.log(sum(f for _, f in seed))
    return [(p, math.log(f) - logsum) for p, f in seed]


def _em_step(
    pieces: list[tuple[str, float]], counts: Mapping[str, int], chars: set[str], max_len: int
) -> tuple[list[tuple[str, float]], float]:
    """One E-step + M-step. Returns the re-estimated pieces and the objective (mean -log p per word)."""
    ids = {p: i for i, (p, _) in enumerate(pieces)}
    scores = [s for _, s in pieces]
    table = prefix_table(ids)
    # Linear-space scaling: the median cost per character of a piece keeps typical words' Z near 1.
    per_char = sorted(-s / len(p) for p, s in pieces)[len(pieces) // 2]
    q = [math.exp(s + per_char * len(p)) for p, s in pieces]
    expected = [0.0] * len(pieces)
    total, objective = 0, 0.0
    for word, c in counts.items():
        z = forward_backward(word, ids, scores, max_len, c, expected, table, (q, per_char))
        if z != -math.inf:
            objective -= c * z
            total += c
    kept: list[tuple[str, float]] = []
    for (p, _), f in zip(pieces, expected):
        if f < _EXPECTED_THRESHOLD:
            if p not in chars:
                continue
            f = max(f, _CHAR_FLOOR)
        kept.append((p, f))
    logsum = digamma(sum(f for _, f in kept))
    return [(p, digamma(f) - logsum) for p, f in kept], objective / max(total, 1)


def _prune(
    pieces: list[tuple[str, float]], counts: Mapping[str, int], chars: set[str], max_len: int, keep: int
) -> list[tuple[str, float]]:
    """Drop the pieces whose removal costs the least likelihood, keeping ``keep`` of them (chars always)."""
    ids = {p: i for i, (p, _) in enumerate(pieces)}
    scores = [s for _, s in pieces]
    table = prefix_table(ids)
    # Alternatives: how each piece would be spelt without itself; pieces Viterbi splits are removable.
    removable = [False] * len(pieces)
    alternatives: list[list[int]] = [[] for _ in pieces]
    for pid, (p, _) in enumerate(pieces):
        if p in chars:
            continue
        _, best = viterbi(p, ids, scores, max_len, table=table)
        if len(best) >= 2:
            removable[pid] = True
        else:
            _, alt = viterbi(p, ids, scores, max_len, exclude=pid, table=table)
            alternatives[pid] = alt
    # Viterbi frequencies over the corpus.
    freq = [0.0] * len(pieces)
    total_words = 0
    for word, c in counts.items():
        _, seg = viterbi(word, ids, scores, max_len, table=table)
        total_words += c
        for pid in seg:
            freq[pid] += c
    total = sum(freq)
    logsum = math.log(total)
    kept: list[tuple[str, float]] = []
    candidates: list[tuple[float, int]] = []
    for pid, (p, s) in enumerate(pieces):
        if p in chars:
            kept.append((p, s))
        elif removable[pid] or freq[pid] == 0:
            continue
        elif not alternatives[pid]:
            kept.append((p, s))
        else:
            alt = alternatives[pid]
            f = freq[pid]
            logprob = math.log(f) - logsum
            logsum_alt = math.log(total + f * (len(alt) - 1))
            logprob_alt = sum(math.log(freq[a] + f) - logsum_alt for a in alt)
            loss = f / total_words * (logprob - logprob_alt)  # SentencePiece weighs by F = freq / #words
            candidates.append((loss, pid))
    candidates.sort(key=lambda lp: (-lp[0], pieces[lp[1]][0]))
    for _, pid in candidates:
        if len(kept) >= keep:
            break
        kept.append(pieces[pid])
    order = {p: i for i, (p, _) in enumerate(pieces)}
    kept.sort(key=lambda ps: order[ps[0]])
    return kept


def train_unigram(
    counts: Mapping[str, int],
    alphabet: list[str],
    size: int,
    max_piece_length: int = 16,
    seed_size: int = 1_000_000,
    shrinking_factor: float = 0.75,
    n_sub_iterations: int = 2,
    show_progress: bool = False,
) -> list[tuple[str, float]]:
    """Train ``size`` pieces (every character of ``alphabet`` among them) on ``{word: count}``.

    Returns ``(piece, log p)`` pairs by decreasing score. Fewer than ``size`` pieces
    come back only when the corpus has fewer distinct substrings.
    """
    if size < len(alphabet):
        raise ValueError(f"size={size} is smaller than the alphabet ({len(alphabet)} characters)")
    chars = set(alphabet)
    pieces = _seed(counts, alphabet, max_piece_length, seed_size)
    desired = int(size * _DESIRED_SLACK)
    progress: Any = None
    if show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(desc="unigram EM", leave=False, unit="round")
    try:
        while True:
            for _ in range(n_sub_iterations):
                pieces, objective = _em_step(pieces, counts, chars, max_piece_length)
            if progress is not None:
                progress.set_postfix(size=len(pieces), objective=f"{objective:.3f}")
                progress.update(1)
            if len(pieces) <= desired:
                break
            keep = max(desired, int(shrinking_factor * len(pieces)))
            new = _prune(pieces, counts, chars, max_piece_length, keep)
            if len(new) == len(pieces):  # nothing removable left
                break
            pieces = new
    finally:
        if progress is not None:
            progress.close()
    # Finalise: every character, then the best-scoring pieces up to exactly `size`.
    char_pieces = [(p, s) for p, s in pieces if p in chars]
    present = {p for p, _ in char_pieces}
    floor = min(s for _, s in pieces) - 1.0
    char_pieces += [(c, floor) for c in alphabet if c not in present]
    others = sorted(((p, s) for p, s in pieces if p not in chars), key=lambda ps: (-ps[1], ps[0]))
    final = others[: size - len(char_pieces)] + char_pieces
    final.sort(key=lambda ps: (-ps[1], ps[0]))
    return final


class UnigramTrainer(TokenizerTrainer):
    """Unigram language-model vocabulary (Kudo, 2018), trained by EM and pruned by loss.

    Args:
        unk_token: the unknown piece (a special token; the model's ``unk_id``).
        max_piece_length: longest piece, in characters (SentencePiece: 16).
        seed_size: pieces in the seed vocabulary (SentencePiece: 1,000,000).
        shrinking_factor: fraction of pieces kept per pruning round (SentencePiece: 0.75).
        n_sub_iterations: EM iterations between prunings (SentencePiece: 2).
        byte_fallback: passed to the model.
        See :class:`~attnlab.tokenizers.trainer_base.TokenizerTrainer` for the rest; ``min_frequency`` drops
        rarer words before training.

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
        pieces = self.learn(word_counts)
        unk_id = self.special_tokens.index(self.unk_token) if self.unk_token is not None else None
        return Unigram(pieces, unk_id=unk_id, byte_fallback=self.byte_fallback)
