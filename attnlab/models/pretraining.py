"""Pre-training compositions: an `Encoder` plus heads, passed in (`from_config` builds the usual set).

- `EncoderForPreTraining`: masked LM (+ optional NSP/SOP pair head): BERT, RoBERTa (no pair head),
  ALBERT (SOP), and ELECTRA's generator (MLM only).
- `ReplacedTokenDetection`: ELECTRA's discriminator.

Both, like the fine-tuning models of `attnlab.models.task_heads`, are an `EncoderWithHeads`: ``encoder``
(state-dict keys ``encoder.*``) and ``config``. Each ``forward`` names its inputs, passes the encoder's on
in `Encoder.forward`'s order and adds only its heads and loss.

Shapes: B batch, T sequence, H hidden, V vocabulary. Labels use -100 for ignored positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models.config import EncoderConfig
from attnlab.models.encoder import Encoder, init_bert_weights
from attnlab.models.heads import MaskedLMHead, ReplacedTokenHead, SentencePairHead

IGNORE_INDEX = -100


def _init_head(module: nn.Module, std: float) -> None:
    """BERT initialisation for a freshly built head (tied weights are re-tied afterwards)."""
    module.apply(lambda m: init_bert_weights(m, std))


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose label is not -100; 0 (with a gradient path) if none.

    logits (B, T, V), labels (B, T) int64.
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels: expected shape {tuple(logits.shape[:-1])} (B, T), got {tuple(labels.shape)}"
        )
    flat = labels.reshape(-1).long()
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), flat, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return loss / (flat != IGNORE_INDEX).sum().clamp(min=1)


class EncoderWithHeads(nn.Module):
    """The base of every composition: the one ``encoder`` (and its ``config``), heads added by subclasses."""

    def __init__(self, encoder: Encoder) -> None:
        super().__init__()
        self.config = encoder.config
        self.encoder = encoder  # registered first: the state dict lists encoder.* before the heads


@dataclass
class PreTrainingOutput:
    loss: Tensor | None  # MLM loss (+ pair loss when pair_labels are given)
    mlm_logits: Tensor  # (B, T, V)
    pair_logits: Tensor | None = None  # (B, 2)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None
    mlm_loss: Tensor | None = None
    pair_loss: Tensor | None = None


@dataclass
class ReplacedTokenOutput:
    loss: Tensor | None  # mean binary cross-entropy over real (non-padding, non -100) tokens
    logits: Tensor  # (B, T), > 0 = replaced
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class EncoderForPreTraining(EncoderWithHeads):
    """``encoder`` + ``mlm_head`` (+ ``pair_head`` over the pooled output). Ties the MLM decoder to the
    encoder's word embedding unless ``tie_weights=False``."""

    def __init__(
        self,
        encoder: Encoder,
        mlm_head: MaskedLMHead,
        pair_head: SentencePairHead | None = None,
        tie_weights: bool = True,
    ) -> None:
        if pair_head is not None and encoder.pooler is None:
            raise ValueError(
                "EncoderForPreTraining: a pair_head needs an encoder with a pooler (add_pooler=True)"
            )
        super().__init__(encoder)
        self.mlm_head = mlm_head
        self.pair_head = pair_head
        if tie_weights:
            mlm_head.tie_to(encoder.embeddings.word)

    @classmethod
    def from_config(
        cls, config: EncoderConfig, pair_head: bool = False, tie_weights: bool = True, **options: Any
    ) -> EncoderForPreTraining:
        """Build encoder and heads (BERT-initialised). ``pair_head=True`` adds NSP/SOP."""
        if options:
            raise ValueError(
                f"EncoderForPreTraining.from_config: unknown option(s) {', '.join(sorted(options))}; "
                "valid: pair_head, tie_weights"
            )
        mlm = MaskedLMHead.from_config(config)
        pair = SentencePairHead.from_config(config) if pair_head else None
        for head in (mlm, pair):
            if head is not None:
                _init_head(head, config.initializer_range)
        return cls(Encoder(config), mlm, pair, tie_weights=tie_weights)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        pair_labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> PreTrainingOutput:
        """``labels`` (B, T): original ids at masked positions, -100 elsewhere. ``pair_labels`` (B,)."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        mlm_logits = self.mlm_head(out.last_hidden_state)  # (B, T, V)
        pair_logits = self.pair_head(out.pooled_output) if self.pair_head is not None else None  # (B, 2)
        mlm_loss = masked_lm_loss(mlm_logits, labels) if labels is not None else None
        pair_loss = None
        if pair_labels is not None:
            if pair_logits is None:
                raise ValueError("pair_labels given, but this model has no pair_head")
            if pair_labels.shape != pair_logits.shape[:1]:
                raise ValueError(
                    f"pair_labels: expected shape ({pair_logits.size(0)},), got {tuple(pair_labels.shape)}"
                )
            pair_loss = F.cross_entropy(pair_logits.float(), pair_labels.long(), ignore_index=IGNORE_INDEX)
        losses = [v for v in (mlm_loss, pair_loss) if v is not None]
        return PreTrainingOutput(
            loss=sum(losses[1:], losses[0]) if losses else None,
            mlm_logits=mlm_logits,
            pair_logits=pair_logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            mlm_loss=mlm_loss,
            pair_loss=pair_loss,
        )


class ReplacedTokenDetection(EncoderWithHeads):
    """ELECTRA discriminator: ``encoder`` + ``rtd_head``; per-token "replaced?" logits."""

    def __init__(self, encoder: Encoder, rtd_head: ReplacedTokenHead) -> None:
        super().__init__(encoder)
        self.rtd_head = rtd_head

    @classmethod
    def from_config(cls, config: EncoderConfig, **options: Any) -> ReplacedTokenDetection:
        if options:
            raise ValueError(
                f"ReplacedTokenDetection.from_config: unknown option(s) {', '.join(sorted(options))}"
            )
        head = ReplacedTokenHead.from_config(config)
        _init_head(head, config.initializer_range)
        return cls(Encoder(config), head)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ReplacedTokenOutput:
        """``labels`` (B, T): 1 = replaced, 0 = original, -100 = ignored; padding is ignored too."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.rtd_head(out.last_hidden_state)  # (B, T)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape:
                raise ValueError(
                    f"labels: expected shape {tuple(logits.shape)} (B, T), got {tuple(labels.shape)}"
                )
            keep = labels != IGNORE_INDEX
            if attention_mask is not None:
                keep = keep & (attention_mask != 0)
            # ELECTRA averages the discriminator loss over real tokens only (Clark et al. 2020, eq. 2).
            per_token = F.binary_cross_entropy_with_logits(
                logits.float(), labels.clamp(min=0).to(torch.float32), reduction="none"
            )
            loss = (per_token * keep).sum() / keep.sum().clamp(min=1)
        return ReplacedTokenOutput(
            loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions
        )
