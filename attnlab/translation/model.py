"""The encoder-decoder Transformer (Vaswani et al. 2017, section 3), composed of attnlab.nn parts.

``Seq2Seq(encoder, decoder, src_embed, tgt_embed, generator)`` as in The Annotated Transformer; `build_model`
assembles one from a `Seq2SeqConfig`.

Shapes: B batch, S source length, T target length, H = d_model, V vocabulary, N heads, D head size.

- Embeddings (section 3.4): ``dropout(E[ids] * sqrt(H) + PE[positions])``; E is one matrix for source,
  target and the pre-softmax projection when ``share_embeddings`` (a joint BPE vocabulary, section 5.1).
- Layers: the one `attnlab.models.decoder.DecoderLayer` that GPT uses too. Decoder layer: masked
  self-attention, encoder-decoder attention, FFN; encoder layer: the same class without encoder-decoder
  attention, under a padding mask. Each sub-layer is ``Residual`` (post-LN ``LayerNorm(x + dropout(f(x)))``
  as the paper, or pre-LN with a final LayerNorm after each stack).
- Incremental decoding: `decode` takes a per-layer cache; self-attention keys/values are appended at each
  step and encoder-decoder keys/values are computed from the memory once (attnlab.nn.MultiHeadAttention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.decoder import Cache, Decoder, DecoderLayer
from attnlab.nn import FeedForward, MultiHeadAttention, Residual, causal_mask, padding_mask, sinusoidal_table
from attnlab.nn.masks import to_additive

from .config import Seq2SeqConfig
from .loss import label_smoothed_cross_entropy


@dataclass
class Seq2SeqOutput:
    """``logits`` (B, T, V); with labels, ``loss`` (label-smoothed, mean per target token) and ``metrics``."""

    logits: Tensor
    loss: Tensor | None = None
    metrics: dict[str, Tensor] = field(default_factory=dict)


class ProjectedMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention whose heads do not tile H (Table 3 rows A/B with d_k, d_v != H / N).

    Queries and keys: ``H -> N * d_k``; values ``H -> N * d_v``; output ``N * d_v -> H``. The shared
    `MultiHeadAttention` ties every head size to H / N; this subclass swaps its four projections for
    rectangular ones and splits heads by the projected width (its forward then reshapes the heads'
    output with ``self.dim`` = N * d_v and applies ``output``).
    """

    def __init__(self, dim: int, num_heads: int, key_dim: int, value_dim: int, dropout: float = 0.0) -> None:
        super().__init__(num_heads * value_dim, num_heads, dropout)
        self.model_dim = dim
        self.query = Linear(dim, num_heads * key_dim)
        self.key = Linear(dim, num_heads * key_dim)
        self.value = Linear(dim, num_heads * value_dim)
        self.output = Linear(num_heads * value_dim, dim)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, T, N * D) -> (B, N, T, D) with D the projection's own head size (d_k or d_v)."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, -1).transpose(1, 2)


def make_attention(config: Seq2SeqConfig) -> MultiHeadAttention:
    n, h = config.num_heads, config.d_model
    if config.head_dim * n == h and config.value_dim * n == h:
        return MultiHeadAttention(h, n, config.attention_dropout)
    return ProjectedMultiHeadAttention(h, n, config.head_dim, config.value_dim, config.attention_dropout)


class Seq2SeqEmbedding(nn.Module):
    """``dropout(word(ids) * scale + position[offset : offset + T])``: (B, T) ids -> (B, T, H).

    ``word`` is passed in, so source and target embeddings can share one matrix. Positions are the
    sinusoidal table of section 3.5 (a non-persistent buffer) or a learned table (Table 3 row E).
    """

    def __init__(
        self,
        word: nn.Embedding,
        max_positions: int,
        position_embedding: str = "sinusoidal",
        sinusoidal_layout: str = "interleaved",
        dropout: float = 0.1,
        scale: bool = True,
    ) -> None:
        super().__init__()
        dim = word.embedding_dim
        self.word = word
        self.scale = math.sqrt(dim) if scale else 1.0
        self.max_positions = max_positions
        if position_embedding == "learned":
            self.position: nn.Embedding | None = nn.Embedding(max_positions, dim)
        else:
            self.position = None
            table = sinusoidal_table(max_positions, dim)  # (P, H), sin/cos interleaved as in the paper
            if sinusoidal_layout == "concatenated":  # tensor2tensor / Marian: all sines, then all cosines
                table = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)
            self.register_buffer("sinusoid", table, persistent=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, input_ids: Tensor, offset: int = 0) -> Tensor:
        t = input_ids.size(1)
        if offset + t > self.max_positions:
            raise ValueError(
                f"sequence of {offset + t} positions is longer than max_positions={self.max_positions}"
            )
        if self.position is not None:
            pos = self.position.weight[offset : offset + t]
        else:
            pos = self.sinusoid[offset : offset + t]
        x = self.word(input_ids) * self.scale + pos.to(self.word.weight.dtype)  # (B, T, H)
        return self.dropout(x)


