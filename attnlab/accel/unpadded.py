"""Inference over a padded batch's real tokens only: the encoder's products skip the padding.

A batch of texts of different lengths is padded to the longest (B, T). The products of an encoder layer --
query/key/value, output, the two feed-forward ones: nearly all of a layer's cost -- work on each token on
its own, so rows of padding cost as much as real tokens and change nothing a caller reads, if it reads the
real positions only. A server's dynamic batches pay for that: fill-mask requests of 9 to 28 tokens, batched
by arrival eight at a time, hold 1.34 padded tokens per real one.

`Rows` is where the real tokens are in the (B, T) batch. `attnlab.models.Encoder` gathers them, (B, T, H) ->
(1, N, H), runs every layer on those N rows, and scatters the result back at the end; only the attention
itself needs the (B, T) layout, and `attnlab.accel.fused_layer.packed_encoder_layer` scatters its stacked
query/key/value into it and gathers the attention's output back (two copies of N rows a layer, against
products over B * T rows). PyTorch's ``nn.TransformerEncoder`` does the same on its inference fast path with
nested tensors; like it, the padded positions of the output are zeros, not what the module calls compute
there (values no caller should read: the padded queries' attention over the real keys).

So it is opt-in: a caller that reads the real positions only -- the pipelines (`attnlab.tasks.pipelines`),
hence ``attnlab serve`` and ``attnlab predict`` -- runs its forward inside `skip_padding`. The encoder takes
the path where every layer takes the packed path (`attnlab.accel.fused_layer.unpadded_rows`) and no per-layer
hidden states are asked for; elsewhere nothing changes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from torch import Tensor

__all__ = ["Rows", "skip_padding", "skipping_padding"]

_LOCAL = threading.local()


@contextlib.contextmanager
def skip_padding(enabled: bool = True) -> Iterator[None]:
    """Inside the block, in this thread, encoders may leave their padded positions' outputs as zeros (see
    the module docstring); the setting before is restored at the end."""
    before = getattr(_LOCAL, "enabled", False)
    _LOCAL.enabled = enabled
    try:
        yield
    finally:
        _LOCAL.enabled = before


def skipping_padding() -> bool:
    return getattr(_LOCAL, "enabled", False)


class Rows:
    """The real tokens of a (B, T) batch: ``keep`` (B, T) bool, True = a real token."""

    def __init__(self, keep: Tensor) -> None:
        self.batch, self.length = keep.shape
        self.index = keep.reshape(-1).nonzero().squeeze(1)  # (N,) into the B * T flattened positions

    def gather(self, x: Tensor) -> Tensor:
        """(B, T, W) -> (1, N, W): the real tokens' rows, in order."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.index).unsqueeze(0)

    def scatter(self, rows: Tensor) -> Tensor:
        """(1, N, W) -> (B, T, W): the rows back at their positions, zeros at the padding."""
        out = rows.new_zeros(self.batch * self.length, rows.shape[-1])
        out.index_copy_(0, self.index, rows[0])
        return out.view(self.batch, self.length, -1)
