"""Held-out masked-LM figures: accuracy and perplexity over the masked tokens (a causal LM's are
`attnlab.pretraining.causal_lm.CausalLMMetric`)."""

from __future__ import annotations

import math
from typing import Any

import torch


class MaskedLMMetric:
    """Streaming held-out MLM accuracy and perplexity over the masked tokens (``labels != -100``).

    Reads ``output.mlm_logits`` (B, T, V) with ``batch["labels"]``, or logits gathered at the predicted
    positions (M, V) with ``output.mlm_labels`` (M,) (`MaskedLMPreTrainer`, SpanBERT, ELECTRA).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.correct = self.count = 0
        self.nll = 0.0

    def update(self, output: Any, batch: dict[str, torch.Tensor]) -> None:
        logits = output.mlm_logits
        if logits.dim() == 3:
            labels = batch["labels"]
            keep = labels != -100
            logits, labels = logits[keep], labels[keep]  # (M, V), (M,)
        else:
            labels = output.mlm_labels
        if labels.numel() == 0:
            return
        logits = logits.float()
        self.nll += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        self.correct += int((logits.argmax(-1) == labels).sum())
        self.count += int(labels.numel())

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            return {}
        return {
            "mlm_accuracy": self.correct / self.count,
            "mlm_perplexity": math.exp(min(self.nll / self.count, 700.0)),
            "mlm_tokens": float(self.count),
        }
