"""What a masked LM must beat: the unigram guess.

A model that has learned nothing about context still learns the token frequencies within a few hundred
steps, and then predicts the most frequent token ("the", ".") at every mask: the plateau MLM training sits on
before it starts to use the context. Its held-out accuracy is the share of masked tokens that are that one
token, and its perplexity the exponentiated cross-entropy of the training frequencies (add-one smoothed) on
the masked tokens. A run that does not clearly beat these has learned nothing worth keeping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from attnlab.data import ShardedCorpus

IGNORE_INDEX = -100


def unigram_counts(corpus: ShardedCorpus, vocab_size: int, special_ids: Iterable[int] = ()) -> np.ndarray:
    """Token counts over every shard of ``corpus`` (V,), special tokens set to 0 (they are never masked)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for shard in corpus.shards:
        if shard.ids.size:
            counts += np.bincount(np.asarray(shard.ids), minlength=vocab_size)[:vocab_size]
    for i in special_ids:
        if 0 <= i < vocab_size:
            counts[i] = 0
    return counts


def unigram_baseline(counts: np.ndarray, batches: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Held-out accuracy and perplexity of always guessing by ``counts`` at the masked positions
    (``batch["labels"] != -100``) of ``batches``: the figures `MaskedLMMetric` reports for a model."""
    log_p = np.log(counts + 1.0) - math.log(float(counts.sum() + counts.size))  # add-one smoothing
    guess = int(counts.argmax())
    correct = total = 0
    nll = 0.0
    for batch in batches:
        labels = np.asarray(batch["labels"]).reshape(-1)
        labels = labels[labels != IGNORE_INDEX]
        correct += int((labels == guess).sum())
        nll -= float(log_p[labels].sum())
        total += int(labels.size)
    if total == 0:
        return {}
    return {
        "unigram_accuracy": correct / total,
        "unigram_perplexity": math.exp(nll / total),
    }
