"""GPT: a causal Transformer decoder with a language-modelling head (Radford et al. 2018, 2019).

Shapes: B batch, T new positions, T_past cached positions, H hidden, N heads, V vocabulary, P max positions.

``GPT(embed, decoder, config)``: ``logits = decoder(embed(ids)) @ E^T``, the output projection tied to the
word embedding E (Radford et al. 2018, eq. 2). The decoder is the shared `attnlab.models.decoder.Decoder`
of `DecoderLayer` without cross-attention. The two papers differ in config fields only:

- GPT (2018): post-LN residuals (as the Transformer), no final LayerNorm, 512 positions, 40,478 BPE tokens;
- GPT-2 (2019, section 2.3): pre-LN residuals ("layer normalization was moved to the input of each
  sub-block") plus a final LayerNorm after the stack, 1024 positions, 50,257 byte-level BPE tokens, and the
  residual projections initialised with std 0.02 / sqrt(2 * layers).

Padding: an HF-style ``attention_mask`` (B, T_past + T) hides padding keys; positions then count real tokens
only (``cumsum(mask) - 1``, padding at 0), so a left-padded prompt sees the positions it would alone -- what
HF transformers' ``generate`` does for batched prompts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models.decoder import Cache, Decoder, DecoderLayer, cache_length
from attnlab.nn.activations import ACTIVATIONS
from attnlab.nn.buffered_attention import BufferedSelfAttention
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.local_attention import LocalSelfAttention
from attnlab.nn.lsh_attention import LSHSelfAttention
from attnlab.nn.masks import causal_mask, padding_mask, to_additive
from attnlab.nn.residual import Residual

MODEL_TYPE = "attnlab-gpt"


@dataclass
class GPTConfig:
    """One field per choice; the defaults are GPT-2 small (124M)."""

    vocab_size: int = 50_257  # GPT-2's byte-level BPE; GPT: 40,478
    max_positions: int = 1024  # the context length (learned position table)
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int | None = None  # None: 4 * hidden_size (both papers)
    activation: str = "gelu_tanh"  # both papers' code uses the tanh approximation of GELU
    dropout: float = 0.1  # on each sub-layer output before the residual add
    embedding_dropout: float = 0.1  # on token + position embeddings
    attention_dropout: float = 0.1  # on attention probabilities
    norm_first: bool = True  # True: pre-LN + final LayerNorm (GPT-2); False: post-LN (GPT)
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    scale_residual_init: bool = True  # GPT-2: residual projections' std / sqrt(2 * num_layers)
    # Both papers tie the output projection to the word embedding (Radford et al. 2018, eq. 2; HF's
    # tie_word_embeddings); False gives the output its own (V, H) matrix (a character model: 65 rows cost
    # little and the two roles need not share vectors; experiments/gpt_tinyshakespeare.py).
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 50_256  # GPT-2's <|endoftext|> starts and ends documents
    eos_token_id: int | None = 50_256
    pad_token_id: int | None = None  # GPT-2 has none; batched generation pads with EOS
    attention: str = "full"  # "full" or "local": causal sliding window (attnlab.nn.local_attention)
    attention_window: int = 128  # local: the keys before each query it sees (itself too)
    # "lsh": Reformer's shared-QK LSH attention (attnlab.nn.lsh_attention); training and scoring (no cache)
    lsh_num_hashes: int = 4  # hash rounds
    lsh_num_buckets: int = 32  # buckets per round (even); the paper: about 2 * length / chunk
    lsh_chunk_length: int = 64  # sorted chunks attend to themselves and the one before

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_positions", "hidden_size", "num_layers", "num_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig.{name}: expected a positive int, got {value!r}")
        if self.intermediate_size is not None and (
            not isinstance(self.intermediate_size, int) or self.intermediate_size < 1
        ):
            raise ValueError(
                "GPTConfig.intermediate_size: expected a positive int or None, "
                f"got {self.intermediate_size!r}"
            )
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(
                f"GPTConfig: hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}"
            )
        if self.attention not in ("full", "local", "lsh"):
            raise ValueError(f"GPTConfig.attention: expected full, local or lsh, got {self.attention!r}")
        for name in ("lsh_num_hashes", "lsh_num_buckets", "lsh_chunk_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name}: expected a positive int, got {value!r}")
        if self.lsh_num_buckets % 2:
            raise ValueError(f"GPTConfig.lsh_num_buckets: expected an even int, got {self.lsh_num_buckets}")
        w = self.attention_window
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ValueError(f"GPTConfig.attention_window: expected an int >= 1, got {w!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"GPTConfig.activation: {self.activation!r} is not one of {', '.join(sorted(ACTIVATIONS))}"
            )
        for name in ("dropout", "embedding_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"GPTConfig.{name}: expected a number in [0, 1), got {value!r}")
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"GPTConfig.{name}: {value} is outside the vocabulary [0, {self.vocab_size})"
                )

    @property
    def ffn_size(self) -> int:
        return self.intermediate_size if self.intermediate_size is not None else 4 * self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> GPTConfig:
        data = dict(data)
        model_type = data.pop("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise ValueError(f"{source}: model_type {model_type!r} is not {MODEL_TYPE!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown GPTConfig field(s) {', '.join(unknown)}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")


@dataclass
class CausalLMOutput:
    """``logits`` (B, T, V); with labels, ``loss``: mean next-token cross-entropy over non-ignored targets."""

    logits: Tensor
    loss: Tensor | None = None


class GPTEmbedding(nn.Module):
    """``dropout(word(ids) + position(positions))``: (B, T) ids -> (B, T, H), learned positions (P, H)."""

    def __init__(self, vocab_size: int, max_positions: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(max_positions, dim)
        self.max_positions = max_positions
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        """``position_ids`` (B or 1, T), each < P."""
        return self.dropout(self.word(input_ids) + self.position(position_ids))


def position_ids_from_mask(attention_mask: Tensor, new_tokens: int) -> Tensor:
    """(B, T_past + T) 1/0 mask -> (B, T) positions of the last ``new_tokens``: real tokens count from 0,
    padding gets 0 (HF transformers' convention for left-padded batches)."""
    positions = attention_mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(attention_mask == 0, 0)
    return positions[:, -new_tokens:]


class GPT(nn.Module):
    """A causal language model: ``model(input_ids, attention_mask, labels, cache)`` -> `CausalLMOutput`.

    With ``labels`` (B, T) (usually the input ids, -100 where ignored) the loss predicts ``labels[:, t + 1]``
    from positions ``<= t`` (the shift happens here, as HF transformers'). With ``cache`` (`new_cache`) the
    call continues the cached prefix: ``input_ids`` are the next T tokens, ``attention_mask`` (if any) covers
    the prefix and them.
    """

    def __init__(self, embed: GPTEmbedding, decoder: Decoder, config: GPTConfig) -> None:
        super().__init__()
        self.embed = embed
        self.decoder = decoder
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = embed.word.weight  # tied (Radford et al. 2018, eq. 2: h_n W_e^T)
        self.config = config

    @classmethod
    def from_config(cls, config: GPTConfig) -> GPT:
        return build_gpt(config)

    def new_cache(self) -> Cache:
        return self.decoder.new_cache()

    @staticmethod
    def self_mask(t: int, past: int, attention_mask: Tensor | None, x: Tensor) -> Tensor | None:
        """Additive (B or 1, 1, T, T_past + T) mask in ``x``'s dtype: causal, and padding keys hidden."""
        if attention_mask is None:
            # One new query may see every cached key: no mask (the fused kernel's fastest case).
            return None if t == 1 else to_additive(causal_mask(t, past + t, device=x.device), x.dtype)
        allowed = padding_mask(attention_mask)  # (B, 1, 1, T_past + T)
        if t > 1:
            allowed = allowed & causal_mask(t, past + t, device=x.device)
        return to_additive(allowed, x.dtype)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Cache | None = None,
    ) -> CausalLMOutput:
        b, t = input_ids.shape
        past = cache_length(cache)
        if attention_mask is not None and attention_mask.shape != (b, past + t):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected (batch, cached + new) = "
                f"({b}, {past + t})"
            )
        if position_ids is None:
            if attention_mask is not None:
                position_ids = position_ids_from_mask(attention_mask, t)
            else:
                position_ids = torch.arange(past, past + t, device=input_ids.device)[None]
        if past + t > self.config.max_positions:
            raise ValueError(
                f"sequence of {past + t} tokens is longer than the model's context of "
                f"{self.config.max_positions} positions (GPTConfig.max_positions)"
            )
        x = self.embed(input_ids, position_ids)  # (B, T, H)
        if self.config.attention == "lsh":
            if cache is not None:
                raise ValueError("GPT with attention='lsh' has no key/value cache: score or train it, or use "
                                 "full attention to generate")  # fmt: skip
            if attention_mask is not None and not bool(attention_mask.all()):
                raise ValueError("GPT with attention='lsh' takes no padding (attention_mask must be all 1)")
            mask = None  # LSH attention is causal by itself
        elif self.config.attention == "local" and cache is None:
            # local attention is causal by itself; it takes only the padding, (B, 1, 1, T), in blocks
            mask = None if attention_mask is None else to_additive(padding_mask(attention_mask), x.dtype)
        else:
            mask = self.self_mask(t, past, attention_mask, x)
        logits = self.lm_head(self.decoder(x, mask, cache=cache))  # (B, T, V)
        if labels is None:
            return CausalLMOutput(logits)
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        return CausalLMOutput(logits, loss)


