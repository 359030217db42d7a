"""The masked-LM pre-training step (BERT, RoBERTa, ALBERT) around an `EncoderForPreTraining`.

`MaskedLMPreTrainer` computes the same loss as ``EncoderForPreTraining(**batch).loss`` (mean MLM
cross-entropy over the predicted positions, plus NSP/SOP when ``pair_labels`` are given), but runs the MLM
head only at the predicted positions, as Google's ``run_pretraining.py`` does (``gather_indexes`` over
``masked_lm_positions``): with 15% of the tokens predicted, the head's V-wide projection, which for a small
encoder costs more than the encoder itself, shrinks about seven-fold. The wrapped model is what is saved.

Shapes: B batch, T sequence, M predicted positions in the batch, H hidden, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models import EncoderForPreTraining
from attnlab.models.pretraining import IGNORE_INDEX


@dataclass
class MaskedLMOutput:
    loss: Tensor | None  # mlm_loss (+ pair_loss)
    mlm_logits: Tensor  # (M, V) at the predicted positions, row-major (b, t) order
    mlm_labels: Tensor  # (M,)
    pair_logits: Tensor | None = None  # (B, 2)
    mlm_loss: Tensor | None = None
    pair_loss: Tensor | None = None
    metrics: dict[str, Tensor] = dataclasses.field(default_factory=dict)


def gathered_mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of (M, V) logits against (M,) labels; 0 with a gradient path when M = 0."""
    if labels.numel() == 0:
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), labels)


class MaskedLMPreTrainer(nn.Module):
    """``model`` (an `EncoderForPreTraining`) trained with MLM logits only where ``labels != -100``."""

    def __init__(self, model: EncoderForPreTraining) -> None:
        super().__init__()
        if not isinstance(model, EncoderForPreTraining):
            raise TypeError(f"model: expected an EncoderForPreTraining, got {type(model).__name__}")
        self.config = model.config
        self.model = model

    def forward(
        self,
        input_ids: Tensor,
        labels: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        pair_labels: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> MaskedLMOutput:
        """``labels`` (B, T): original ids where predicted, -100 elsewhere; ``pair_labels`` (B,)."""
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels: expected the shape of input_ids {tuple(input_ids.shape)}, got {tuple(labels.shape)}"
            )
        m = self.model
        out = m.encoder(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids
        )
        selected = labels != IGNORE_INDEX  # (B, T)
        mlm_labels = labels[selected]  # (M,)
        mlm_logits = m.mlm_head(out.last_hidden_state[selected])  # (M, V)
        mlm_loss = gathered_mlm_loss(mlm_logits, mlm_labels)
        loss = mlm_loss
        pair_logits = pair_loss = None
        if m.pair_head is not None:
            pair_logits = m.pair_head(out.pooled_output)  # (B, 2)
        if pair_labels is not None:
            if pair_logits is None:
                raise ValueError("pair_labels given, but this model has no pair_head")
            pair_loss = F.cross_entropy(pair_logits.float(), pair_labels, ignore_index=IGNORE_INDEX)
            loss = loss + pair_loss
        with torch.no_grad():
            metrics = {"mlm_loss": mlm_loss.detach()}
            if pair_loss is not None:
                metrics["pair_loss"] = pair_loss.detach()
                metrics["pair_accuracy"] = (pair_logits.argmax(-1) == pair_labels).float().mean()
        return MaskedLMOutput(
            loss=loss,
            mlm_logits=mlm_logits,
            mlm_labels=mlm_labels,
            pair_logits=pair_logits,
            mlm_loss=mlm_loss,
            pair_loss=pair_loss,
            metrics=metrics,
        )
