"""int8 products on oneDNN's u8 x s8 GEMM, with attnlab's quantization: ``y = x W^T + b`` (or its GELU).

Why: on CPUs with VNNI, oneDNN's int8 GEMM (shipped in PyTorch's x86 builds; ``torch.compile``'s int8 path
calls it) runs bert-base's products 1.2x (B=32) to 1.5x (B=1) faster than `attnlab.accel.int8_gemm`'s
kernel, which works in 256-bit registers (``benchmarks/inference.py``, figures in docs/performance.md).
The numbers stay that kernel's: W int8 with one scale per output row, each row of x asymmetric to 8 bits
(its own scale s_m and zero point z_m, so a row's result does not depend on the other rows), the integer
sums exact. oneDNN computes ``out[m][n] = sw_n sum_k q[m][k] Wq[n][k]`` (zero point 0 and scale 1 for x);
attnlab's epilogue op then gives ``s_m (out[m][n] - z_m sw_n colsum_n) + b_n`` and the GELU. The
quantization and the epilogue are ops of `attnlab.accel.int8_gemm`'s library with fake implementations, so
``torch.compile`` and ``torch.export`` trace all three calls (inductor's lowering of oneDNN's op wants the
packed weight frozen: ``torch._inductor.config.freezing``).

`available` where the CPU has VNNI, attnlab's VNNI kernel library is loaded and PyTorch has the oneDNN ops
(private ones: their presence is checked, and a product is checked against the kernel's reference once).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.accel import int8_gemm
from attnlab.accel.few_row_gemm import rows_input

__all__ = ["OneDNNInt8Weight", "available", "pack", "product"]


@dataclass(frozen=True)
class OneDNNInt8Weight:
    """W (N, K) for oneDNN: ``packed`` (its prepacked int8 layout), ``scale`` (N,) sw, ``zeros`` (N,) int64
    (oneDNN's weight zero points: symmetric), ``cw`` (N,) = sw * colsum, ``bias`` (N,) or None; the kernel
    library's quantization and epilogue ops (bound here, so that a traced product calls only ops)."""

    packed: Tensor
    scale: Tensor
    zeros: Tensor
    cw: Tensor
    bias: Tensor | None
    out_features: int
    in_features: int
    quantize_rows: object
    finish_rows: object


def _ops_present() -> bool:
    onednn = torch.ops.onednn
    return hasattr(onednn, "qlinear_prepack") and hasattr(onednn, "qlinear_pointwise")


def pack(weight: Tensor, bias: Tensor | None = None) -> OneDNNInt8Weight:
    """``weight`` (N, K) as symmetric int8 with one scale per row (``max|w_row| / 127``, as
    `int8_gemm.pack`), prepacked for oneDNN."""
    w = weight.detach().to("cpu", torch.float32)
    n, k = w.shape
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    wq = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    cw = scale * wq.sum(dim=1, dtype=torch.int32).float()
    b = None if bias is None else bias.detach().to("cpu", torch.float32).contiguous()
    packed = torch.ops.onednn.qlinear_prepack(wq, None)
    kernel = int8_gemm.loaded()
    zeros = torch.zeros(n, dtype=torch.int64)
    return OneDNNInt8Weight(packed, scale, zeros, cw, b, n, k, kernel.quantize_rows, kernel.finish_rows)


def product(x: Tensor, w: OneDNNInt8Weight, act: int = 0) -> Tensor:
    """``x (..., K) @ W^T + b`` -> (..., N) float32, or its GELU (``act`` `int8_gemm.GELU`)."""
    if act not in (0, int8_gemm.GELU):
        raise ValueError(f"int8 product: act must be 0 or {int8_gemm.GELU} (GELU), got {act!r}")
    x = rows_input(x, w.in_features, w.out_features, "int8 product")
    if x.numel() == 0:
        return x.new_zeros((*x.shape[:-1], w.out_features))
    q, s, z = w.quantize_rows(x.contiguous())
    out = torch.ops.onednn.qlinear_pointwise(
        q, 1.0, 0, w.packed, w.scale, w.zeros, None, 1.0, 0, torch.float32, "none", [], ""
    )
    w.finish_rows(out, s, z, w.cw, w.bias, act)  # in place
    return out


def _check() -> str | None:
    """None where a product matches the kernel's quantization computed in float64, else why not."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(13, 40, generator=gen)
    weight, bias = torch.randn(24, 40, generator=gen), torch.randn(24, generator=gen)
    want = int8_gemm.reference_product(x, int8_gemm.pack(weight, bias), int8_gemm.VNNI_LEVELS)
    got = product(x, pack(weight, bias)).double()
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-3 * want.abs().max().item()):
        return f"oneDNN's int8 products differ from the reference by {(got - want).abs().max().item():.3g}"
    return None


@functools.cache
def unavailable_reason() -> str | None:
    """Why oneDNN's int8 products are not used, or None when they are."""
    if not int8_gemm.available() or int8_gemm.levels() != int8_gemm.VNNI_LEVELS:
        return "attnlab's VNNI int8 kernel is not loaded (a CPU without VNNI, or ATTNLAB_INT8_GEMM=off)"
    if not torch.backends.mkldnn.is_available() or not _ops_present():
        return "this PyTorch build has no oneDNN int8 linear ops"
    return _check()


def available() -> bool:
    """True where oneDNN's int8 products are used (see the module doc)."""
    return unavailable_reason() is None
