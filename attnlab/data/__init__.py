"""attnlab.data: pre-training corpora from text files to masked batches (see docs/architecture.md).

read_documents ─► prepare_shards ─► ShardedCorpus ─► PretrainingInstances ─► MaskedDataset ─► Collator
(corpus.py)       (shards.py)                       (instances.py)          (masking.py) (collate.py)
"""

from attnlab.data.collate import PretrainingCollator
from attnlab.data.corpus import Document, IngestStats, list_files, read_documents, read_hf_dataset
from attnlab.data.instances import (
    INSTANCE_FORMATS,
    LengthPhase,
    LengthSchedule,
    PretrainingInstances,
    instance_rng,
    two_phase_schedule,
)
from attnlab.data.masking import (
    STRATEGIES,
    MaskedDataset,
    Masker,
    MaskingConfig,
    MaskResult,
    span_boundary_targets,
)
from attnlab.data.protocol import SpecialIds, TokenizerLike, tokenizer_fingerprint, vocab_size_of
from attnlab.data.sentences import split_paragraphs, split_sentences
from attnlab.data.sharded_corpus import CorruptShardError, ShardedCorpus
from attnlab.data.shards import PrepareReport, prepare_shards

__all__ = [
    "INSTANCE_FORMATS",
    "STRATEGIES",
    "CorruptShardError",
    "Document",
    "IngestStats",
    "LengthPhase",
    "LengthSchedule",
    "MaskResult",
    "MaskedDataset",
    "Masker",
    "MaskingConfig",
    "PrepareReport",
    "PretrainingCollator",
    "PretrainingInstances",
    "ShardedCorpus",
    "SpecialIds",
    "TokenizerLike",
    "instance_rng",
    "list_files",
    "prepare_shards",
    "read_documents",
    "read_hf_dataset",
    "span_boundary_targets",
    "split_paragraphs",
    "split_sentences",
    "tokenizer_fingerprint",
    "two_phase_schedule",
    "vocab_size_of",
]