class Seq2SeqEncoder(nn.Module):
    """The encoder stack: the shared `DecoderLayer` without encoder-decoder attention, given a key-padding
    mask instead of a causal one (self-attention, feed-forward; section 3.1); ``final_norm`` with pre-LN.
    (Not the BERT family's `attnlab.models.Encoder`, which owns its embeddings and pooler.)"""

    def __init__(self, layers: list[DecoderLayer], final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """(B, S, H) -> (B, S, H); ``mask`` additive or bool, broadcastable to (B, N, S, S)."""
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Seq2Seq(nn.Module):
    """The encoder-decoder: ``generator(decoder(tgt_embed(y), encoder(src_embed(x))))``.

    ``model(input_ids, attention_mask, decoder_input_ids, labels)`` -> `Seq2SeqOutput`; with ``labels``
    (B, T) (-100 at padding) the loss is label-smoothed cross-entropy with ``label_smoothing``. Without
    ``decoder_input_ids`` they are the labels shifted right behind the start token (teacher forcing).
    """

    def __init__(
        self,
        encoder: Seq2SeqEncoder,
        decoder: Decoder,
        src_embed: Seq2SeqEmbedding,
        tgt_embed: Seq2SeqEmbedding,
        generator: nn.Linear,
        config: Seq2SeqConfig,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator
        self.config = config

    # --- the two halves
    def memory_mask(self, attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """(B, S) 1/0 -> additive (B, 1, 1, S) key-padding mask, built once per forward."""
        return None if attention_mask is None else to_additive(padding_mask(attention_mask), dtype)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """(B, S) source ids -> memory (B, S, H)."""
        x = self.src_embed(input_ids)
        return self.encoder(x, self.memory_mask(attention_mask, x.dtype))

    def decode(
        self,
        decoder_input_ids: Tensor,
        memory: Tensor,
        attention_mask: Tensor | None = None,
        cache: Cache | None = None,
        offset: int = 0,
    ) -> Tensor:
        """(B, T) target ids at positions ``offset .. offset + T - 1`` -> decoder states (B, T, H).

        With a ``cache`` (from `new_cache`) the earlier positions' keys/values come from it and this call's
        are appended, so incremental decoding passes one token per call with ``offset`` = tokens so far.
        """
        t = decoder_input_ids.size(1)
        y = self.tgt_embed(decoder_input_ids, offset=offset)
        # One new query attends every cached key: no mask needed. Otherwise causal over offset + t keys.
        self_mask = None if t == 1 else to_additive(causal_mask(t, offset + t, device=y.device), y.dtype)
        return self.decoder(y, self_mask, memory, self.memory_mask(attention_mask, y.dtype), cache)

    def new_cache(self) -> Cache:
        return self.decoder.new_cache()

    def shift_right(self, labels: Tensor) -> Tensor:
        """Teacher forcing input: ``[start, y_1, ..., y_{T-1}]`` with -100 replaced by padding."""
        cfg = self.config
        shifted = labels.new_full(labels.shape, cfg.pad_token_id)
        shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1].eq(-100), cfg.pad_token_id)
        shifted[:, 0] = cfg.start_token_id
        return shifted

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> Seq2SeqOutput:
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("Seq2Seq.forward: give decoder_input_ids, labels, or both")
            decoder_input_ids = self.shift_right(labels)
        memory = self.encode(input_ids, attention_mask)  # (B, S, H)
        logits = self.generator(self.decode(decoder_input_ids, memory, attention_mask))  # (B, T, V)
        if labels is None:
            return Seq2SeqOutput(logits)
        loss, nll, tokens = label_smoothed_cross_entropy(logits, labels, self.config.label_smoothing)
        return Seq2SeqOutput(logits, loss, {"nll_loss": nll.detach(), "target_tokens": tokens.float()})


def build_model(config: Seq2SeqConfig) -> Seq2Seq:
    """Assemble and initialise the model `config` describes."""
    cfg = config
    h = cfg.d_model

    def residual(layer: nn.Module) -> Residual:
        return Residual(layer, h, cfg.dropout, norm_first=cfg.norm_first, eps=cfg.layer_norm_eps)

    def ffn() -> FeedForward:
        return FeedForward(h, cfg.d_ff, cfg.activation, cfg.activation_dropout)

    encoder = Seq2SeqEncoder(
        [DecoderLayer(residual(make_attention(cfg)), residual(ffn())) for _ in range(cfg.num_layers)],
        nn.LayerNorm(h, eps=cfg.layer_norm_eps) if cfg.norm_first else None,
    )
    decoder = Decoder(
        [
            DecoderLayer(
                residual(make_attention(cfg)), residual(ffn()), cross_attn=residual(make_attention(cfg))
            )
            for _ in range(cfg.decoder_layers)
        ],
        nn.LayerNorm(h, eps=cfg.layer_norm_eps) if cfg.norm_first else None,
    )
    src_word = nn.Embedding(cfg.vocab_size, h)
    tgt_word = src_word if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, h)

    def embed(word: nn.Embedding) -> Seq2SeqEmbedding:
        return Seq2SeqEmbedding(
            word,
            cfg.max_positions,
            cfg.position_embedding,
            cfg.sinusoidal_layout,
            cfg.dropout,
            cfg.scale_embedding,
        )

    generator = Linear(h, cfg.vocab_size, bias=False)
    model = Seq2Seq(encoder, decoder, embed(src_word), embed(tgt_word), generator, cfg)
    init_weights(model, cfg)
    if cfg.share_embeddings:
        generator.weight = src_word.weight  # one matrix for both embeddings and the pre-softmax map
    return model


@torch.no_grad()
def init_weights(model: Seq2Seq, config: Seq2SeqConfig) -> None:
    """Xavier-uniform matrices, zero biases, unit LayerNorms (tensor2tensor's choices; the paper is silent);
    embeddings ``N(0, H^-0.5)`` so that after the sqrt(H) scale they have unit variance, padding row 0."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            if config.init_std is None:
                nn.init.xavier_uniform_(module.weight)
            else:
                nn.init.normal_(module.weight, std=config.init_std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=config.d_model**-0.5)
    for word in (model.src_embed.word, model.tgt_embed.word):
        word.weight[config.pad_token_id].zero_()
