"""Sentences (lists of words) to ELMo's per-layer vectors, without the sentence markers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.models.elmo.bilm import ElmoBiLM
from attnlab.models.elmo.chars import batch_char_ids


@torch.no_grad()
def embed_sentences(
    model: ElmoBiLM,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 32,
    dtype: torch.dtype = torch.float32,
) -> list[Tensor]:
    """One tensor (L+1, n_words, 2P) per sentence: layer 0 the token vectors [x; x], then each LSTM layer.
    Batches keep the given order (sort by length first for speed); a stateless model gives every sentence
    the same vectors in any batch."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[Tensor] = []
    try:
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            char_ids, mask = batch_char_ids(chunk, model.config.max_chars)
            result = model(char_ids.to(device), mask.to(device))
            stacked = torch.stack(result.layers)  # (L+1, B, T, 2P)
            for b, sentence in enumerate(chunk):
                out.append(stacked[:, b, 1 : len(sentence) + 1].to("cpu", dtype))
    finally:
        model.train(was_training)
    return out
