"""``ScalarMix``: a task's learned weighted sum of a network's layers (Peters et al. 2018, ELMo, eq. 1).

``mix = gamma * sum_j softmax(s)_j * h_j``: ``s`` one scalar per layer (starting equal, so the mix
starts as the mean), ``gamma`` a scale that lets the task size the vector. With ``layer_norm`` each layer
is normalised first (section 3.2: "in some cases, it helped to apply layer normalization to each biLM
layer before weighting").

Deliberate difference from AllenNLP's ``ScalarMix``: its layer norm takes one mean and variance over the
whole (masked) batch, so a sentence's vector depends on the sentences batched with it; here each token's
vector is normalised on its own (no learned affine), so a sentence gets the same vector in any batch.
Any model's layers can be mixed: nothing here knows about ELMo.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ScalarMix(nn.Module):
    def __init__(self, num_layers: int, layer_norm: bool = False, trainable: bool = True) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"ScalarMix.num_layers: expected >= 1, got {num_layers}")
        self.num_layers = num_layers
        self.layer_norm = layer_norm
        self.scalars = nn.Parameter(torch.zeros(num_layers), requires_grad=trainable)  # s, before softmax
        self.gamma = nn.Parameter(torch.ones(()), requires_grad=trainable)

    def weights(self) -> Tensor:  # (L,) summing to 1
        return torch.softmax(self.scalars, dim=0)

    def forward(self, layers: Sequence[Tensor] | Tensor) -> Tensor:
        """``layers``: L tensors of one shape (..., D), or one stacked (L, ..., D) -> (..., D)."""
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix: expected {self.num_layers} layers, got {len(layers)}")
        stacked = layers if isinstance(layers, Tensor) else torch.stack(list(layers))  # (L, ..., D)
        if self.layer_norm:
            stacked = F.layer_norm(stacked, stacked.shape[-1:], eps=1e-12)
        w = self.weights().to(stacked.dtype).view(-1, *([1] * (stacked.dim() - 1)))
        return self.gamma * (w * stacked).sum(dim=0)
