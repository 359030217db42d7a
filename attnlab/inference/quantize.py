"""int8 dynamic quantization of attnlab's linear layers, for CPU inference.

``torch.ao.quantization.quantize_dynamic`` swaps modules whose type is exactly ``nn.Linear``; attnlab's
`attnlab.nn.linear.Linear` (the oneDNN-backed subclass every model uses) is not, so it leaves almost all of a
model in float32 (the issue measured 81 ms against 83 ms fp32 for bert-base). `quantize` swaps every
``nn.Linear`` (subclasses included) for `Int8Linear`:

- weights: int8, symmetric, one scale per output channel (row), ``scale = max|w_row| / 127``;
- activations: quantized on the fly per call (uint8 with a per-tensor scale and zero point, what
  ``torch.ops.quantized.linear_dynamic`` computes), the product accumulated in int32 and the bias added in
  float32 (FBGEMM's kernels; oneDNN's on the ``onednn`` engine).

``reduce_range`` uses 7-bit activations: needed where the CPU has no VNNI instructions (AVX2's ``vpmaddubsw``
saturates int16 sums of 8-bit products); with VNNI (``avx512_vnni`` / ``avx_vnni``) the full 8 bits are
exact and more accurate, so the default picks by the CPU's flags.

Embeddings, LayerNorm, softmax and the attention products stay float32. Quantize a model in eval mode for
inference only: `Int8Linear` has no gradient.
"""

from __future__ import annotations

import warnings
from functools import cache

import torch
from torch import Tensor, nn


@cache
def cpu_has_vnni() -> bool:
    """Whether the CPU has 8-bit dot-product instructions (x86 VNNI); False when it cannot be told."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def _quantize_rows(weight: Tensor) -> Tensor:
    """Per-output-channel symmetric int8 ``(N, K)`` quantized tensor of a float ``(N, K)`` weight."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()  # (N,)
    zero = torch.zeros(w.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # quantized tensors are marked for future removal; still the API
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)


class Int8Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` stored as int8 (per-row scales) and ``x`` quantized at each call.

    x (..., K) float32 -> (..., N) float32. Built by `Int8Linear.from_float` from any ``nn.Linear``.
    """

    def __init__(self, packed: object, in_features: int, out_features: int, reduce_range: bool) -> None:
        super().__init__()
        self._packed = packed  # FBGEMM/oneDNN packed int8 weight + float bias (not a parameter)
        self.in_features = in_features
        self.out_features = out_features
        self.reduce_range = reduce_range

    @classmethod
    def from_float(cls, linear: nn.Linear, reduce_range: bool | None = None) -> Int8Linear:
        if reduce_range is None:
            reduce_range = not cpu_has_vnni()
        bias = linear.bias.detach().float() if linear.bias is not None else None
        packed = torch.ops.quantized.linear_prepack(_quantize_rows(linear.weight), bias)
        return cls(packed, linear.in_features, linear.out_features, reduce_range)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Int8Linear: expected float32 input, got {x.dtype}")
        return torch.ops.quantized.linear_dynamic(x, self._packed, self.reduce_range)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel weights, "
            f"reduce_range={self.reduce_range}"
        )


def quantize(model: nn.Module, reduce_range: bool | None = None, inplace: bool = False) -> nn.Module:
    """``model`` with every ``nn.Linear`` (attnlab's `Linear` included) replaced by `Int8Linear`.

    A copy unless ``inplace``; the result is in eval mode, on the CPU, for inference. Tied weights (the MLM
    decoder shares the word embedding) are read, not changed: the embedding stays float32 and the decoder
    gets its own int8 copy. ``reduce_range`` None picks by the CPU (see the module doc).
    """
    if not inplace:
        import copy

        model = copy.deepcopy(model)
    model = model.cpu().float().eval()
    engine = torch.backends.quantized.engine
    if engine not in ("fbgemm", "x86", "onednn"):
        raise RuntimeError(
            f"int8 quantization needs an x86 quantized engine (fbgemm/x86/onednn); this build has {engine!r}"
        )
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear.from_float(child, reduce_range))
    return model


__all__ = ["Int8Linear", "cpu_has_vnni", "quantize"]