def build_gpt(config: GPTConfig) -> GPT:
    """Assemble and initialise the model `config` describes."""
    cfg = config
    h = cfg.hidden_size

    def residual(layer: nn.Module) -> Residual:
        return Residual(layer, h, cfg.dropout, norm_first=cfg.norm_first, eps=cfg.layer_norm_eps)

    def self_attention() -> nn.Module:
        if cfg.attention == "local":
            window, dropout = cfg.attention_window, cfg.attention_dropout
            return LocalSelfAttention(h, cfg.num_heads, window, causal=True, dropout=dropout)
        if cfg.attention == "lsh":  # Reformer (Kitaev et al. 2020): shared QK, hashed chunks, causal
            chunk, buckets, hashes = cfg.lsh_chunk_length, cfg.lsh_num_buckets, cfg.lsh_num_hashes
            return LSHSelfAttention(h, cfg.num_heads, chunk, buckets, hashes, True, cfg.attention_dropout)
        return BufferedSelfAttention(h, cfg.num_heads, cfg.attention_dropout)

    layers = [
        DecoderLayer(
            residual(self_attention()),
            residual(FeedForward(h, cfg.ffn_size, cfg.activation)),
        )
        for _ in range(cfg.num_layers)
    ]
    final_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps) if cfg.norm_first else None
    embed = GPTEmbedding(cfg.vocab_size, cfg.max_positions, h, cfg.embedding_dropout)
    model = GPT(embed, Decoder(layers, final_norm), cfg)
    init_gpt_weights(model, cfg)
    return model


