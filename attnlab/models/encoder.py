"""The one configurable Transformer encoder of the BERT family.

Shapes: B batch, T sequence, H hidden, N heads, E embedding size, V vocabulary.

Cross-layer sharing (ALBERT, Lan et al. 2020 section 3.1) is an *execution order*: ``attention`` and
``feed_forward`` hold only the unique sub-layers and ``layer_plan[i] = (a, f)`` says that layer i runs
``attention[a]`` then ``feed_forward[f]``. With ``sharing="all"`` every layer runs ``(0, 0)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.models.config import EncoderConfig
from attnlab.nn.activations import get_activation
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.embeddings import Embeddings
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.local_attention import LocalSelfAttention
from attnlab.nn.masks import to_additive
from attnlab.nn.residual import Residual


@dataclass
class EncoderOutput:
    """What `Encoder.forward` returns."""

    last_hidden_state: Tensor  # (B, T, H); after final_norm with pre-LN
    pooled_output: Tensor | None = None  # (B, H) tanh(dense(h[:, 0])) when the encoder has a pooler
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings output + each layer's output (L + 1)
    attentions: tuple[Tensor, ...] | None = None  # per layer (B, N, T, T) probabilities


class Pooler(nn.Module):
    """BERT's pooler: ``tanh(dense(h[:, 0]))``, the [CLS] summary used by NSP/SOP and classifiers.

    ``activation`` (``EncoderConfig.pooler_activation``) replaces tanh where a family's classifier head
    differs: HF's ELECTRA head is gelu(dense(h[:, 0])), DistilBERT's pre_classifier is relu.
    """

    def __init__(self, hidden_size: int, activation: str = "tanh") -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh() if activation == "tanh" else get_activation(activation)

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, T, H) -> (B, H)."""
        return self.activation(self.dense(hidden[:, 0]))


def init_bert_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: weights ~ N(0, std), biases 0, LayerNorm weight 1 / bias 0.

    (Google's code draws from a normal truncated at 2 std; with std = 0.02 the difference is
    immaterial and HF uses the plain normal too.)
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def _can_read_values(t: Tensor) -> bool:
    """Whether value checks (which read tensor data back to Python) may run: not on the meta device
    (no data) and not while ``torch.compile`` traces (they would break the graph). On a GPU
    they cost one small synchronisation per forward."""
    return t.device.type != "meta" and not torch.compiler.is_compiling()


def _visible(attention_mask: Tensor) -> Tensor:
    """The attention mask as bool, True = visible (1/True in the HF-style mask)."""
    return attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0


def self_attention(c: EncoderConfig) -> MultiHeadAttention:
    """The self-attention ``c.attention`` names; both have the same parameters (state-dict names)."""
    if c.attention == "local":
        return LocalSelfAttention(
            c.hidden_size, c.num_heads, c.attention_window, global_tokens=c.global_tokens,
            dropout=c.attention_dropout,
        )  # fmt: skip
    return MultiHeadAttention(c.hidden_size, c.num_heads, dropout=c.attention_dropout)


def _layer_plan(config: EncoderConfig) -> tuple[tuple[int, int], ...]:
    shared_attention = config.sharing in ("all", "attention")
    shared_ffn = config.sharing in ("all", "ffn")
    return tuple((0 if shared_attention else i, 0 if shared_ffn else i) for i in range(config.num_layers))


