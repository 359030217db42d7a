"""What the search loops need of a model: next-token logits for the tokens so far, and row selection.

Shapes: R rows (sequences being extended; batch x beams in beam search), t tokens so far, V vocabulary.

A `DecodeState` hides the model and its key/value cache from the loops in `attnlab.generation.search` and
`attnlab.generation.beam`, so one greedy/sampling loop and one beam search serve a decoder-only model
(`CausalLMState`, here), a segment-recurrent one (`MemoryState`: Transformer-XL) and the encoder-decoder
(`attnlab.translation.decoding.Seq2SeqState`).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from attnlab.models.decoder import reorder_cache


class DecodeState(Protocol):
    def logits(self, tokens: Tensor) -> Tensor:
        """Next-token logits (R, V) after ``tokens`` (R, t): every token so far, the last ones new."""
        ...

    def select(self, rows: Tensor) -> None:
        """Keep rows ``rows`` (R',) in that order (beam reordering, finished sentences leaving)."""
        ...


class CausalLMState:
    """A `DecodeState` for a decoder-only model called as ``model(ids, attention_mask, cache=...)``.

    ``attention_mask`` (R, P) covers the prompt (0 = left padding); generated tokens are real tokens. With
    ``use_cache`` each call feeds only the tokens not seen yet; without, the whole sequence (the reference
    the cache is tested against).
    """

    def __init__(self, model: torch.nn.Module, attention_mask: Tensor | None, use_cache: bool = True) -> None:
        self.model = model
        # (R, t); None when no prompt is padded: the model then needs no padding mask at all (cheaper steps)
        self.mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask
        self.cache = model.new_cache() if use_cache else None
        self.seen = 0  # tokens already in the cache

    def logits(self, tokens: Tensor) -> Tensor:
        t = tokens.size(1)
        if self.mask is not None and t > self.mask.size(1):  # generated tokens since the last call
            ones = self.mask.new_ones(self.mask.size(0), t - self.mask.size(1))
            self.mask = torch.cat([self.mask, ones], dim=1)
        if self.cache is None:
            out = self.model(tokens, attention_mask=self.mask)
        else:
            out = self.model(tokens[:, self.seen :], attention_mask=self.mask, cache=self.cache)
            self.seen = t
        return out.logits[:, -1].float()  # (R, V)

    def select(self, rows: Tensor) -> None:
        if self.mask is not None:
            self.mask = self.mask.index_select(0, rows)
        if self.cache is not None:
            reorder_cache(self.cache, rows)


class MemoryState:
    """A `DecodeState` for a segment-recurrent model (`attnlab.models.transfo_xl.TransfoXL`), called as
    ``model(ids, memory=...)``: each call feeds the tokens not seen yet as one segment, attending to the
    memory of the earlier calls (the model keeps its last ``mem_len`` positions per layer, so older tokens
    leave the context, as in its training and evaluation; HF's ``TransfoXLLMHeadModel.generate`` passes
    ``mems`` alike).

    The model has no padding mask, so the prompts of a batch must be equally long (``attention_mask`` all 1).
    """

    def __init__(self, model: torch.nn.Module, attention_mask: Tensor | None) -> None:
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError(
                "a Transformer-XL has no padding mask: prompts of one batch must have the same number of "
                "tokens (give them one at a time)"
            )
        self.model = model
        self.memory: list[Tensor] | None = None  # one (R, M, H) tensor per layer
        self.seen = 0

    def logits(self, tokens: Tensor) -> Tensor:
        out = self.model(tokens[:, self.seen :], memory=self.memory)
        self.memory, self.seen = out.memory, tokens.size(1)
        return out.logits[:, -1].float()  # (R, V)

    def select(self, rows: Tensor) -> None:
        if self.memory is not None:
            self.memory = [m.index_select(0, rows) for m in self.memory]
