"""The Universal Transformer (Dehghani et al. 2019): one layer applied recurrently over depth.

Shapes: B batch, T positions, S source (memory) positions, H hidden, V vocabulary.

The paper's two differences from the Transformer, each a named piece here on the shared blocks:

- **recurrence over depth** (section 2.1): `UniversalStack` runs one `attnlab.models.decoder.DecoderLayer`
  (self-attention, optional cross-attention, feed-forward, each in `Residual`) ``max_steps`` times; before
  every step it adds the *coordinate* signal ``P[pos] + P[t]`` (eq. 1: the sinusoidal position signal plus the
  same sinusoid of the step t). With a padding mask it is the encoder, with a causal mask and a memory the
  decoder (the same layer class serves both, as in translation).
- **adaptive computation time** (section 2.2): with ``act`` the loop is
  `attnlab.nn.act.AdaptiveComputationTime` (per-position halting, remainders, ponder cost) instead of a
  fixed number of steps.

Two options of the loop, for depth that grows with the input (section 2.1: "the number of recurrent steps
can be varied"; the Neural GPU's and the looped Transformer's steps in proportion to the length, Fan et
al. 2024 "Looped Transformers for Length Generalization"):

- ``steps`` given to `UniversalStack.forward`, one count per example: each row takes its own number of steps
  and keeps its state once it has taken them (a batch of lengths runs as long as its longest row needs);
- ``inject_input``: the stack's input (the token embeddings) is added again before every step after the
  first, beside the coordinate signal (Fan et al.'s "input injection"), so a deep loop does not lose it;
  ``timestep_signal=False`` drops eq. 1's P_t, whose values beyond the trained depths would be new to the
  layer when a longer input takes more steps than any training input did.

`VanillaStack` is the Transformer it is compared with: L distinct layers, the position signal added once.
`TaggingModel` puts either stack between a token embedding and a tied output projection (an encoder that
labels every position; experiments/universal_transformer.py uses it for algorithmic tasks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.decoder import DecoderLayer
from attnlab.nn.act import AdaptiveComputationTime
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.embeddings import sinusoidal_table
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.residual import Residual


@dataclass
class StackOutput:
    hidden: Tensor  # (B, T, H)
    ponder_cost: Tensor | None = None  # (B, T) N + R per position (ACT only)
    steps: Tensor | None = None  # (B, T) steps each position took (ACT), or None (fixed depth)


def make_layer(
    dim: int, heads: int, ffn: int, dropout: float = 0.0, cross: bool = False, norm_first: bool = False,
    activation: str = "relu", self_attention: nn.Module | None = None,
) -> DecoderLayer:  # fmt: skip
    """The shared layer: Residual(self-attention) [+ Residual(cross-attention)] + Residual(FFN); post-LN as
    the paper (eq. 2-3: LayerNorm after each residual). ``self_attention`` replaces the full
    `MultiHeadAttention` (e.g. `attnlab.nn.local_attention.LocalSelfAttention`: then whatever crosses a
    longer distance than its window must take several steps)."""

    def residual(layer: nn.Module) -> Residual:
        return Residual(layer, dim, dropout, norm_first=norm_first, eps=1e-6)

    return DecoderLayer(
        residual(self_attention or MultiHeadAttention(dim, heads, dropout)),
        residual(FeedForward(dim, ffn, activation)),
        residual(MultiHeadAttention(dim, heads, dropout)) if cross else None,
    )


class UniversalStack(nn.Module):
    """``layer`` applied over depth: ``h_t = layer(h_{t-1} + P_pos + P_t)``, t = 0 .. max_steps - 1.

    Without ``act`` it runs ``max_steps`` steps (or each row its own ``steps``) and returns the last state;
    with it, ACT decides per position and returns the halting-weighted state (Dehghani et al. section 2.2)
    and the ponder cost. With ``inject_input`` step t > 0 reads ``h_{t-1} + x + P_pos (+ P_t)``, x being the
    stack's input; without ``timestep_signal`` the P_t term is left out.
    """

    def __init__(
        self, layer: DecoderLayer, dim: int, max_steps: int, max_positions: int = 1024,
        act: AdaptiveComputationTime | None = None, inject_input: bool = False, timestep_signal: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        if act is not None and act.max_steps != max_steps:
            raise ValueError(f"UniversalStack: act.max_steps {act.max_steps} != max_steps {max_steps}")
        self.layer = layer
        self.max_steps = max_steps
        self.act = act
        self.inject_input = inject_input
        self.register_buffer("position_signal", sinusoidal_table(max_positions, dim), persistent=False)
        table = sinusoidal_table(max_steps, dim) if timestep_signal else torch.zeros(max_steps, dim)
        self.register_buffer("timestep_signal", table, persistent=False)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        steps: Tensor | None = None,
        padding: Tensor | None = None,
    ) -> StackOutput:
        """x (B, T, H); ``positions`` (B or 1, T) int (default 0 .. T-1); masks as `DecoderLayer`'s;
        ``steps`` (B,) int in 1 .. max_steps: each row's depth (fixed-depth stacks only); ``padding`` (B, T)
        1 = real position: with ACT, padding takes no steps (so it cannot keep the loop running)."""
        if positions is None:
            positions = torch.arange(x.size(1), device=x.device)[None]
        pos = self.position_signal[positions].to(x.dtype)  # (B or 1, T, H)
        source = x

        def step(h: Tensor, t: int) -> Tensor:
            signal = pos + self.timestep_signal[t].to(x.dtype)
            if self.inject_input and t > 0:
                signal = signal + source
            return self.layer(h + signal, self_mask, memory, memory_mask)

        if self.act is None:
            if steps is None:
                for t in range(self.max_steps):
                    x = step(x, t)
                return StackOutput(x)
            if steps.min() < 1 or steps.max() > self.max_steps:
                raise ValueError(f"UniversalStack: steps must lie in 1..{self.max_steps}; got "
                                 f"{int(steps.min())}..{int(steps.max())}")  # fmt: skip
            for t in range(int(steps.max())):
                running = (steps > t)[:, None, None]  # (B, 1, 1): rows with steps left keep stepping
                x = torch.where(running, step(x, t), x)
            return StackOutput(x, steps=steps[:, None].expand(-1, x.size(1)).to(x.dtype))
        if steps is not None:
            raise ValueError("UniversalStack: per-row steps are for fixed-depth stacks; ACT chooses its own")
        out = self.act(x, step, None if padding is None else padding.bool())
        return StackOutput(out.output, out.ponder_cost, out.steps)


class VanillaStack(nn.Module):
    """The Transformer: ``layers`` (distinct parameters) after the position signal, added once."""

    def __init__(self, layers: list[DecoderLayer], dim: int, max_positions: int = 1024) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.register_buffer("position_signal", sinusoidal_table(max_positions, dim), persistent=False)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        padding: Tensor | None = None,
    ) -> StackOutput:
        """As `UniversalStack.forward` (``padding`` is unused: every layer runs at every position)."""
        if positions is None:
            positions = torch.arange(x.size(1), device=x.device)[None]
        x = x + self.position_signal[positions].to(x.dtype)
        for layer in self.layers:
            x = layer(x, self_mask, memory, memory_mask)
        return StackOutput(x)


@dataclass
class TaggingOutput:
    logits: Tensor  # (B, T, V)
    loss: Tensor | None = None  # cross-entropy over labelled positions + tau * mean ponder cost
    ponder_cost: Tensor | None = None  # (B, T)
    steps: Tensor | None = None  # (B, T)


class TaggingModel(nn.Module):
    """Token embedding (scaled by sqrt(H)) -> stack (bidirectional, padding mask) -> tied projection to V.

    ``ponder_weight`` is tau of Graves eq. 12 (the ponder cost's weight in the loss; ACT stacks only).
    """

    def __init__(self, vocab_size: int, dim: int, stack: nn.Module, ponder_weight: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embed.weight, std=dim**-0.5)
        self.stack = stack
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.dim = dim
        self.ponder_weight = ponder_weight

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        labels: Tensor | None = None,
        steps: Tensor | None = None,
    ) -> TaggingOutput:
        """input_ids (B, T); attention_mask (B, T) 1 = token; labels (B, T), -100 = not scored; ``steps`` (B,)
        each row's depth, for a `UniversalStack` without ACT."""
        x = self.embed(input_ids) * math.sqrt(self.dim)  # (B, T, H)
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()  # (B, 1, 1, T)
        depth = {} if steps is None else {"steps": steps}
        out = self.stack(x, positions, mask, padding=attention_mask, **depth)
        logits = self.head(self.norm(out.hidden))  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)
            if out.ponder_cost is not None and self.ponder_weight:
                real = torch.ones_like(out.ponder_cost) if attention_mask is None else attention_mask.float()
                loss = loss + self.ponder_weight * (out.ponder_cost * real).sum() / real.sum()
        return TaggingOutput(logits, loss, out.ponder_cost, out.steps)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied embedding once)."""
    return sum(p.numel() for p in model.parameters())
