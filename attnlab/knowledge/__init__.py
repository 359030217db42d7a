"""attnlab.knowledge: K-BERT's knowledge layer (Liu et al. 2020), for any encoder of the project.

* :mod:`attnlab.knowledge.graph`: triples and their loaders (K-BERT's ``.spo`` files, WordNet 3.0).
* :mod:`attnlab.knowledge.lookup`: longest-match entity lookup, a cap on triples per entity.
* :mod:`attnlab.knowledge.sentence_tree`: injection, soft and hard positions, the visible matrix.
* :mod:`attnlab.knowledge.visible`: the batched visible matrix, the encoder's 3-D attention mask.
* :mod:`attnlab.knowledge.features`: fine-tuning features (classification, NER) with knowledge.
* :mod:`attnlab.knowledge.datasets`: K-BERT's dataset files (``text_a``/``label`` TSV).
"""

from attnlab.knowledge.graph import KnowledgeGraph, load_graph, load_spo, load_wordnet
from attnlab.knowledge.lookup import EntityLookup, EntityMatch, split_units
from attnlab.knowledge.sentence_tree import SentenceTree, build_sentence_tree, visible_from_ids

__all__ = [
    "EntityLookup",
    "EntityMatch",
    "KnowledgeGraph",
    "SentenceTree",
    "build_sentence_tree",
    "load_graph",
    "load_spo",
    "load_wordnet",
    "split_units",
    "visible_from_ids",
]
