"""Reformer: LSH attention, reversible layers and chunked feed-forward (Kitaev et al. 2020).

Shapes: B batch, T positions, H hidden, V vocabulary, L layers.

The paper's three ideas are named config fields over the shared blocks:

- ``attention_layers``: per layer "lsh" (`attnlab.nn.lsh_attention.LSHSelfAttention`: shared QK,
  ``num_hashes`` rounds, ``num_buckets``, chunks of ``lsh_chunk_length``), "local" (chunked local attention)
  or "full" (shared-QK attention over the whole sequence: the LSH layer with one chunk; Table 2's baseline);
- ``reversible``: the layers as a `ReversibleStack` (activations recomputed in the backward pass) or an
  ordinary stack of the same blocks;
- ``ffn_chunk_size``: the feed-forward applied to that many positions at a time (`ChunkedFeedForward`).

The stack carries two streams from ``[e; e]`` (e = word + learned position embeddings) and ends with a
LayerNorm over their concatenation (2H) and a Linear(2H, V) head, as HF's ``ReformerModelWithLMHead`` (whose
weights `attnlab.io.hf_reformer` reads). Named omissions: axial position embeddings, padding masks, and the
cache for fast generation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.gpt import CausalLMOutput
from attnlab.nn.activations import ACTIVATIONS
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.lsh_attention import LocalSelfAttention, LSHSelfAttention
from attnlab.nn.residual import Residual
from attnlab.nn.reversible import ReversibleStack

ATTENTION_KINDS = ("lsh", "local", "full")


@dataclass
class ReformerConfig:
    """One field per choice; the defaults are a small causal LSH language model (not a paper size)."""

    vocab_size: int = 256
    max_positions: int = 1024
    hidden_size: int = 128
    num_heads: int = 4
    intermediate_size: int = 512
    attention_layers: list[str] = field(default_factory=lambda: ["lsh", "lsh"])  # one per layer
    causal: bool = True
    num_hashes: int = 4  # rounds at training; evaluation may pass another number
    num_buckets: int = 32
    lsh_chunk_length: int = 64
    local_chunk_length: int = 64
    hash_seed: int | None = None  # None: fresh rotations every call (training); set only for tests
    reversible: bool = True
    ffn_chunk_size: int = 0  # 0: the whole sequence at once
    activation: str = "relu"
    dropout: float = 0.0
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_positions", "hidden_size", "num_heads", "intermediate_size",
                     "num_hashes", "lsh_chunk_length", "local_chunk_length"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ReformerConfig.{name}: expected a positive int, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"ReformerConfig: hidden_size={self.hidden_size} not divisible by {self.num_heads}"
            )
        if not self.attention_layers or any(k not in ATTENTION_KINDS for k in self.attention_layers):
            raise ValueError(
                f"ReformerConfig.attention_layers: {self.attention_layers!r}; each must be one of "
                f"{', '.join(ATTENTION_KINDS)}"
            )
        if self.num_buckets < 2 or self.num_buckets % 2:
            raise ValueError(
                f"ReformerConfig.num_buckets: expected an even number >= 2, got {self.num_buckets}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"ReformerConfig.activation: {self.activation!r} not one of {sorted(ACTIVATIONS)}"
            )

    @property
    def num_layers(self) -> int:
        return len(self.attention_layers)


def reformer_duplication() -> ReformerConfig:
    """The duplication task in miniature (experiments/reformer_duplication.py): 2 layers, 128 positions."""
    return ReformerConfig(
        vocab_size=16, max_positions=128, hidden_size=128, num_heads=4, intermediate_size=256,
        attention_layers=["lsh", "lsh"], num_hashes=4, num_buckets=16, lsh_chunk_length=16,
    )  # fmt: skip


def reformer_enwik8() -> ReformerConfig:
    """The paper's enwik8 model (section 5): 12 layers, d_model 1024, 8 heads, d_ff 4096, 64K positions."""
    return dataclasses.replace(
        ReformerConfig(), vocab_size=258, max_positions=65_536, hidden_size=1024, num_heads=8,
        intermediate_size=4096, attention_layers=["lsh"] * 12, num_hashes=8, num_buckets=1024,
        lsh_chunk_length=64, ffn_chunk_size=1024, dropout=0.1,
    )  # fmt: skip


