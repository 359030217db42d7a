"""The residual sub-layer connection, written once (post-LN as the papers, or pre-LN)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


class Residual(nn.Module):
    """Wraps a sub-layer ``f`` with dropout, a residual connection and LayerNorm.

    - post-LN (``norm_first=False``): ``norm(x + dropout(f(x)))`` -- Vaswani et al. 2017 section 5.4,
      BERT, RoBERTa, ALBERT, ELECTRA.
    - pre-LN (``norm_first=True``): ``x + dropout(f(norm(x)))`` -- Xiong et al. 2020; the stack then
      needs a final LayerNorm (the encoder's ``final_norm``).

    Extra arguments go to ``f`` (e.g. ``mask`` / ``context`` for attention; with pre-LN only ``x`` is
    normalised, a cross-attention ``context`` is passed as is). If ``f`` returns a tuple
    ``(out, *extra)`` (attention returns its probabilities), the result is ``(residual_out, *extra)``.
    """

    def __init__(
        self, layer: nn.Module, dim: int, dropout: float = 0.1, norm_first: bool = False, eps: float = 1e-12
    ) -> None:
        super().__init__()
        self.layer = layer
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.norm_first = norm_first

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        """(B, T, H) -> (B, T, H), or a tuple whose first element is that."""
        out = self.layer(self.branch_input(x), *args, **kwargs)
        extra: tuple = ()
        if isinstance(out, tuple):
            out, *rest = out
            extra = tuple(rest)
        y = self.merge(x, self.dropout(out))
        return (y, *extra) if extra else y

    def branch_input(self, x: Tensor) -> Tensor:
        """What the sub-layer sees: ``norm(x)`` with pre-LN, ``x`` with post-LN."""
        return self.norm(x) if self.norm_first else x

    def merge(self, x: Tensor, out: Tensor) -> Tensor:
        """The residual connection of the sub-layer's (dropped-out) output: ``x + out`` with pre-LN,
        ``norm(x + out)`` with post-LN."""
        return x + out if self.norm_first else self.norm(x + out)

    def branch(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        """The pre-LN residual branch alone, ``dropout(f(norm(x)))`` (so ``forward(x) == x + branch(x)``):
        what a reversible layer adds to the *other* stream (attnlab.nn.reversible; Gomez et al. 2017)."""
        if not self.norm_first:
            raise ValueError("Residual.branch: only a pre-LN residual (norm_first=True) has a lone branch")
        out = self.layer(self.branch_input(x), *args, **kwargs)
        return self.dropout(out[0] if isinstance(out, tuple) else out)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"
