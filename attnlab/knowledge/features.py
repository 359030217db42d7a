"""Fine-tuning features with knowledge injected (K-BERT): the task's features, each a sentence tree.

`KnowledgeInjector` turns classification examples (single sentences) and token-classification
examples (NER) into `attnlab.tasks.features.Feature` s whose inputs carry, besides ``input_ids`` (hard
positions) and ``attention_mask``:

- ``position_ids``: the soft positions (the encoder's position embeddings read them);
- ``branch_ids`` and ``entity_ids``: the compact visible matrix, expanded by the injector's ``collate``
  (`attnlab.knowledge.visible`) into a (B, T, T) ``attention_mask`` that every layer applies.

The injector is a feature builder (`attnlab.tasks.feature_builder`): ``FinetuneConfig.knowledge`` and
``evaluate_directory(knowledge=...)`` take it in place of BERT's features, and the run knows no more of it.

With ``visible_matrix=False`` (the paper's ablation, section 4.4) the branches are injected with their
soft positions but every token sees every token. Injected tokens are never labelled (-100) and have no
word id, so NER scoring and `attnlab.tasks.ner_alignment` see only the sentence's words.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.knowledge.graph import load_graph
from attnlab.knowledge.lookup import EntityLookup, split_units
from attnlab.knowledge.sentence_tree import SentenceTree, build_sentence_tree
from attnlab.knowledge.visible import visible_matrix
from attnlab.tasks.features import Feature, FeatureReport, _word_spans, collate, token_word_ids

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


@dataclass
class InjectionStats:
    """What injection did over a set of examples (logged; the experiment prints it)."""

    examples: int = 0
    entities: int = 0  # matched entity spans
    branches: int = 0  # injected branches
    dropped_branches: int = 0  # left out because the tree was longer than max_length
    cut_sentences: int = 0  # sentences cut after every branch had been dropped
    tokens: int = 0  # flattened tokens, special tokens included
    sentence_tokens: int = 0

    def summary(self) -> str:
        return (
            f"K-BERT injection over {self.examples} examples: {self.entities} entities matched, "
            f"{self.branches} branches injected ({self.tokens - self.sentence_tokens} tokens), "
            f"{self.dropped_branches} branches dropped to fit max_length, {self.cut_sentences} sentences cut"
        )


@dataclass
class KnowledgeInjector:
    """A graph lookup and how its knowledge enters the model."""

    lookup: EntityLookup
    visible_matrix: bool = True  # False: the ablation "without the visible matrix" (all tokens see all)
    stats: InjectionStats = field(default_factory=InjectionStats)
    _branch_cache: dict[str, list[int]] = field(default_factory=dict, repr=False)

    # -- one sentence -----------------------------------------------------------------------------
    def _branch_ids(self, tokenizer: Any, text: str) -> list[int]:
        ids = self._branch_cache.get(text)
        if ids is None:
            ids = list(tokenizer.encode(text, add_special_tokens=False).ids)
            self._branch_cache[text] = ids
        return ids

    def tree(self, tokenizer: Any, units: Sequence[str], max_length: int) -> SentenceTree[int]:
        """The flattened tree of one sentence given as units (words), with [CLS] and [SEP] around it."""
        text, starts, ends = _word_spans(units)
        saved = tokenizer.truncation, tokenizer.padding
        try:
            tokenizer.no_truncation()
            tokenizer.no_padding()
            e = tokenizer.encode(text, add_special_tokens=False)
        finally:
            tokenizer.truncation, tokenizer.padding = saved
        pieces: list[list[int]] = [[] for _ in units]
        for tid, w in zip(e.ids, token_word_ids(e.offsets, [0] * len(e.ids), starts, ends)):
            if w is not None:
                pieces[w].append(tid)
        matches = self.lookup.find(units)
        branches = [[self._branch_ids(tokenizer, b) for b in m.branches] for m in matches]
        cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        if cls is None or sep is None:
            raise ValueError("K-BERT features need a BERT-style tokenizer with [CLS] and [SEP] tokens")
        tree = build_sentence_tree(pieces, matches, branches, max_length, cls=cls, sep=sep)
        s = self.stats
        s.examples += 1
        s.entities += len(matches)
        s.branches += max(tree.branch_ids, default=0)  # branches are numbered 1..k
        s.dropped_branches += tree.dropped_branches
        s.cut_sentences += tree.cut_units > 0
        s.tokens += len(tree)
        s.sentence_tokens += sum(1 for b in tree.branch_ids if b == 0)
        return tree

    def _inputs(self, tree: SentenceTree[int], with_token_types: bool) -> dict[str, Any]:
        n = len(tree)
        inputs: dict[str, Any] = {"input_ids": list(tree.tokens), "attention_mask": [1] * n}
        if with_token_types:
            inputs["token_type_ids"] = [0] * n
        inputs["position_ids"] = list(tree.soft_positions)
        if self.visible_matrix:
            inputs["branch_ids"] = list(tree.branch_ids)
            inputs["entity_ids"] = list(tree.entity_ids)
        return inputs

    def _count(self, report: FeatureReport, tree: SentenceTree[int], guid: str) -> None:
        if tree.dropped_branches:
            report.count("branches_dropped_for_length", guid)
        if tree.cut_units:
            report.count("sentence_cut", guid)

    # -- features per task kind --------------------------------------------------------------------
    def classification_features(
        self,
        tokenizer: Any,
        examples: Sequence[Any],
        max_length: int,
        label_to_id: Mapping[str, int] | None,
        with_token_types: bool,
        report: FeatureReport,
    ) -> list[Feature]:
        """Single-sentence classification (K-BERT's sentiment tasks). Sentence pairs are not injected."""
        features = []
        for i, ex in enumerate(examples):
            if getattr(ex, "text_b", None):
                raise ValueError(
                    f"{ex.guid}: K-BERT injection here handles single sentences; this task has sentence pairs"
                )
            report.examples += 1
            units = split_units(ex.text_a)
            if len(units) > 4 * max_length:  # a unit is at least one token: the rest cannot fit
                units = units[: 4 * max_length]
            tree = self.tree(tokenizer, units, max_length)
            self._count(report, tree, ex.guid)
            inputs = self._inputs(tree, with_token_types)
            if ex.label is not None and label_to_id is not None:
                if str(ex.label) not in label_to_id:
                    raise ValueError(
                        f"{ex.guid}: unknown label {ex.label!r}; expected one of {sorted(label_to_id)}"
                    )
                inputs["labels"] = label_to_id[str(ex.label)]
            features.append(Feature(inputs, i, ex.guid))
        report.features += len(features)
        self.log()
        return features

    def token_features(
        self,
        tokenizer: Any,
        examples: Sequence[Any],
        label_to_id: Mapping[str, int],
        max_length: int,
        with_token_types: bool,
        report: FeatureReport,
    ) -> list[Feature]:
        """NER: each sentence's tree; the first token of each word carries its tag, injected tokens -100."""
        features = []
        for i, ex in enumerate(examples):
            report.examples += 1
            tree = self.tree(tokenizer, list(ex.words), max_length)
            self._count(report, tree, ex.guid)
            inputs = self._inputs(tree, with_token_types)
            word_ids = tree.unit_ids
            if ex.tags:
                labels, previous = [], None
                for w in word_ids:
                    if w is not None and w != previous and ex.tags[w] not in label_to_id:
                        raise ValueError(
                            f"{ex.guid}: unknown tag {ex.tags[w]!r}; expected one of {sorted(label_to_id)}"
                        )
                    labels.append(IGNORE_INDEX if w is None or w == previous else label_to_id[ex.tags[w]])
                    previous = w if w is not None else previous
                inputs["labels"] = labels
            features.append(Feature(inputs, i, ex.guid, word_ids=list(word_ids)))
        report.features += len(features)
        self.log()
        return features

    def log(self) -> None:
        (logger.warning if self.stats.dropped_branches else logger.info)("%s", self.stats.summary())

    # -- the feature builder's interface (attnlab.tasks.feature_builder) ------------------------------
    def build(
        self, spec: Any, tokenizer: Any, examples: Sequence[Any], labels: Sequence[str] | None, *,
        training: bool, max_length: int, with_token_types: bool, regression: bool = False, **unused: Any,
    ) -> tuple[list[Feature], FeatureReport]:  # fmt: skip
        """The features of a single-sentence classification or NER task (``spec``, a `TaskSpec`); QA's
        options (``stride``, ``max_query_length``) do not apply, and training features are as dev's."""
        report = FeatureReport(spec.name)
        label_to_id = {name: i for i, name in enumerate(labels)} if labels else None
        if spec.kind == "classification" and not regression:
            feats = self.classification_features(
                tokenizer, examples, max_length, label_to_id, with_token_types, report
            )
        elif spec.kind == "token":
            feats = self.token_features(
                tokenizer, examples, label_to_id or {}, max_length, with_token_types, report
            )
        else:
            raise ValueError(f"{spec.name}: knowledge injection (--kg) supports classification and NER tasks")
        report.log()
        return feats, report

    def collate(self, features: Sequence[Feature], pad_id: int = 0) -> dict[str, torch.Tensor]:
        """`attnlab.tasks.features.collate`, then the sentence trees' visible matrix as a (B, T, T)
        ``attention_mask`` (padding belongs to no branch: -1)."""
        batch = collate(features, pad_id, pads={"branch_ids": -1})
        if "branch_ids" in batch:
            batch["attention_mask"] = visible_matrix(
                batch.pop("branch_ids"), batch.pop("entity_ids"), batch.get("attention_mask")
            )
        return batch


def load_injector(
    path: str, max_triples: int = 2, with_predicate: bool = True, visible_matrix: bool = True
) -> KnowledgeInjector:
    """A `KnowledgeInjector` over the graph at ``path`` (`attnlab.knowledge.graph.load_graph`)."""
    kg = load_graph(path)
    logger.info("%s", kg.summary())
    return KnowledgeInjector(EntityLookup(kg, max_triples, with_predicate), visible_matrix)


__all__ = ["InjectionStats", "KnowledgeInjector", "load_injector"]
