"""SpanBERT's span-boundary objective (Joshi et al. 2020, section 3.2), as a head and a composition.

For a masked span (x_s, ..., x_e) and a token x_i inside it, SBO predicts x_i from the encoder outputs of the
span's boundary tokens, just outside it, and a relative position embedding::

    h_0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]
    h_1 = LayerNorm(GeLU(W_1 h_0))
    y_i = LayerNorm(GeLU(W_2 h_1))

and y_i goes through the same (tied) output embedding as the MLM head. The SBO loss is added to the MLM
loss: L(x_i) = L_MLM(x_i) + L_SBO(x_i). The data pipeline (``MaskingConfig(strategy="span")``) gives, per
token, ``span_left`` = s - 1, ``span_right`` = e + 1 and ``span_position`` = i - s (0-based, so p_0 here is
the paper's p_1), -1 outside spans.

Shapes: B batch, T sequence, M masked span tokens in the batch, H hidden, P position-embedding size,
E embedding size, V vocabulary, S position-table rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models import EncoderForPreTraining, init_bert_weights
from attnlab.models.pretraining import IGNORE_INDEX
from attnlab.nn.activations import get_activation
from attnlab.pretraining.masked_lm import gathered_mlm_loss


class SpanBoundaryHead(nn.Module):
    """The SBO head: the 2-layer FFN with GeLU and LayerNorm of the equations above, then a decoder.

    Args:
        hidden_size: H, the encoder's output size.
        embedding_size: E, the output embedding's width (H for BERT-shaped models).
        vocab_size: V.
        max_positions: S rows of the relative position table; a token deeper into its span than S - 1 uses
            the last row (deviation: the paper does not say how long spans may be; the masking clips them at
            10 words, which can exceed any fixed number of sub-word tokens).
        position_size: P, the width of p_i (the paper leaves it open; default H).
        activation, eps: the GeLU and the LayerNorm epsilon (the encoder's).

    The decoder ``decoder`` (Linear E -> V, no bias) is tied to the word embedding with `tie_to`; ``bias``
    (V,) is the head's own output bias.
    """

    def __init__(
        self,
        hidden_size: int,
        embedding_size: int,
        vocab_size: int,
        *,
        max_positions: int = 64,
        position_size: int | None = None,
        activation: str = "gelu",
        eps: float = 1e-12,
    ) -> None:
        super().__init__()
        if max_positions < 1:
            raise ValueError(f"SpanBoundaryHead.max_positions: expected >= 1, got {max_positions}")
        position_size = hidden_size if position_size is None else position_size
        self.max_positions = max_positions
        self.position = nn.Embedding(max_positions, position_size)  # p_i
        self.dense1 = Linear(2 * hidden_size + position_size, hidden_size)  # W_1
        self.norm1 = nn.LayerNorm(hidden_size, eps=eps)
        self.dense2 = Linear(hidden_size, embedding_size)  # W_2 (to E, the decoder's input)
        self.norm2 = nn.LayerNorm(embedding_size, eps=eps)
        self.activation = get_activation(activation)
        self.decoder = Linear(embedding_size, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    @classmethod
    def from_config(
        cls, config, max_positions: int = 64, position_size: int | None = None
    ) -> SpanBoundaryHead:
        return cls(
            config.hidden_size,
            config.embedding_dim,
            config.vocab_size,
            max_positions=max_positions,
            position_size=position_size,
            activation=config.activation,
            eps=config.layer_norm_eps,
        )

    def tie_to(self, word_embedding: nn.Embedding) -> None:
        """Output through the input embedding table (as the MLM head), by assignment."""
        if tuple(word_embedding.weight.shape) != tuple(self.decoder.weight.shape):
            raise ValueError(
                f"cannot tie SBO decoder {tuple(self.decoder.weight.shape)} to word embedding "
                f"{tuple(word_embedding.weight.shape)}: shapes differ"
            )
        self.decoder.weight = word_embedding.weight

    def forward(self, left: Tensor, right: Tensor, position: Tensor) -> Tensor:
        """``left``/``right`` (M, H) boundary outputs, ``position`` (M,) 0-based offsets -> logits (M, V)."""
        p = self.position(position.clamp(max=self.max_positions - 1))  # (M, P)
        h = torch.cat([left, right, p], dim=-1)  # (M, 2H + P)
        h = self.norm1(self.activation(self.dense1(h)))  # (M, H)
        y = self.norm2(self.activation(self.dense2(h)))  # (M, E)
        return self.decoder(y) + self.bias  # (M, V)


@dataclass
class SpanBertOutput:
    loss: Tensor | None  # mlm_loss + sbo_loss
    mlm_logits: Tensor  # (M, V) at the predicted positions, row-major (b, t) order
    mlm_labels: Tensor  # (M,)
    sbo_logits: Tensor | None  # (M', V) at the predicted span tokens (all M with span masking)
    mlm_loss: Tensor | None = None
    sbo_loss: Tensor | None = None
    metrics: dict[str, Tensor] = dataclasses.field(default_factory=dict)


class SpanBertForPreTraining(nn.Module):
    """SpanBERT: ``model`` (an `EncoderForPreTraining` without pair head: no NSP, section 3.3) + ``sbo_head``.

    The SBO decoder is tied to the encoder's word embedding. `mlm_only()` returns the masked LM to save
    (SpanBERT's released checkpoints carry no SBO head).
    """

    def __init__(self, model: EncoderForPreTraining, sbo_head: SpanBoundaryHead) -> None:
        super().__init__()
        if model.pair_head is not None:
            raise ValueError("SpanBERT trains without NSP: build the EncoderForPreTraining without pair_head")
        self.config = model.config
        self.model = model
        self.sbo_head = sbo_head
        sbo_head.tie_to(model.encoder.embeddings.word)

    @classmethod
    def from_config(cls, config, max_positions: int = 64) -> SpanBertForPreTraining:
        model = EncoderForPreTraining.from_config(config)
        head = SpanBoundaryHead.from_config(config, max_positions=max_positions)
        head.apply(lambda m: init_bert_weights(m, config.initializer_range))
        return cls(model, head)

    def mlm_only(self) -> EncoderForPreTraining:
        return self.model

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor,
        span_left: Tensor,
        span_right: Tensor,
        span_position: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> SpanBertOutput:
        """``labels`` (B, T) original ids at masked positions, -100 elsewhere; ``span_left``,
        ``span_right``, ``span_position`` (B, T) from the span masking, -1 outside spans."""
        for name, t in (
            ("span_left", span_left),
            ("span_right", span_right),
            ("span_position", span_position),
        ):
            if t.shape != input_ids.shape:
                raise ValueError(
                    f"{name}: expected the shape of input_ids {tuple(input_ids.shape)}, got {tuple(t.shape)}"
                )
        enc = self.model.encoder(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids
        )
        hidden = enc.last_hidden_state  # (B, T, H)
        selected = labels != IGNORE_INDEX
        mlm_labels = labels[selected]  # (M,)
        mlm_logits = self.model.mlm_head(
            hidden[selected]
        )  # (M, V): only where predicted (MaskedLMPreTrainer)
        mlm_loss = gathered_mlm_loss(mlm_logits, mlm_labels)

        # SBO at every masked token that lies in a span (all of them with span masking)
        b, t = torch.nonzero((span_position >= 0) & selected, as_tuple=True)  # (M,), (M,)
        left, right = span_left[b, t], span_right[b, t]
        if left.numel() and (int(left.min()) < 0 or int(right.max()) >= input_ids.size(1)):
            raise ValueError(
                "span_left/span_right: a span boundary lies outside the sequence; spans must not touch its "
                "first or last token (the masking never selects [CLS]/[SEP])"
            )
        sbo_logits = self.sbo_head(hidden[b, left], hidden[b, right], span_position[b, t])  # (M, V)
        targets = labels[b, t]  # (M,)
        if targets.numel():
            sbo_loss = F.cross_entropy(sbo_logits.float(), targets)
        else:
            sbo_loss = sbo_logits.sum() * 0.0
        with torch.no_grad():
            metrics = {"mlm_loss": mlm_loss.detach(), "sbo_loss": sbo_loss.detach()}
            if targets.numel():
                metrics["sbo_accuracy"] = (sbo_logits.argmax(-1) == targets).float().mean()
        return SpanBertOutput(
            loss=mlm_loss + sbo_loss,
            mlm_logits=mlm_logits,
            mlm_labels=mlm_labels,
            sbo_logits=sbo_logits,
            mlm_loss=mlm_loss,
            sbo_loss=sbo_loss,
            metrics=metrics,
        )
