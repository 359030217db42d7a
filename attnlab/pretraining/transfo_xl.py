"""Segment recurrence on the pre-training machinery (``Recipe.segment_recurrence``: ``transfo-xl``).

Transformer-XL's objective is GPT's (next-token loss, objective ``clm``); what differs is that training reads
the corpus as parallel streams, segment after segment (`attnlab.data.streams`), and that each step attends to
the previous step's states as memory, with no gradient through them (Dai et al. 2019, section 3.2). The
memory lives in `SegmentRecurrence`, a thin module around `attnlab.models.transfo_xl.TransfoXL` that the
Trainer runs: its ``forward(input_ids, targets, segment_index)`` uses the memory of its previous call when the
segment continues it, stores the new one (detached) and returns the model's output with the loss.

Where the memory is kept, and why there:

- not in the state dict (a plain attribute, not a buffer): the saved model holds weights only, and DDP,
  which broadcasts rank 0's buffers at every forward, never overwrites a rank's memory with rank 0's (each
  rank reads its own streams, `attnlab.data.streams`);
- in the checkpoint nonetheless: the Trainer saves every rank's `carried_state` beside its RNG state in
  ``training_state.pt`` and gives each rank its own back on resume (`load_carried_state`), so an interrupted
  and resumed run continues with the memory the uninterrupted run had, bit for bit;
- one memory per mode: evaluation (``model.eval()``) reads the held-out streams with a memory of its own, so
  an evaluation in the middle of training leaves the training memory as it was.

The rest is `attnlab.pretraining.causal_lm`'s (metric, tokenizer) and `attnlab.pretraining.run`'s (shards,
trainer, time budgets, DDP).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.data.protocol import vocab_size_of
from attnlab.io import save
from attnlab.models.transfo_xl import TRANSFO_XL_PRESETS, Memory, TransfoXL, TransfoXLConfig, TransfoXLOutput
from attnlab.pretraining.causal_lm import eos_id_of, finish_model_directory
from attnlab.train.checkpoint import unwrap_model


def transfo_xl_config(
    preset: str | TransfoXLConfig, tokenizer: Any, segment_length: int, dropout: float, **overrides: Any
) -> TransfoXLConfig:
    """The preset with the tokenizer's vocabulary, segments of ``segment_length``, a memory as long (the
    paper's runs: ``mem_len = tgt_len``, e.g. 512 and 512 on enwik8), the recipe's dropout on the hidden
    states (attention dropout stays the preset's: 0 on enwik8), then ``overrides`` (TransfoXLConfig fields,
    e.g. ``mem_len``)."""
    if isinstance(preset, str):
        if preset not in TRANSFO_XL_PRESETS:
            raise ValueError(
                f"--preset {preset!r} is not a Transformer-XL preset; valid: {', '.join(TRANSFO_XL_PRESETS)}"
            )
        preset = TRANSFO_XL_PRESETS[preset]()
    known = {f.name for f in dataclasses.fields(TransfoXLConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"model: unknown TransfoXLConfig field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    values = dict(
        vocab_size=vocab_size_of(tokenizer),
        segment_length=segment_length,
        mem_len=segment_length,
        dropout=dropout,
        eos_token_id=eos_id_of(tokenizer),
    )
    return dataclasses.replace(preset, **{**values, **overrides})


class SegmentRecurrence(nn.Module):
    """The Trainer's module for segment-recurrent training: ``TransfoXL`` plus the memory between calls.

    ``forward(input_ids (B, T), targets (B, T), segment_index (B,))`` -> `TransfoXLOutput` with ``loss``. The
    memory of the previous call (in the same mode, train or eval) is used when ``segment_index`` is the next
    one (all rows of a batch are at the same segment, `attnlab.data.streams`); segment 0, or any other jump,
    starts without memory. ``model`` is the `TransfoXL` that is saved.
    """

    def __init__(self, model: TransfoXL) -> None:
        super().__init__()
        self.model = model
        # by mode (self.training): the memory (one (B, M, H) tensor per layer) and the segment it precedes
        self._memory: dict[bool, Memory | None] = {True: None, False: None}
        self._next_segment: dict[bool, int | None] = {True: None, False: None}

    @property
    def config(self) -> TransfoXLConfig:
        return self.model.config

    def forward(self, input_ids: Tensor, targets: Tensor, segment_index: Tensor) -> TransfoXLOutput:
        first, last = torch.stack([segment_index.min(), segment_index.max()]).tolist()
        if first != last:
            raise ValueError(
                f"SegmentRecurrence: one batch holds segments {first} to {last}; every row must be at the "
                "same segment of its stream (attnlab.data.streams with an unshuffled loader)"
            )
        mode = self.training
        memory = self._memory[mode] if first > 0 and first == self._next_segment[mode] else None
        if memory is not None and memory[0].size(0) != input_ids.size(0):
            raise ValueError(
                f"SegmentRecurrence: a batch of {input_ids.size(0)} streams continues a memory of "
                f"{memory[0].size(0)}; the number of streams must not change within a pass"
            )
        output = self.model(input_ids, targets=targets, memory=memory)
        self._memory[mode], self._next_segment[mode] = output.memory, first + 1  # detached by the model
        return output

    def reset_memory(self) -> None:
        """Forget both memories (the next call starts without one)."""
        self._memory = {True: None, False: None}
        self._next_segment = {True: None, False: None}

    # -- the Trainer's per-process state protocol (attnlab.train.trainer): saved per rank, beside the RNG
    def carried_state(self) -> dict[str, Any]:
        """The training memory and the segment it precedes, on the CPU (tensors and ints only)."""
        memory = self._memory[True]
        return {
            "memory": None if memory is None else [m.detach().cpu() for m in memory],
            "next_segment": self._next_segment[True],
        }

    def load_carried_state(self, state: dict[str, Any]) -> None:
        """Restore what `carried_state` returned (the memory onto the model's device)."""
        device = next(self.model.parameters()).device
        memory = state.get("memory")
        self._memory[True] = None if memory is None else [m.to(device) for m in memory]
        self._next_segment[True] = state.get("next_segment")


def save_transfo_xl_run(
    model: nn.Module, tokenizer: Any, directory: Path, *, run_id: str | None = None
) -> Path:
    """OUTPUT/model: ``config.json`` + ``model.safetensors`` (`attnlab.io.save`, weights only, no
    memory) and the tokenizer files, with a manifest; `attnlab perplexity` reads it."""
    xl = unwrap_model(model)
    xl = xl.model if isinstance(xl, SegmentRecurrence) else xl
    save(xl, directory)
    return finish_model_directory(directory, tokenizer, xl.config.segment_length, run_id)
