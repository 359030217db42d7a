"""``Highway``: Srivastava et al. 2015's highway layers, as ELMo's character encoder uses them.

One layer: ``t = sigmoid(x W_t + b_t)``, ``y = t * relu(x W_h + b_h) + (1 - t) * x``. ``t`` is the
*transform* gate: 0 carries ``x`` through unchanged. The gate bias starts at -2 (the paper's advice, and
bilm-tf's ``b_carry`` initialiser) so a new layer starts close to the identity.

Names follow the TF ELMo code (``CNN_high_k/W_transform`` is ``transform``; its ``W_carry`` is, despite its
name, the transform gate ``gate``), so released weights load without a sign flip.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import Linear

GATE_BIAS_INIT = -2.0


class HighwayLayer(nn.Module):
    def __init__(self, dim: int, activation: nn.Module | None = None) -> None:
        super().__init__()
        self.transform = Linear(dim, dim)  # the nonlinear path h(x)
        self.gate = Linear(dim, dim)  # t(x): how much of h(x) replaces x
        self.activation = activation or nn.ReLU()
        nn.init.constant_(self.gate.bias, GATE_BIAS_INIT)

    def forward(self, x: Tensor) -> Tensor:  # (..., D) -> (..., D)
        t = torch.sigmoid(self.gate(x))
        return t * self.activation(self.transform(x)) + (1.0 - t) * x


class Highway(nn.Module):
    """``num_layers`` highway layers of width ``dim``."""

    def __init__(self, dim: int, num_layers: int, activation: nn.Module | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(HighwayLayer(dim, activation) for _ in range(num_layers))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
