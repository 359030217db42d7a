"""Transformer-XL: a causal language model with segment-level recurrence and relative positions (Dai et al.
2019).

Shapes: B batch, T segment (new) positions, M memory positions, H hidden, N heads, V vocabulary, L layers.

The paper's two ideas are two named differences from GPT, on the same shared blocks:

- **segment recurrence** (section 3.2): each layer also attends to a memory, the inputs it saw for the
previous
  ``mem_len`` positions, kept with no gradient (``memory`` in and out of `forward`); the context a token can
  use grows with depth (L x mem_len), and evaluation reuses the state instead of recomputing a sliding window;
- **relative positions** (section 3.3): no position table at the input; each attention adds the sinusoid of
the
  query-key distance through W_R and the global biases u, v (`attnlab.nn.relative_attention`).

Everything else is the shared `DecoderLayer` = `Residual(RelativeMultiHeadAttention)` +
`Residual(FeedForward)`
(post-LN as the paper's code, ReLU, dropout inside the FFN as well), embeddings scaled by sqrt(H) and an
output
layer tied to them. Memory length is a config field for training (``mem_len``) and a `forward` argument for
evaluation (the paper evaluates with longer memories than it trains with, section 4.1).

Deliberate omissions, named: adaptive input/softmax (Baevski & Auli 2019; the paper uses it for its word-level
vocabularies; a character model does not need it, and `attnlab.io.hf_transfo_xl` refuses checkpoints that use
it) and dropout on the position sinusoids (HF applies one mask to all layers; here none).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.decoder import Decoder, DecoderLayer
from attnlab.models.gpt import CausalLMOutput
from attnlab.nn.activations import ACTIVATIONS
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.masks import causal_mask, to_additive
from attnlab.nn.relative_attention import RelativeMultiHeadAttention
from attnlab.nn.residual import Residual

Memory = list[Tensor]  # one (B, M, H) tensor per layer: that layer's inputs over the last M positions


@dataclass
class TransfoXLConfig:
    """One field per choice; the defaults are a CPU-sized character model (not a paper size)."""

    vocab_size: int = 256
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512  # the paper's d_inner (4H for its enwik8 model: 512 -> 2048)
    segment_length: int = 64  # tokens per training segment (the paper's tgt_len)
    mem_len: int = 64  # memory kept during training; evaluation may pass a longer one
    clamp_len: int = 0  # > 0: distances beyond it share one sinusoid (HF clamp_len)
    same_length: bool = (
        False  # True: every query sees the same number of keys (the paper's code at evaluation)
    )
    share_biases: bool = (
        False  # True: one u, v for all layers (the paper's code); False: per layer (HF untie_r)
    )
    norm_first: bool = False  # True: pre-LN + a final LayerNorm (as GPT-2); False: post-LN (the paper's code)
    activation: str = "relu"  # the paper's code: ReLU
    dropout: float = 0.0  # sub-layer outputs, FFN inside, embeddings
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    eos_token_id: int | None = None  # the end-of-text id between documents (generation stops at it)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "segment_length",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TransfoXLConfig.{name}: expected a positive int, got {value!r}")
        for name in ("mem_len", "clamp_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"TransfoXLConfig.{name}: expected an int >= 0, got {value!r}")
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(
                f"TransfoXLConfig: hidden_size={self.hidden_size} is not divisible by "
                f"num_heads={self.num_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"TransfoXLConfig.activation: {self.activation!r} is not one of "
                f"{', '.join(sorted(ACTIVATIONS))}"
            )
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(
                    f"TransfoXLConfig.{name}: expected a number in [0, 1), got {getattr(self, name)!r}"
                )


def transfo_xl_char_tiny() -> TransfoXLConfig:
    """The Tiny Shakespeare miniature: GPT's ``gpt-char-tiny`` in all but the paper's two ideas (4 x 128,
    4 heads, FFN 512, pre-LN, GELU), segments of 64 characters, memory 64 (experiments/transformer_xl.py)."""
    return dataclasses.replace(TransfoXLConfig(), norm_first=True, activation="gelu_tanh")


def transfo_xl_enwik8_12l() -> TransfoXLConfig:
    """The paper's 12-layer enwik8 model (Table 2: 41M parameters, 1.06 bpc): 12 x 512, 8 heads, FFN 2048,
    segments 512, memory 512 (its 24-layer model is evaluated with a memory of 3,800)."""
    return dataclasses.replace(
        TransfoXLConfig(),
        vocab_size=204,
        hidden_size=512,
        num_layers=12,
        num_heads=8,
        intermediate_size=2048,
        segment_length=512,
        mem_len=512,
        dropout=0.1,
        attention_dropout=0.0,
    )


TRANSFO_XL_PRESETS = {
    "transfo-xl-char-tiny": transfo_xl_char_tiny,
    "transfo-xl-enwik8-12l": transfo_xl_enwik8_12l,
}


@dataclass
class TransfoXLOutput(CausalLMOutput):
    """`CausalLMOutput` plus ``memory``: the next segment's memory (one (B, M', H) tensor per layer,
    detached)."""

    memory: Memory | None = None


class TransfoXL(nn.Module):
    """``model(input_ids, labels=None, memory=None, mem_len=None)`` -> `TransfoXLOutput`.

    ``memory`` is the previous call's ``output.memory`` (None: no past). ``mem_len`` overrides the config's
    for
    this call (evaluation with a longer memory). Labels, if given, are the inputs (shifted here, as GPT).
    Predicting across segments: pass ``labels`` of the segment and train each segment on its own positions.
    """

    def __init__(self, embed: nn.Embedding, decoder: Decoder, config: TransfoXLConfig) -> None:
        super().__init__()
        self.embed = embed
        self.decoder = decoder
        self.embedding_dropout = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=True)
        self.lm_head.weight = embed.weight  # tied (the paper's code ties the adaptive softmax to the input)
        self.config = config

    def set_evaluation(self, *, clamp_len: int | None = None, same_length: bool | None = None) -> None:
        """Change the two settings the paper's code sets for evaluation only (its ``eval`` scripts: e.g.
        enwik8 trained on segments and memories of 512, evaluated with ``--mem_len 2100 --clamp_len 820
        --same_length``): ``clamp_len`` (distances beyond it share one sinusoid; 0 = none) and
        ``same_length``. The weights do not change; the config records the new values."""
        changes: dict[str, Any] = {}
        if clamp_len is not None:
            changes["clamp_len"] = clamp_len
        if same_length is not None:
            changes["same_length"] = same_length
        self.config = dataclasses.replace(self.config, **changes)  # validates clamp_len
        for layer in self.decoder.layers:
            layer.self_attn.layer.clamp = self.config.clamp_len

    def attention_mask(self, t: int, past: int, mem_len: int, device: torch.device) -> Tensor:
        """Bool (1, 1, T, M + T): causal; with ``same_length`` also no key more than ``T + mem_len - 1`` back
        once the last query sees ``M + T > mem_len`` keys, so every query sees as many keys as the last."""
        allowed = causal_mask(t, past + t, device=device)
        if self.config.same_length:
            extra = past + t - mem_len  # keys beyond mem_len the last query would see
            shift = t - extra if extra > 0 else t
            allowed = allowed & ~torch.tril(torch.ones(t, past + t, dtype=torch.bool, device=device), -shift)
        return allowed

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor | None = None,
        memory: Memory | None = None,
        mem_len: int | None = None,
        targets: Tensor | None = None,
    ) -> TransfoXLOutput:
        """``input_ids`` (B, T). ``labels`` (B, T): loss on ``labels[:, 1:]`` (as GPT). ``targets`` (B, T):
        loss on every position, ``targets[:, t]`` the token after ``input_ids[:, t]`` (what segment-wise
        training uses: the next segment's first token is the last target)."""
        mem_len = self.config.mem_len if mem_len is None else mem_len
        b, t = input_ids.shape
        past = memory[0].size(1) if memory else 0
        x = self.embedding_dropout(self.embed(input_ids) * math.sqrt(self.config.hidden_size))  # (B, T, H)
        mask = to_additive(self.attention_mask(t, past, mem_len, x.device), x.dtype)  # (1, 1, T, M + T)
        inputs: list[Tensor] = []
        for i, layer in enumerate(self.decoder.layers):
            inputs.append(x)
            mem = memory[i] if memory else None
            if mem is not None and layer.self_attn.norm_first:
                mem = layer.self_attn.norm(mem)  # pre-LN: the memory is normalised as the new inputs are
            x = layer(x, mask, cache={"self": {"memory": mem}, "cross": {}})
        if self.decoder.final_norm is not None:
            x = self.decoder.final_norm(x)
        logits = self.lm_head(self.embedding_dropout(x))  # (B, T, V)
        new_memory = update_memory(memory, inputs, mem_len)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
            )
        elif targets is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100
            )
        return TransfoXLOutput(logits, loss, new_memory)