REFORMER_PRESETS = {"reformer-duplication": reformer_duplication, "reformer-enwik8": reformer_enwik8}


class ChunkedFeedForward(nn.Module):
    """A position-wise module applied to ``chunk`` positions at a time (Reformer section 3, "Chunking"): the
    (B, chunk, I) intermediate replaces (B, T, I). ``chunk`` 0: all at once."""

    def __init__(self, layer: nn.Module, chunk: int) -> None:
        super().__init__()
        self.layer, self.chunk = layer, chunk

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, H) -> (B, T, H)."""
        if self.chunk <= 0 or x.size(1) <= self.chunk:
            return self.layer(x)
        return torch.cat([self.layer(part) for part in x.split(self.chunk, dim=1)], dim=1)


class Reformer(nn.Module):
    """``model(input_ids, labels=None, num_hashes=None)`` -> `CausalLMOutput` (loss as GPT's when labels)."""

    def __init__(self, config: ReformerConfig) -> None:
        super().__init__()
        cfg = self.config = config
        h = cfg.hidden_size
        self.word = nn.Embedding(cfg.vocab_size, h)
        self.position = nn.Embedding(cfg.max_positions, h)
        self.embedding_dropout = nn.Dropout(cfg.dropout) if cfg.dropout > 0 else nn.Identity()

        def residual(layer: nn.Module) -> Residual:
            return Residual(layer, h, cfg.dropout, norm_first=True, eps=cfg.layer_norm_eps)

        layers = [
            (residual(self._attention(kind)),
             residual(ChunkedFeedForward(FeedForward(h, cfg.intermediate_size, cfg.activation),
             cfg.ffn_chunk_size)))
            for kind in cfg.attention_layers
        ]  # fmt: skip
        self.layers = ReversibleStack(layers, reversible=cfg.reversible)
        self.final_norm = nn.LayerNorm(2 * h, eps=cfg.layer_norm_eps)
        self.lm_head = Linear(2 * h, cfg.vocab_size)
        self.apply(self._init)

    def _attention(self, kind: str) -> nn.Module:
        cfg = self.config
        if kind == "local":
            return LocalSelfAttention(cfg.hidden_size, cfg.num_heads, cfg.local_chunk_length, cfg.causal,
                                      cfg.attention_dropout)  # fmt: skip
        chunk = cfg.max_positions if kind == "full" else cfg.lsh_chunk_length
        return LSHSelfAttention(cfg.hidden_size, cfg.num_heads, chunk, cfg.num_buckets, cfg.num_hashes,
        cfg.causal,
                                cfg.attention_dropout, cfg.hash_seed)  # fmt: skip

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def set_num_hashes(self, num_hashes: int) -> None:
        """Hash rounds of every LSH layer from now on (the paper evaluates with more than it trains with)."""
        for module in self.modules():
            if isinstance(module, LSHSelfAttention):
                module.num_hashes = num_hashes

    def forward(self, input_ids: Tensor, labels: Tensor | None = None) -> CausalLMOutput:
        """input_ids (B, T) -> logits (B, T, V); T a multiple of the chunk lengths when longer than them."""
        b, t = input_ids.shape
        if t > self.config.max_positions:
            raise ValueError(
                f"sequence of {t} tokens is longer than max_positions={self.config.max_positions}"
            )
        positions = torch.arange(t, device=input_ids.device)[None]
        e = self.embedding_dropout(self.word(input_ids)) + self.position(positions)  # (B, T, H)
        y1, y2 = self.layers(e, e)
        logits = self.lm_head(
            self.embedding_dropout(self.final_norm(torch.cat([y1, y2], dim=-1)))
        )  # (B, T, V)
        if labels is None:
            return CausalLMOutput(logits)
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        return CausalLMOutput(logits, loss)
