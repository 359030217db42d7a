"""Entity lookup: which spans of a sentence name a subject of the knowledge graph (K-BERT's K-Query).

A sentence is a sequence of *units*: the words a task gives (NER), or `split_units` of a text (a CJK
character is a unit, a run of letters or digits is a unit, any other non-space character is one), the
same split BERT's basic tokenizer makes before WordPiece. Subjects are split the same way and put in a
trie; `EntityLookup.find` scans left to right and takes the *longest* subject starting at each position
(K-BERT segments the sentence with the graph's names as a user dictionary, which prefers long names the
same way), then continues after it: matches never overlap.

Each match carries at most ``max_triples`` branches (K-BERT's ``max_entities``, 2 in its code), in the
graph's order. A branch's text is ``predicate + joiner + object`` or, with ``with_predicate=False``, the
object alone (useful when a graph has a single predicate, as Medical.spo's 类别 "category").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attnlab.knowledge.graph import KnowledgeGraph, _is_cjk

_END = ""  # trie key marking the end of a subject (no unit is empty)


def split_units(text: str) -> list[str]:
    """``"Tim Cook visits 北京."`` -> ``["Tim", "Cook", "visits", "北", "京", "."]``."""
    units: list[str] = []
    word: list[str] = []
    for ch in text:
        if ch.isalnum() and not _is_cjk(ch):
            word.append(ch)
            continue
        if word:
            units.append("".join(word))
            word = []
        if ch.isspace() or unicodedata.category(ch).startswith("C"):
            continue
        units.append(ch)
    if word:
        units.append("".join(word))
    return units


@dataclass(frozen=True)
class EntityMatch:
    """Units ``[start, end)`` of the sentence name ``subject``; ``branches``: the texts injected after it."""

    start: int
    end: int
    subject: str
    branches: tuple[str, ...]


class EntityLookup:
    """Longest-match lookup of a graph's subjects over a sentence's units.

    ``max_triples``: branches per entity (the cap; the first ones in the graph's order). ``with_predicate``:
    a branch reads "predicate object" (the paper's "CEO Apple") or the object alone.
    """

    def __init__(
        self,
        graph: KnowledgeGraph,
        max_triples: int = 2,
        with_predicate: bool = True,
        split: Callable[[str], list[str]] = split_units,
    ) -> None:
        if isinstance(max_triples, bool) or not isinstance(max_triples, int) or max_triples < 1:
            raise ValueError(f"EntityLookup: max_triples must be an int >= 1, got {max_triples!r}")
        self.graph = graph
        self.max_triples = max_triples
        self.with_predicate = with_predicate
        self.split = split
        self.lowercase = graph.lowercase
        self.joiner = graph.joiner
        self._trie: dict = {}
        self.max_units = 0
        for subject in graph.triples:
            units = split(subject.lower() if self.lowercase else subject)
            if not units:
                continue
            node = self._trie
            for u in units:
                node = node.setdefault(u, {})
            node.setdefault(_END, subject)  # the first subject that splits so wins
            self.max_units = max(self.max_units, len(units))

    def branches(self, subject: str) -> tuple[str, ...]:
        """The texts injected after ``subject``: at most ``max_triples`` of its (predicate, object) pairs."""
        pairs = self.graph.get(subject)[: self.max_triples]
        if self.with_predicate:
            return tuple(f"{p}{self.joiner}{o}" for p, o in pairs)
        return tuple(o for _, o in pairs)

    def find(self, units: Sequence[str]) -> list[EntityMatch]:
        """Non-overlapping matches, left to right, the longest subject at each position."""
        keys = [u.lower() for u in units] if self.lowercase else list(units)
        out: list[EntityMatch] = []
        i, n = 0, len(keys)
        while i < n:
            node, best_end, best_subject = self._trie, 0, None
            j = i
            while j < n and keys[j] in node:
                node = node[keys[j]]
                j += 1
                if _END in node:
                    best_end, best_subject = j, node[_END]
            if best_subject is None:
                i += 1
                continue
            out.append(EntityMatch(i, best_end, best_subject, self.branches(best_subject)))
            i = best_end
        return out


__all__ = ["EntityLookup", "EntityMatch", "split_units"]
