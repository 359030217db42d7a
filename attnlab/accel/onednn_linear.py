"""`linear`, `OneDNNLinear`: a float32 ``F.linear`` on the CPU computed by oneDNN or by PyTorch's own (MKL).

Why: PyTorch's x86 builds send a float32 ``F.linear`` on the CPU to MKL's sgemm. On non-Intel CPUs with
AVX-512 MKL takes a generic code path, about half as fast as oneDNN, which ships in the same PyTorch build and
is what ``torch.compile``'s CPU backend calls. Both are IEEE float32 with float32 accumulation; results
differ only by summation order (about 1e-7 relative).

`linear` takes the oneDNN path (``torch.ops.mkldnn._linear_pointwise``, forward and both backward
products through a custom autograd function) when all of these hold, and is ``F.linear`` otherwise:

- the tensors are float32 on the CPU, no autocast is active (autocast's bf16 matmuls already use oneDNN),
  and neither ``torch.compile`` (inductor picks its own kernels) nor ``torch.jit.trace`` is tracing;
- the product has at least ``2**20`` multiply-adds (below that oneDNN's ~8 us call overhead loses);
- PyTorch was built with oneDNN and has the operator (a private one, so its presence is checked);
- the choice is ``onednn``: ``ATTNLAB_CPU_GEMM`` (or `set_cpu_gemm`) is ``onednn``, or ``auto`` (the
  default) on a CPU with AVX-512 that is not Intel's. On AVX2-only CPUs oneDNN's float32 kernels are the
  slower ones, and on Intel CPUs MKL takes its own fast path, so ``auto`` keeps ``F.linear`` on both. The
  choice is a function of the machine, so a run resumed on the same machine computes exactly as before.

Why these defaults: ``benchmarks/gemm.py`` (figures in docs/design_measurements.md).

The models' ``nn.Linear`` layers take this path once `attnlab.accel.optimize` has swapped them for
`attnlab.accel.linear.FastLinear`.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnlab.cpu import cpu_vendor

__all__ = ["OneDNNLinear", "auto_cpu_gemm", "cpu_gemm", "linear", "set_cpu_gemm"]

MIN_MACS = 1 << 20  # M * K * N below which F.linear is faster (oneDNN's per-call overhead)


def _onednn_op():
    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(torch.ops.mkldnn, "_linear_pointwise", None) if hasattr(torch.ops, "mkldnn") else None


_OP = _onednn_op()
_ENABLED = False


def auto_cpu_gemm(capability: str | None = None, vendor: str | None = None) -> str:
    """What ``"auto"`` picks: ``"onednn"`` on a CPU whose PyTorch kernels run AVX-512 (or newer) and that is
    not Intel's (MKL's own), else ``"default"`` (see the module docstring). ``capability`` is what
    ``torch.backends.cpu.get_cpu_capability()`` returns, ``vendor`` what `attnlab.cpu.cpu_vendor` does."""
    cap = torch.backends.cpu.get_cpu_capability() if capability is None else capability
    vendor = cpu_vendor() if vendor is None else vendor
    wide = cap.upper().startswith(("AVX512", "AMX"))
    return "onednn" if wide and vendor != "GenuineIntel" else "default"


def set_cpu_gemm(kind: str, what: str = "set_cpu_gemm: kind") -> None:
    """``"auto"`` (the default: oneDNN where a CPU not made by Intel has AVX-512), ``"onednn"`` or
    ``"default"`` (PyTorch's ``F.linear``)."""
    global _ENABLED
    if kind not in ("auto", "onednn", "default"):
        raise ValueError(f"{what} must be 'auto', 'onednn' or 'default', got {kind!r}")
    if kind == "auto":
        kind = auto_cpu_gemm()
    _ENABLED = kind == "onednn" and _OP is not None


set_cpu_gemm(os.environ.get("ATTNLAB_CPU_GEMM", "auto").lower(), "environment variable ATTNLAB_CPU_GEMM")


# MKL on its own vendor's CPUs: `small_product` keeps the plain product at 1-8 rows there
def cpu_gemm() -> str:
    """Which float32 CPU matmul `linear` uses now: ``"onednn"`` or ``"default"``."""
    return "onednn" if _ENABLED else "default"


def _mm(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight.T + bias`` on oneDNN; ``x`` (..., K), ``weight`` (N, K), either may be a strided view."""
    return _OP(x, weight, bias, "none", [], "")  # type: ignore[misc]


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with the two backward products on oneDNN too:
    dx = dy W (as ``linear(dy, W^T)``), dW = dy^T x (as ``linear(dy^T, x^T)``), db = sum of dy."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _mm(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _mm(grad, weight.t(), None)  # (..., N) @ (N, K) -> (..., K)
        g2 = grad.reshape(-1, grad.shape[-1])  # (M, N)
        if ctx.needs_input_grad[1]:
            grad_w = _mm(g2.t(), x.reshape(-1, x.shape[-1]).t(), None)  # (N, M) @ (M, K) -> (N, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)
        return grad_x, grad_w, grad_b


def _use_onednn(x: Tensor, weight: Tensor) -> bool:
    return (
        _ENABLED
        # first: while tracing, the size test below would put a guard on the symbolic batch and sequence
        # sizes (torch.export then refuses dynamic axes: "Expected op to be '==', got <= for 16/9 <= batch")
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()  # traced or exported graphs keep the portable aten::linear
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.dim() >= 2
        and x.numel() * weight.shape[0] >= MIN_MACS  # (M * K) * N
        and not torch.is_autocast_enabled("cpu")
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: x (..., K), weight (N, K), bias (N,) -> (..., N); see the module doc."""
    if not _use_onednn(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return _OneDNNLinear.apply(x, weight, bias)
    return _mm(x, weight, bias)


class OneDNNLinear(nn.Linear):
    """``nn.Linear`` computed by `linear` (same parameters, state-dict keys and initialisation): oneDNN's
    products, forward and backward, where `cpu_gemm` is ``"onednn"``; ``F.linear`` otherwise. What
    `attnlab.accel.optimize` swaps in for training, where no product is kept between steps."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
