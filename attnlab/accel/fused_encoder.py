"""`FusedEncoder`: the encoder whose layers take the inference fast paths of `attnlab.accel.fused_layer`.

Shapes: B batch, T sequence, N real tokens of a padded batch, H hidden.

Same modules, parameters and state-dict names as `attnlab.models.Encoder` (`attnlab.accel.optimize`
re-classes an encoder to it in place); only the execution of the layers differs. In CPU inference each layer
runs on the first fast path that applies (oneDNN's packed products, `attnlab.accel.onednn_layer`, on the
CPUs where oneDNN computes float32 products; else `fast_encoder_layer`: the packed kernel products, PyTorch's
fused encoder-layer kernel or the flat function), and inside `attnlab.accel.unpadded.skip_padding` every layer
runs on a padded batch's real tokens only where they all take the packed or flat path. Elsewhere (training,
hooks, attention maps, a (B, T, T) visibility matrix, other attention kinds) the module calls run.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.accel.fused_layer import fast_encoder_layer, fast_path_allowed, padding_for_fused, unpadded_rows
from attnlab.accel.onednn_layer import onednn_encoder_layer, onednn_layer_applies
from attnlab.models.encoder import Encoder

__all__ = ["FusedEncoder"]


class FusedEncoder(Encoder):
    """`Encoder` whose layers take the fast inference paths (see the module docstring)."""

    def run_layers(
        self,
        x: Tensor,
        mask: Tensor | None,
        attention_mask: Tensor | None,
        hidden_states: list[Tensor] | None,
        attentions: list[Tensor | None] | None,
    ) -> Tensor:
        fuse, padding = self._fused_padding(attention_mask, x, mask, attentions is not None)
        if not fuse:
            return super().run_layers(x, mask, attention_mask, hidden_states, attentions)
        layers = [(self.attention[a], self.feed_forward[f]) for a, f in self.layer_plan]
        rows = unpadded_rows(layers, x, padding) if hidden_states is None else None
        if rows is not None:  # inside skip_padding: the real tokens only (attnlab.accel.unpadded)
            x = rows.gather(x)  # (1, N, H)
            for attention, feed_forward in layers:
                x = _layer(attention, feed_forward, x, padding, mask, rows)
            return rows.scatter(x)  # (B, T, H), zeros at the padding
        for attention, feed_forward in layers:
            fused = _layer(attention, feed_forward, x, padding, mask)
            if fused is not None:  # one kernel or one call a layer (attnlab.accel.fused_layer)
                x = fused
            else:
                x = feed_forward(attention(x, mask=mask)[0])
            if hidden_states is not None:
                hidden_states.append(x)
        return x

    @staticmethod
    def _fused_padding(
        attention_mask: Tensor | None, x: Tensor, mask: Tensor | None, output_attentions: bool
    ) -> tuple[bool, Tensor | None]:
        """Whether layers may take a fast inference path (`fast_encoder_layer`), and the kernel's key-padding
        mask ((B, T), True = padding; None without padding). Not with attention maps asked for, nor a
        (B, T, T) mask."""
        if output_attentions or not fast_path_allowed(x):
            return False, None
        if mask is None:
            return True, None
        keep = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0  # True = visible
        return padding_for_fused(keep)


def _layer(
    attention: torch.nn.Module,
    feed_forward: torch.nn.Module,
    x: Tensor,
    padding: Tensor | None,
    mask: Tensor | None,
    rows=None,
) -> Tensor | None:
    """One layer on oneDNN's packed products where they apply (`attnlab.accel.onednn_layer`), else on the
    fastest path of `fast_encoder_layer` (None: run the modules)."""
    if onednn_layer_applies(attention, feed_forward, x):
        return onednn_encoder_layer(attention, feed_forward, x, mask, rows)
    return fast_encoder_layer(attention, feed_forward, x, padding, mask, rows)