class Encoder(nn.Module):
    """Embeddings, then ``num_layers`` x (self-attention sub-layer, feed-forward sub-layer), each a
    `Residual`; a final LayerNorm with pre-LN; an optional pooler.

    State-dict names (the model contract, relied on by attnlab.io):
    ``embeddings.{word,position,token_type,norm,project}``,
    ``attention.{j}.layer.{query,key,value,output}``, ``attention.{j}.norm``,
    ``feed_forward.{j}.layer.{up,down}``, ``feed_forward.{j}.norm``, ``final_norm``, ``pooler.dense``.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embeddings = Embeddings(
            vocab_size=c.vocab_size,
            embedding_size=c.embedding_dim,
            hidden_size=c.hidden_size,
            max_positions=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size,
            position_embedding=c.position_embedding,
            position_offset=c.position_offset,
            pad_token_id=c.pad_token_id,
            dropout=c.hidden_dropout,
            eps=c.layer_norm_eps,
        )
        self.layer_plan = _layer_plan(c)
        num_attention = len({a for a, _ in self.layer_plan})
        num_ffn = len({f for _, f in self.layer_plan})
        self.attention = nn.ModuleList(
            Residual(
                self_attention(c),
                c.hidden_size,
                dropout=c.hidden_dropout,
                norm_first=c.norm_first,
                eps=c.layer_norm_eps,
            )
            for _ in range(num_attention)
        )
        self.feed_forward = nn.ModuleList(
            Residual(
                FeedForward(c.hidden_size, c.intermediate_size, activation=c.activation),
                c.hidden_size,
                dropout=c.hidden_dropout,
                norm_first=c.norm_first,
                eps=c.layer_norm_eps,
            )
            for _ in range(num_ffn)
        )
        self.final_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps) if c.norm_first else None
        self.pooler = Pooler(c.hidden_size, c.pooler_activation) if c.add_pooler else None
        self.apply(lambda m: init_bert_weights(m, c.initializer_range))

    @classmethod
    def from_config(cls, config: EncoderConfig) -> Encoder:
        return cls(config)

    # -- input checks ----------------------------------------------------------------------------
    def _check_inputs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        position_ids: Tensor | None,
    ) -> None:
        c = self.config
        if not isinstance(input_ids, Tensor):
            raise TypeError(
                f"input_ids: expected a torch.Tensor of token ids, got {type(input_ids).__name__}"
            )
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids: expected an integer tensor (torch.long), got {input_ids.dtype}")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: expected shape (B, T), got {tuple(input_ids.shape)}")
        if input_ids.size(1) > c.max_sequence_length:
            raise ValueError(
                f"input_ids: sequence length {input_ids.size(1)} exceeds the maximum {c.max_sequence_length} "
                f"(max_position_embeddings={c.max_position_embeddings}, position_offset={c.position_offset})"
            )
        inspect_values = _can_read_values(input_ids)
        if input_ids.numel() and inspect_values:
            lo, hi = torch.aminmax(input_ids)
            lo, hi = int(lo), int(hi)
            if lo < 0 or hi >= c.vocab_size:
                bad = hi if hi >= c.vocab_size else lo
                raise ValueError(
                    f"input_ids: token id {bad} out of range; ids must be in [0, {c.vocab_size - 1}] "
                    f"(vocab_size={c.vocab_size}); max id found {hi}, min id found {lo}"
                )
        if attention_mask is not None and attention_mask.dim() == 3:  # (B, T, T) per-example visibility
            b, t = input_ids.shape
            if tuple(attention_mask.shape) != (b, t, t):
                raise ValueError(
                    f"attention_mask: a 3-D mask must be (B, T, T) = {(b, t, t)} (query x key visibility), "
                    f"got {tuple(attention_mask.shape)}"
                )
            attention_mask = None  # checked; the shape check below is for the (B, T) form
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if t is not None and tuple(t.shape) != tuple(input_ids.shape):
                raise ValueError(
                    f"{name}: expected the shape of input_ids {tuple(input_ids.shape)}, got {tuple(t.shape)}"
                )
        if position_ids is not None and position_ids.shape[-1] != input_ids.size(1):
            raise ValueError(
                f"position_ids: expected last dimension {input_ids.size(1)} (T), "
                f"got shape {tuple(position_ids.shape)}"
            )
        if position_ids is not None and position_ids.numel() and inspect_values:
            lo, hi = (int(v) for v in torch.aminmax(position_ids))
            if lo < 0 or hi >= c.max_position_embeddings:
                raise ValueError(
                    f"position_ids: position {hi if hi >= c.max_position_embeddings else lo} out of range; "
                    f"must be in [0, {c.max_position_embeddings - 1}] "
                    f"(max_position_embeddings={c.max_position_embeddings})"
                )
        if token_type_ids is not None:
            if token_type_ids.dtype.is_floating_point or token_type_ids.dtype == torch.bool:
                raise TypeError(f"token_type_ids: expected an integer tensor, got {token_type_ids.dtype}")
            if c.type_vocab_size == 0:
                raise ValueError(
                    "token_type_ids given, but this encoder has no segment embeddings (type_vocab_size=0)"
                )
            if token_type_ids.numel() and inspect_values:
                lo, hi = (int(v) for v in torch.aminmax(token_type_ids))
                if lo < 0 or hi >= c.type_vocab_size:
                    raise ValueError(
                        f"token_type_ids: id {hi if hi >= c.type_vocab_size else lo} out of range; "
                        f"must be in [0, {c.type_vocab_size - 1}] (type_vocab_size={c.type_vocab_size})"
                    )

    def attention_bias(self, attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """The additive mask built once per forward and applied in every layer, or None without padding.

        ``attention_mask`` (B, T) masks padded keys: (B, 1, 1, T). A (B, T, T) mask says per example which
        key each query may see (K-BERT's visible matrix, `attnlab.knowledge`; 1/True = visible; as HF's
        BERT takes a 3-D mask): (B, 1, T, T). Returning None when nothing is masked lets SDPA take its
        unmasked kernels.
        """
        if attention_mask is None:
            return None
        keep = _visible(attention_mask)
        if _can_read_values(keep) and bool(keep.all()):
            return None
        if keep.dim() == 3:
            return to_additive(keep[:, None, :, :], dtype)  # (B, 1, T_q, T_k)
        return to_additive(keep[:, None, None, :], dtype)

    def run_layers(
        self,
        x: Tensor,
        mask: Tensor | None,
        attention_mask: Tensor | None,
        hidden_states: list[Tensor] | None,
        attentions: list[Tensor | None] | None,
    ) -> Tensor:
        """The layers in `layer_plan` order over ``x`` (B, T, H) -> (B, T, H), each layer's output appended to
        ``hidden_states`` and its attention probabilities to ``attentions`` where they are lists (asked for).
        ``mask`` is `attention_bias`'s additive mask, ``attention_mask`` the caller's (B, T) or (B, T, T)."""
        for a, f in self.layer_plan:
            x, probs = self.attention[a](x, mask=mask, need_weights=attentions is not None)
            x = self.feed_forward[f](x)
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(probs)
        return x

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> EncoderOutput:
        """Encode ``input_ids`` (B, T) int64.

        Args:
            attention_mask: (B, T) 1 = token, 0 = padding (HF style); None = no padding; or (B, T, T)
                1 = query i may see key j (a per-example visibility matrix, K-BERT's).
            token_type_ids: (B, T) segment ids (0 = sentence A, 1 = B); default 0.
            position_ids: (B, T) or (1, T); default ``arange(T)`` or RoBERTa's offset positions.
            output_hidden_states: also return the embeddings output and every layer's output (the last
                one after ``final_norm`` with pre-LN, equal to ``last_hidden_state`` as in HF 5).
            output_attentions: also return every layer's attention probabilities (explicit path).
        """
        self._check_inputs(input_ids, attention_mask, token_type_ids, position_ids)
        x = self.embeddings(input_ids, token_type_ids=token_type_ids, position_ids=position_ids)  # (B, T, H)
        mask = self.attention_bias(attention_mask, x.dtype)  # (B, 1, 1, T) or None
        hidden_states: list[Tensor] | None = [x] if output_hidden_states else None
        attentions: list[Tensor] | None = [] if output_attentions else None
        x = self.run_layers(x, mask, attention_mask, hidden_states, attentions)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden_states is not None:  # as HF 5's pre-LN classes (RoBERTa-PreLayerNorm, GPT-2): the
                hidden_states[-1] = x  # last entry is the encoder's output, last_hidden_state
        return EncoderOutput(
            last_hidden_state=x,
            pooled_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )


def count_parameters(model_or_config: nn.Module | EncoderConfig, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied/shared ones counted once).

    A config is built into an `Encoder` on the meta device (no memory, no initialisation cost), so the
    count covers embeddings, layers, final norm and pooler -- the encoder as the papers count it.
    Non-persistent buffers (the sinusoidal table) are not parameters.
    """
    if isinstance(model_or_config, EncoderConfig):
        with torch.device("meta"):
            model_or_config = Encoder(model_or_config)
    if not isinstance(model_or_config, nn.Module):
        raise TypeError(
            f"count_parameters: expected an nn.Module or EncoderConfig, got {type(model_or_config).__name__}"
        )
    return sum(p.numel() for p in model_or_config.parameters() if p.requires_grad or not trainable_only)