@torch.no_grad()
def init_gpt_weights(model: GPT, config: GPTConfig) -> None:
    """N(0, 0.02) matrices and embeddings, zero biases, unit LayerNorms (Radford et al. 2018, section 4.1);
    GPT-2 scales the residual projections (attention output, FFN down) by 1 / sqrt(2 * layers)."""
    std = config.initializer_range
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if config.scale_residual_init:
        scaled = std / math.sqrt(2 * config.num_layers)
        for layer in model.decoder.layers:
            nn.init.normal_(layer.self_attn.layer.output.weight, std=scaled)
            nn.init.normal_(layer.feed_forward.layer.down.weight, std=scaled)


def count_parameters(config: GPTConfig) -> int:
    """Trainable parameters by formula: the tied embedding once (checked against the built model and HF's
    ``GPT2LMHeadModel`` in the tests)."""
    h, f = config.hidden_size, config.ffn_size
    attention = 4 * h * h + 4 * h if config.attention != "lsh" else 3 * h * h  # LSH: shared QK, no biases
    ffn = h * f + f + f * h + h
    layer = attention + ffn + 2 * 2 * h
    final = 2 * h if config.norm_first else 0
    output = 0 if config.tie_word_embeddings else config.vocab_size * h
    return config.num_layers * layer + (config.vocab_size + config.max_positions) * h + final + output
