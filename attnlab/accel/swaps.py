"""`optimize`: the CPU speed-ups of `attnlab.accel` applied to a finished model, from outside its code.

The models (`attnlab.models`) are plain PyTorch: ``nn.Linear`` projections and forwards a reader of the
papers recognises. `optimize` re-classes modules in place to subclasses that compute the same function
faster (as torchao's ``quantize_`` swaps modules), so parameters, buffers, state-dict names and
``isinstance`` relations stay what loaders and savers expect:

- ``nn.Linear`` -> `FastLinear`: oneDNN or MKL by machine (`attnlab.accel.onednn_linear`), a decoding
  step's few rows in the layout or kernel fastest for their shape, an encoder's inference rows on the packed
  kernel;
  a GPT's output layer -> `GenerationHead` (a larger weight copied for the kernel: generation repeats it);
- `Encoder` -> `FusedEncoder`: each layer on the packed, fused or flat inference path, and the real tokens
  only inside `skip_padding` (`attnlab.accel.fused_layer`, `attnlab.accel.unpadded`);
- `Decoder` -> `SteppedDecoder`: a decoding step's plain layers as one function each
  (`attnlab.accel.decoding_step`); `BufferedSelfAttention` -> `StackedSelfAttention`: one stacked
  query/key/value product in a decoding step.

Every fast path applies only where it computes the module calls' function (eval mode, no gradient, float32
on the CPU, no hooks, nothing tracing); elsewhere the plain forward runs. ``mode="training"`` swaps only
``nn.Linear`` -> `OneDNNLinear` (oneDNN's forward and backward products on the CPUs where they are faster,
nothing kept between steps). Only exact types are swapped, so a subclass with its own forward keeps it, and
a second call changes nothing. An optimized model saves as before through its state dict; save a bare
`Encoder` before optimizing it (``attnlab.io`` records the architecture by exact class).
"""

from __future__ import annotations

from torch import nn

from attnlab.accel.decoding_step import SteppedDecoder
from attnlab.accel.fused_encoder import FusedEncoder
from attnlab.accel.linear import FastLinear, GenerationHead
from attnlab.accel.onednn_linear import OneDNNLinear
from attnlab.accel.stacked_attention import StackedSelfAttention
from attnlab.models.decoder import Decoder
from attnlab.models.encoder import Encoder
from attnlab.models.gpt import GPT
from attnlab.nn.buffered_attention import BufferedSelfAttention

__all__ = ["MODES", "optimize"]

# mode -> {a plain class: the class its modules become}
MODES: dict[str, dict[type, type]] = {
    "inference": {
        nn.Linear: FastLinear,
        OneDNNLinear: FastLinear,  # a model optimized for training, then for inference
        Encoder: FusedEncoder,
        Decoder: SteppedDecoder,
        BufferedSelfAttention: StackedSelfAttention,
    },
    "training": {nn.Linear: OneDNNLinear},
}
_FLOAT_LINEAR = (nn.Linear, OneDNNLinear, FastLinear)


def optimize(model: nn.Module, mode: str = "inference") -> nn.Module:
    """``model`` with its modules re-classed in place for ``mode`` (``"inference"`` or ``"training"``; see
    the module docstring); returns ``model``. Idempotent."""
    swaps = MODES.get(mode)
    if swaps is None:
        raise ValueError(f"optimize: mode must be one of {', '.join(MODES)}, got {mode!r}")
    for module in model.modules():
        fast = swaps.get(type(module))
        if fast is not None:
            module.__class__ = fast
        if mode == "inference" and isinstance(module, GPT) and type(module.lm_head) in _FLOAT_LINEAR:
            module.lm_head.__class__ = GenerationHead  # (visited before its head, which keeps this class)
    return model
