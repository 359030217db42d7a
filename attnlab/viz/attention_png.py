"""Attention heat maps as one PNG: a grid of small multiples, layers as rows and heads as columns.

Each cell is a head's (T, T) probability matrix (rows: the token attending, columns: the token attended
to), on one colour scale from 0 to 1 so that cells compare. Token labels go on the first column (rows) and
the last row (columns), where they do not crowd the grid.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from attnlab.atomic import atomic_path

MAX_SIDE_INCHES = 60.0  # matplotlib/Agg refuses pictures over 2**16 pixels a side; stay well below


def _cell_inches(tokens: int) -> float:
    return min(4.0, max(1.4, 0.16 * tokens))


def draw_attention_png(data: dict[str, Any], path: str | os.PathLike, dpi: int = 100) -> None:
    """Write ``data`` (from `attention_weights`) as a grid of heat maps to ``path`` (atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    att = np.asarray(data["attentions"], dtype=np.float32)  # (L, N, T, T)
    if att.ndim != 4 or att.shape[2] != att.shape[3] or att.shape[2] != len(data["tokens"]):
        raise ValueError(f"attentions: expected (layers, heads, T, T) with T = {len(data['tokens'])} tokens, "
                         f"got shape {att.shape}")  # fmt: skip
    layers, heads, t, _ = att.shape
    cell = _cell_inches(t)
    width = min(MAX_SIDE_INCHES, cell * heads + 1.5)
    height = min(MAX_SIDE_INCHES, cell * layers + 1.0)
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(layers, heads, squeeze=False)
    labels = [str(tok) for tok in data["tokens"]]
    font = max(3.0, min(8.0, 90.0 / t))
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            image = ax.imshow(att[layer, head], vmin=0.0, vmax=1.0, cmap="Blues", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
                ax.set_yticks(range(t), labels, fontsize=font)
            if layer == layers - 1:
                ax.set_xticks(range(t), labels, fontsize=font, rotation=90)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=8)
    fig.suptitle("attention: row = token attending, column = token attended to", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.6, fraction=0.02, pad=0.01)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
