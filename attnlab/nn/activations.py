"""Activation functions, chosen by name (validated by `EncoderConfig`).

- ``gelu``: exact GELU, ``x * Phi(x)`` (Hendrycks & Gimpel 2016), used by BERT, RoBERTa, ELECTRA.
- ``gelu_tanh``: the tanh approximation ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``,
  used by GPT-2 and ALBERT v2 (HF ``gelu_new``).
- ``gelu_sigmoid``: the sigmoid approximation ``x * sigmoid(1.702 x)`` (same paper, section 2).
- ``relu``: the original Transformer's feed-forward (Vaswani et al. 2017, eq. 2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class SigmoidGELU(nn.Module):
    """``x * sigmoid(1.702 x)``: the sigmoid approximation of GELU."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "gelu_sigmoid": SigmoidGELU,
    "relu": nn.ReLU,
}


def get_activation(name: str) -> nn.Module:
    """A fresh activation module by name; unknown names raise with the valid ones listed."""
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; valid: {', '.join(sorted(ACTIVATIONS))}") from None