@torch.no_grad()
def update_memory(memory: Memory | None, inputs: list[Tensor], mem_len: int) -> Memory | None:
    """Each layer's last ``mem_len`` inputs over [old memory; this segment], detached (the paper's SG(.))."""
    if mem_len == 0:
        return None
    out = []
    for i, h in enumerate(inputs):
        cat = h if not memory else torch.cat([memory[i], h], dim=1)  # (B, M + T, H)
        out.append(cat[:, -mem_len:].detach())
    return out


def build_transfo_xl(config: TransfoXLConfig) -> TransfoXL:
    """Assemble and initialise the model ``config`` describes."""
    cfg = config
    h = cfg.hidden_size
    head_dim = h // cfg.num_heads
    shared = (
        (
            nn.Parameter(torch.zeros(cfg.num_heads, head_dim)),
            nn.Parameter(torch.zeros(cfg.num_heads, head_dim)),
        )
        if cfg.share_biases
        else (None, None)
    )

    def residual(layer: nn.Module) -> Residual:
        return Residual(layer, h, cfg.dropout, norm_first=cfg.norm_first, eps=cfg.layer_norm_eps)

    layers = [
        DecoderLayer(
            residual(
                RelativeMultiHeadAttention(
                    h,
                    cfg.num_heads,
                    cfg.attention_dropout,
                    bias=False,
                    clamp=cfg.clamp_len,
                    u=shared[0],
                    v=shared[1],
                )
            ),
            residual(FeedForward(h, cfg.intermediate_size, cfg.activation, dropout=cfg.dropout)),
        )
        for _ in range(cfg.num_layers)
    ]
    final_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps) if cfg.norm_first else None
    model = TransfoXL(nn.Embedding(cfg.vocab_size, h), Decoder(layers, final_norm), cfg)
    init_transfo_xl_weights(model, cfg)
    return model


@torch.no_grad()
def init_transfo_xl_weights(model: TransfoXL, config: TransfoXLConfig) -> None:
    """N(0, 0.02) matrices, embeddings and u, v; zero biases; unit LayerNorms (the paper's
    ``init='normal'``)."""
    std = config.initializer_range
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.ones_(p)
        elif name.endswith("bias") and p.dim() == 1:
            nn.init.zeros_(p)
        else:
            nn.init.normal_(p, std=std)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor once."""
    return sum(p.numel() for p in model.parameters())
