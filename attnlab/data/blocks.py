"""Causal language-model data: a prepared corpus read as one token stream, cut into fixed-length blocks.

The stream is every document's tokens in corpus order with an end-of-text token after each document (GPT-2's
``<|endoftext|>``, Radford et al. 2019, section 2.2; HF's ``run_clm.py`` and nanoGPT's ``prepare.py`` do the
same), read straight from the memory-mapped shards (attnlab.data.shards): nothing is copied into memory.

Block ``i`` of epoch ``e`` is the stream's tokens ``[o + i T, o + (i + 1) T)``: contiguous, crossing document
boundaries, no padding. The offset ``o`` in ``[0, T)`` is drawn from ``(seed, epoch)`` (`set_epoch`), so a
corpus seen for several epochs is not cut at the same places every time, while any epoch's blocks are a
function of (seed, epoch, index) alone -- the condition for exact resume. The number of blocks is the same
in every epoch (``(N - T + 1) // T`` for a stream of N tokens).

`TokenStream` reads the stream; `TokenBlocks` cuts it into blocks (GPT); `attnlab.data.streams` cuts it into
parallel streams read segment after segment (Transformer-XL).

Shapes: T block length, B batch. An item is ``{"input_ids": (T,) int64}``; `BlockCollator` stacks a batch
and sets ``labels`` to the inputs: the model shifts them (position t predicts token t + 1, as HF's
``GPT2LMHeadModel`` and `attnlab.models.gpt.GPT` do).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnlab.data.sharded_corpus import ShardedCorpus


class TokenStream:
    """A prepared corpus read as one token stream: every document's tokens, then ``eos_id`` (see the module
    docstring); nothing is copied into memory. ``len(stream)`` tokens; ``stream.read(start, stop)``."""

    def __init__(self, corpus: ShardedCorpus, eos_id: int) -> None:
        self.corpus, self.eos_id = corpus, int(eos_id)
        # Per shard: stream positions of its end-of-text tokens, (n_docs,) int64; document d's tokens are
        # ids[start_d:end_d] and sit at stream positions start_d + d .. end_d + d - 1, its EOS at end_d + d.
        self._eos_at: list[np.ndarray] = []
        starts = [0]
        for shard in corpus.shards:
            ends = np.asarray(shard.sent_offsets)[np.asarray(shard.doc_offsets)[1:]]  # token end of each doc
            self._eos_at.append(ends + np.arange(ends.size))
            starts.append(starts[-1] + shard.ids.size + ends.size)
        self._shard_start = np.asarray(starts, dtype=np.int64)  # (n_shards + 1,) stream offset of each shard
        self.length = int(starts[-1])

    def __len__(self) -> int:
        return self.length

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the stream, (stop - start,) int64."""
        out = np.empty(stop - start, dtype=np.int64)
        first = int(np.searchsorted(self._shard_start, start, side="right")) - 1
        pos = start
        for k in range(first, len(self.corpus.shards)):
            if pos >= stop:
                break
            lo, hi = pos - self._shard_start[k], min(stop, self._shard_start[k + 1]) - self._shard_start[k]
            q = np.arange(lo, hi)  # stream positions inside shard k
            eos_at = self._eos_at[k]
            before = np.searchsorted(eos_at, q, side="left")  # EOS tokens strictly before q
            is_eos = eos_at[np.minimum(before, eos_at.size - 1)] == q
            ids = self.corpus.shards[k].ids
            values = np.full(q.size, self.eos_id, dtype=np.int64)
            values[~is_eos] = ids[(q - before)[~is_eos]]
            out[pos - start : pos - start + q.size] = values
            pos += q.size
        return out


class TokenBlocks:
    """Map-style dataset of ``block_size``-token blocks of ``corpus``'s stream (see the module docstring).

    Args:
        corpus: prepared shards.
        block_size: T, tokens per block (the model's context).
        eos_id: the end-of-text id placed after every document.
        seed: draws each epoch's offset; ``shift=False`` keeps offset 0 (held-out evaluation).
    """

    def __init__(
        self, corpus: ShardedCorpus, block_size: int, eos_id: int, *, seed: int = 0, shift: bool = True
    ) -> None:
        if block_size < 2:
            raise ValueError(f"TokenBlocks.block_size: expected >= 2, got {block_size}")
        self.corpus, self.block_size, self.eos_id = corpus, block_size, int(eos_id)
        self.seed, self.shift = seed, shift
        self.tokens = TokenStream(corpus, eos_id)
        self.stream_length = len(self.tokens)
        self._length = max(0, (self.stream_length - block_size + 1) // block_size)
        if self._length == 0:
            raise ValueError(
                f"{corpus.directory}: {self.stream_length:,} tokens (with end-of-text tokens) give no "
                f"block of {block_size}; a longer corpus or a shorter context fits"
            )
        self.offset = 0

    def set_epoch(self, epoch: int) -> None:
        rng = np.random.default_rng([self.seed, epoch, 7])
        self.offset = int(rng.integers(self.block_size)) if self.shift else 0

    def __len__(self) -> int:
        return self._length

    def stream(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the stream, (stop - start,) int64."""
        return self.tokens.read(start, stop)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not 0 <= index < self._length:
            raise IndexError(f"block {index} of {self._length}")
        start = self.offset + index * self.block_size
        return {"input_ids": self.stream(start, start + self.block_size)}


class BlockCollator:
    """Items of `TokenBlocks` -> ``{"input_ids": (B, T), "labels": (B, T)}`` (labels = inputs; the model
    shifts them)."""

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        ids = torch.from_numpy(np.stack([item["input_ids"] for item in items]))
        return {"input_ids": ids, "labels": ids.clone()}
