"""The position-wise feed-forward network (Vaswani et al. 2017, section 3.3): ``down(act(up(x)))``."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import Linear

from attnlab.nn.activations import get_activation


class FeedForward(nn.Module):
    """``FFN(x) = down(dropout(act(up(x))))`` applied to each position independently.

    ``up``: Linear H -> I (I = intermediate size, 4H in BERT), ``down``: Linear I -> H.
    ``dropout`` is an *inner* dropout after the activation. BERT and the original Transformer have
    none there (their dropout is on the sub-layer output, in `Residual`), so it defaults to 0.
    """

    def __init__(self, dim: int, hidden_dim: int, activation: str = "gelu", dropout: float = 0.0) -> None:
        super().__init__()
        self.up = Linear(dim, hidden_dim)
        self.activation = get_activation(activation)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.down = Linear(hidden_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, H) -> (B, T, H)."""
        return self.down(self.dropout(self.activation(self.up(x))))
