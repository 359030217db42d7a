"""K-BERT's sentence tree flattened into one sequence (Liu et al. 2020, section 3.2-3.3, Figure 2).

Every matched entity gets its branches (the triples' texts) right after its last token. Three things
describe the result, one entry per token:

- **hard positions**: the index in the flattened sequence (the order of the token embeddings);
- **soft positions**: the position-embedding ids. Sentence tokens count 0, 1, 2, ... as if nothing were
  injected; a branch continues from its entity's last position, and so does the sentence after the
  entity (not from the end of the branch). For "[CLS] Tim Cook is visiting Beijing now" with "Tim Cook
  CEO Apple", "Beijing capital China", "Beijing is_a City" (the paper's Figure 2):

      token  [CLS] Tim Cook CEO Apple is visiting Beijing capital China is_a City now
      hard     0    1   2    3    4    5    6        7       8      9    10   11   12
      soft     0    1   2    3    4    3    4        5       6      7     6    7    6

- **the visible matrix** (``visible[i][j]``: token i may attend to token j): sentence tokens see every
  sentence token; an injected token sees its own branch and the tokens of its entity; the entity's tokens
  also see their own branches (that is how the knowledge reaches the sentence), no other sentence token
  sees a branch, and branches do not see each other. It is stored compactly as ``branch_ids`` (0 for
  the sentence, k for the k-th branch) and ``entity_ids`` (k for the tokens of the k-th matched entity and
  for its branches' tokens, 0 elsewhere); `visible_from_ids` (and, batched, `attnlab.knowledge.visible`)
  expands them.

Overflow: when the flattened tree is longer than ``max_length``, branches are dropped first (the last ones
in the sentence first) and ``dropped_branches`` says how many; only then is the sentence cut
(``cut_units``). An entity that alone does not fit is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from attnlab.knowledge.lookup import EntityMatch

T = TypeVar("T")  # a token: an id (int) or, in tests and pictures, a string


@dataclass
class SentenceTree(Generic[T]):
    """A flattened sentence tree: one entry per token in every list."""

    tokens: list[T]
    soft_positions: list[int]
    branch_ids: list[int]  # 0 = sentence (special tokens included), k >= 1 = the k-th kept branch
    entity_ids: list[int]  # k >= 1: the k-th entity's tokens and its branches' tokens; 0 elsewhere
    unit_ids: list[int | None]  # the sentence unit (word) a token comes from; None: special or injected
    dropped_branches: int = 0  # branches left out because the tree was longer than max_length
    cut_units: int = 0  # sentence units left out after every branch had been dropped
    matches: list[EntityMatch] = field(default_factory=list)  # the entities found (before any dropping)

    @property
    def hard_positions(self) -> list[int]:
        return list(range(len(self.tokens)))

    @property
    def injected(self) -> list[bool]:
        return [b != 0 for b in self.branch_ids]

    def visible_matrix(self) -> list[list[bool]]:
        return visible_from_ids(self.branch_ids, self.entity_ids)

    def __len__(self) -> int:
        return len(self.tokens)


def visible_from_ids(branch_ids: Sequence[int], entity_ids: Sequence[int]) -> list[list[bool]]:
    """``visible[i][j]``: same branch (the sentence is branch 0), or one is a branch of the entity the
    other belongs to."""
    n = len(branch_ids)
    out = []
    for i in range(n):
        bi, ei = branch_ids[i], entity_ids[i]
        row = []
        for j in range(n):
            bj, ej = branch_ids[j], entity_ids[j]
            row.append(bi == bj or (ei != 0 and ei == ej and (bi == 0) != (bj == 0)))
        out.append(row)
    return out


def build_sentence_tree(
    pieces: Sequence[Sequence[T]],
    matches: Sequence[EntityMatch],
    branch_tokens: Sequence[Sequence[Sequence[T]]],
    max_length: int,
    cls: T | None = None,
    sep: T | None = None,
) -> SentenceTree[T]:
    """Flatten a sentence tree.

    Args:
        pieces: each sentence unit's tokens (a unit may be several sub-word tokens, or none).
        matches: the entities (`EntityLookup.find` over the same units), non-overlapping, in order.
        branch_tokens: for each match, each of its branches' tokens.
        max_length: tokens at most, special tokens included.
        cls, sep: the special tokens put first and last (None: none).
    """
    specials = (cls is not None) + (sep is not None)
    budget = max_length - specials
    if budget < 1:
        raise ValueError(f"max_length {max_length} leaves no room beside the {specials} special tokens")
    if len(branch_tokens) != len(matches):
        raise ValueError(f"{len(matches)} matches but branch tokens for {len(branch_tokens)}")
    # Sentence units that fit (the sentence is cut only when it alone is too long).
    total, kept_units = 0, 0
    for p in pieces:
        if total + len(p) > budget:
            break
        total += len(p)
        kept_units += 1
    cut_units = len(pieces) - kept_units
    for m in matches:
        n = sum(len(p) for p in pieces[m.start : m.end])
        if n > budget:
            raise ValueError(
                f"entity {m.subject!r} is {n} tokens long, more than max_length {max_length} allows "
                f"({budget} besides the special tokens): raise max_length or leave it out of the graph"
            )
    # Branches in sentence order while they fit; the rest (the latest ones) are dropped.
    keep: list[list[bool]] = []
    dropped = 0
    full = False
    for m, branches in zip(matches, branch_tokens):
        flags = []
        for b in branches:
            ok = not full and m.end <= kept_units and len(b) > 0 and total + len(b) <= budget
            if ok:
                total += len(b)
            elif len(b) > 0:
                full = True  # every later branch is dropped too: the kept ones are a prefix
                dropped += 1
            flags.append(ok)
        keep.append(flags)

    tokens: list[T] = []
    soft: list[int] = []
    branch_ids: list[int] = []
    entity_ids: list[int] = []
    unit_ids: list[int | None] = []

    def emit(token: T, position: int, branch: int, entity: int, unit: int | None) -> None:
        tokens.append(token)
        soft.append(position)
        branch_ids.append(branch)
        entity_ids.append(entity)
        unit_ids.append(unit)

    position = -1
    if cls is not None:
        position += 1
        emit(cls, position, 0, 0, None)
    match_at = {m.start: k for k, m in enumerate(matches) if m.end <= kept_units}
    branch_count = 0
    u = 0
    while u < kept_units:
        k = match_at.get(u)
        if k is None:
            for t in pieces[u]:
                position += 1
                emit(t, position, 0, 0, u)
            u += 1
            continue
        m = matches[k]
        entity = k + 1
        for v in range(m.start, m.end):
            for t in pieces[v]:
                position += 1
                emit(t, position, 0, entity, v)
        for b, ok in zip(branch_tokens[k], keep[k]):
            if not ok:
                continue
            branch_count += 1
            for offset, t in enumerate(b, start=1):
                emit(t, position + offset, branch_count, entity, None)
        u = m.end
    if sep is not None:
        position += 1
        emit(sep, position, 0, 0, None)
    return SentenceTree(tokens, soft, branch_ids, entity_ids, unit_ids, dropped, cut_units, list(matches))


__all__ = ["SentenceTree", "build_sentence_tree", "visible_from_ids"]
