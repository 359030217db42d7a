"""Segment-recurrent language-model data: the token stream cut into S parallel streams, read in order.

Transformer-XL trains segment after segment, each layer attending to its own states of the previous segment
(Dai et al. 2019, section 3.2; the paper's ``LMOrderedIterator``): the corpus's token stream (documents and
end-of-text tokens, `attnlab.data.blocks.TokenStream`, the stream GPT's blocks are cut from) is split into S
contiguous streams of equal length, and step k reads the k-th segment of T tokens of every stream. Row i of
batch k + 1 continues row i of batch k, so the memory of batch k is the context of batch k + 1.

Shapes: S streams (all ranks together), B streams per rank, T segment length, N tokens in the stream.

Stream s holds tokens ``[s P, (s + 1) P)`` with ``P = (N - 1) // S``; segment k of stream s is ``input_ids =
tokens[s P + k T : s P + (k + 1) T]`` and ``targets`` the same shifted by one token (every position predicts
its next token, the next segment's first token included: consecutive segments overlap by that one token, as
the paper's ``x = data[i : i + T], y = data[i + 1 : i + 1 + T]``). A stream has ``(P - 1) // T`` segments; the
rest of the stream is not read. An epoch reads every segment once; the next epoch starts again at segment 0
(the streams wrap, and the model must drop its memory: each item carries its ``segment_index``).

Index layout for `attnlab.train.ResumableLoader` (``shuffle=False, drop_last=True``, ``batch_size=B``,
``world_size=W``, S = B W): item ``i`` is segment ``i // S`` of stream ``i % S``. The loader gives rank r
the indices r, r + W, r + 2W, ... in order, so batch k of rank r is segment k of streams r, r + W, ...,
r + (B - 1) W: every rank reads its own B streams, always in the same rows, and one process with batch S
reads the same global batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnlab.data.blocks import TokenStream
from attnlab.data.sharded_corpus import ShardedCorpus


class StreamSegments:
    """Map-style dataset of the segments of ``num_streams`` parallel streams (see the module docstring).

    Args:
        tokens: the token stream (a `TokenStream`), or prepared shards with ``eos_id``.
        num_streams: S, streams over all ranks (the global batch: per-rank batch x world size).
        segment_length: T, tokens per segment.
        eos_id: the end-of-text id, when ``tokens`` are shards.
    """

    def __init__(
        self,
        tokens: TokenStream | ShardedCorpus,
        num_streams: int,
        segment_length: int,
        eos_id: int | None = None,
    ) -> None:
        if isinstance(tokens, ShardedCorpus):
            if eos_id is None:
                raise ValueError("StreamSegments: shards need eos_id (the token placed after each document)")
            tokens = TokenStream(tokens, eos_id)
        for name, value in (("num_streams", num_streams), ("segment_length", segment_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"StreamSegments.{name}: expected a positive int, got {value!r}")
        self.tokens, self.num_streams, self.segment_length = tokens, num_streams, segment_length
        self.stream_length = (len(tokens) - 1) // num_streams  # P
        self.segments_per_stream = max(0, (self.stream_length - 1) // segment_length)
        if self.segments_per_stream == 0:
            raise ValueError(
                f"{len(tokens):,} tokens (with end-of-text tokens) split into {num_streams} streams give no "
                f"segment of {segment_length} + 1 tokens per stream; a longer corpus, fewer streams (batch "
                "size x processes) or a shorter segment fits"
            )

    def __len__(self) -> int:
        return self.num_streams * self.segments_per_stream

    def locate(self, index: int) -> tuple[int, int]:
        """``(stream, segment)`` of item ``index``."""
        return index % self.num_streams, index // self.num_streams

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"segment item {index} of {len(self)}")
        stream, segment = self.locate(index)
        start = stream * self.stream_length + segment * self.segment_length
        tokens = self.tokens.read(start, start + self.segment_length + 1)  # (T + 1,)
        return {"input_ids": tokens[:-1], "targets": tokens[1:], "segment_index": segment}


class SegmentCollator:
    """Items of `StreamSegments` -> ``{"input_ids": (B, T), "targets": (B, T), "segment_index": (B,)}``
    (int64; ``targets[:, t]`` is the token after ``input_ids[:, t]``)."""

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return {
            "input_ids": torch.from_numpy(np.stack([item["input_ids"] for item in items])),
            "targets": torch.from_numpy(np.stack([item["targets"] for item in items])),
            "segment_index": torch.tensor([item["segment_index"] for item in items], dtype=torch.long),
        }
