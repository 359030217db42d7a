"""attnlab's int8 product kernel for CPU inference (``csrc/int8_gemm.cpp``): ``y = x W^T + b`` with W int8
(one scale per output row) and each row of x quantized at every call: to 8 bits on the 8-bit dot product of
CPUs with VNNI (``avx512_vnni`` with ``avx512vl``, or ``avx_vnni``: the build ``int8_gemm_vnni``), else to 7
bits on AVX2's 8-bit multiply-add (``int8_gemm``). `levels` says which is loaded.

Why: PyTorch's dynamic int8 product (FBGEMM's) quantizes the input in separate passes and splits an encoder's
small products poorly over two threads; on AVX2 without VNNI this kernel is faster at bert-mini's shapes
(``benchmarks/inference.py``; figures in docs/design_measurements.md) and more accurate (a scale and zero
point per row of x instead of one per tensor). The quantization and the layout are described in the C++
file; the integer sums are exact, so a row's result does not depend on the other rows of the call or on the
thread count.

Built, cached, checked and switched off (``ATTNLAB_INT8_GEMM=off``) as `attnlab.accel.few_row_gemm`'s kernel
is (`attnlab.accel.kernel_build`), its op registered as ``torch.ops.attnlab.int8_gemm`` (with a fake
implementation for ``torch.compile`` and ``torch.export``); its check compares the products on random data
with the same quantization computed in float64. Where the VNNI build fails (or ``ATTNLAB_INT8_VNNI=off``),
the AVX2 one is used. `attnlab.inference.quantize` uses it where `available` (its ``attnlab`` engine).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnlab.accel.few_row_gemm import GELU, rows_input
from attnlab.accel.kernel_build import (
    check_version,
    load_library,
    register_fakes_once,
    switched_off,
    warn_unless_loaded,
)
from attnlab.cpu import cpu_flags

__all__ = [
    "Int8GemmWarning",
    "Int8Weight",
    "available",
    "levels",
    "loaded",
    "pack",
    "product",
    "quantize_rows_reference",
    "reference_product",
    "unavailable_reason",
]

SOURCE = Path(__file__).with_name("csrc") / "int8_gemm.cpp"
VERSION = 3  # torch.ops.attnlab.int8_gemm[_vnni]_version() of the source this module speaks to
PANEL = 8  # output columns per panel
STEP = 4  # k per 32-bit group: one vpmaddubsw pair sum twice over
LEVELS = 127  # 7-bit activations on AVX2: a pair of products stays below int16's 32767 (see the C++ file)
VNNI_LEVELS = 255  # 8-bit activations on VNNI: its int32 sums of 4 products are exact


class Int8GemmWarning(RuntimeWarning):
    """The int8 kernel could not be built or failed its check; PyTorch's int8 products are used instead."""


@dataclass(frozen=True)
class Int8Weight:
    """A weight (N, K) quantized and laid out for the kernel; every tensor padded to whole panels (zeros).

    panels (ceil(N/8), ceil(K/4), 8, 4) int8; colsum (N8,) int32 = sum_k Wq[n][k]; scale (N8,) float32;
    bias (N8,) float32 or None."""

    panels: Tensor
    colsum: Tensor
    scale: Tensor
    bias: Tensor | None
    out_features: int
    in_features: int


def pack(weight: Tensor, bias: Tensor | None = None) -> Int8Weight:
    """``weight`` (N, K) as symmetric int8 with one scale per row (``max|w_row| / 127``), in panels."""
    w = weight.detach().to("cpu", torch.float32)
    n, k = w.shape
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12) if n and k else torch.ones(n)
    wq = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    n8, k4 = -(-n // PANEL) * PANEL, -(-k // STEP) * STEP
    padded = torch.zeros(n8, k4, dtype=torch.int8)
    padded[:n, :k] = wq
    panels = padded.view(n8 // PANEL, PANEL, k4 // STEP, STEP).permute(0, 2, 1, 3).contiguous()

    def pad(v: Tensor, dtype: torch.dtype) -> Tensor:
        out = torch.zeros(n8, dtype=dtype)
        out[:n] = v
        return out

    b = None if bias is None else pad(bias.detach().to("cpu", torch.float32), torch.float32)
    return Int8Weight(panels, pad(wq.sum(dim=1, dtype=torch.int32), torch.int32), pad(scale, torch.float32),
                      b, n, k)  # fmt: skip


def quantize_rows_reference(x: Tensor, levels: int = LEVELS) -> tuple[Tensor, Tensor, Tensor]:
    """The kernel's quantization of x (M, K) float32 in PyTorch: (xq (M, K) in 0..levels, scale (M,), zero
    (M,)), the same float32 operations and round-half-to-even. For tests and the load check."""
    zero0 = torch.zeros((), dtype=x.dtype)
    lo = torch.minimum(x.amin(dim=1), zero0) if x.shape[1] else torch.zeros(x.shape[0])
    hi = torch.maximum(x.amax(dim=1), zero0) if x.shape[1] else torch.zeros(x.shape[0])
    s = (hi - lo) / levels
    s = torch.where((s > 0) & torch.isfinite(s), s, torch.ones_like(s))
    z = torch.round(-lo / s).clamp(0, levels)
    xq = (torch.round(x * (1 / s)[:, None]) + z[:, None]).clamp(0, levels)
    return xq, s, z


def reference_product(x: Tensor, w: Int8Weight, levels: int = LEVELS) -> Tensor:
    """What the kernel of ``levels`` computes, in float64 from the same integers."""
    xq, s, z = quantize_rows_reference(x, levels)
    n, k = w.out_features, w.in_features
    wq = w.panels.permute(0, 2, 1, 3).reshape(w.panels.shape[0] * PANEL, -1)[:n, :k].double()
    acc = xq.double() @ wq.T - z[:, None].double() * wq.sum(dim=1)
    y = acc * s[:, None].double() * w.scale[:n].double()
    return y if w.bias is None else y + w.bias[:n].double()


def _check(fn, levels: int) -> None:
    """Raise if the library's products differ from the same quantization computed in float64."""
    gen = torch.Generator().manual_seed(0)
    f32 = {"generator": gen, "dtype": torch.float32, "device": "cpu"}
    for n, k, with_bias in ((37, 19, True), (64, 72, False), (20, 8, True)):
        w = pack(torch.randn(n, k, **f32), torch.randn(n, **f32) if with_bias else None)
        for rows in (*range(1, 10), 13, 40):  # each remainder tile; the 6 x 2 tiles; 32-wide quantization
            x = torch.randn(rows, k, **f32)
            want = reference_product(x, w, levels)
            for act in (0, GELU):
                got = _call(fn, x, w, act).double()
                if act == GELU:
                    want = torch.nn.functional.gelu(want)
                # the same integers but for a rounding of x * (1 / s) that float32 may place differently: at
                # most one step of one row's quantization
                if not torch.allclose(got, want, rtol=1e-4, atol=1e-3 * want.abs().max().item()):
                    err = (got - want).abs().max().item()
                    what = "its products with GELU" if act else "its products"
                    raise ValueError(f"{what} differ from the reference by {err:.3g} at rows={rows}, "
                                     f"(N, K)=({n}, {k})")  # fmt: skip


def _fake(x: Tensor, panels: Tensor, colsum: Tensor, scale: Tensor, bias: Tensor | None, n: int, act: int):
    """The op's fake implementation: its output's shape and dtype, for torch.compile and torch.export."""
    return x.new_empty((*x.shape[:-1], n), dtype=torch.float32)


def _fake_quantize_rows(x: Tensor):
    rows = x.numel() // max(x.shape[-1], 1) if x.dim() else 1
    return (x.new_empty(x.shape, dtype=torch.uint8), x.new_empty((rows,), dtype=torch.float32),
            x.new_empty((rows,), dtype=torch.int32))  # fmt: skip


def _fake_finish_rows(out: Tensor, scale: Tensor, zero: Tensor, cw: Tensor, bias: Tensor | None, act: int):
    return None


@dataclass(frozen=True)
class Kernel:
    """The loaded kernel: its op (``torch.ops.attnlab.int8_gemm[_vnni].default``), its activations' levels,
    and its quantization and epilogue as ops of their own (for `attnlab.accel.onednn_int8`)."""

    op: object
    levels: int
    quantize_rows: object
    finish_rows: object


def _checked(name: str, levels: int) -> Kernel:
    """The loaded library's op ``name``, checked (raises if it is another version or computes wrongly)."""
    check_version(name, VERSION)
    register_fakes_once(
        {name: _fake, f"{name}_quantize_rows": _fake_quantize_rows, f"{name}_finish_rows": _fake_finish_rows}
    )
    ops = (
        getattr(torch.ops.attnlab, f"{name}_quantize_rows").default,
        getattr(torch.ops.attnlab, f"{name}_finish_rows").default,
    )
    kernel = Kernel(getattr(torch.ops.attnlab, name).default, levels, *ops)
    _check(kernel.op, levels)
    return kernel


def vnni_flags(flags: frozenset[str]) -> tuple[str, ...] | None:
    """The compiler flags of the VNNI build for a CPU of ``flags``, or None where it has no VNNI."""
    if {"avx512_vnni", "avx512vl"} <= flags:
        return ("-mavx512vnni", "-mavx512vl")
    return ("-mavxvnni",) if "avx_vnni" in flags else None


def _load():
    """The checked kernel (the VNNI build where the CPU has VNNI and it builds), or the reason there is none
    (a string)."""
    extra = vnni_flags(cpu_flags())
    if extra is not None and not switched_off("ATTNLAB_INT8_VNNI"):
        check = functools.partial(_checked, "int8_gemm_vnni", VNNI_LEVELS)
        got = load_library(SOURCE, "ATTNLAB_INT8_GEMM", check, "_vnni", (*extra, "-DATTNLAB_VNNI"))
        if not isinstance(got, str) or got == "ATTNLAB_INT8_GEMM=off":
            return got
    return load_library(SOURCE, "ATTNLAB_INT8_GEMM", lambda: _checked("int8_gemm", LEVELS))


@functools.cache
def _kernel():
    return warn_unless_loaded(_load(), "the int8 product kernel", "slower int8 inference",
                              "ATTNLAB_INT8_GEMM", Int8GemmWarning)  # fmt: skip


def available() -> bool:
    """True when the kernel is built, loaded and checked (built on the first call)."""
    return not isinstance(_kernel(), str)


def levels() -> int:
    """The loaded kernel's activation levels: 255 (8 bits, VNNI) or 127 (7 bits, AVX2); RuntimeError where
    not `available`."""
    kernel = _kernel()
    if isinstance(kernel, str):
        raise RuntimeError(f"the int8 product kernel is not available: {kernel}")
    return kernel.levels


def loaded() -> Kernel:
    """The loaded kernel; RuntimeError where not `available`."""
    kernel = _kernel()
    if isinstance(kernel, str):
        raise RuntimeError(f"the int8 product kernel is not available: {kernel}")
    return kernel


def unavailable_reason() -> str | None:
    """Why the kernel is not used, or None when it is."""
    got = _kernel()
    return got if isinstance(got, str) else None


def _call(op, x: Tensor, w: Int8Weight, act: int = 0) -> Tensor:
    x = rows_input(x, w.in_features, w.out_features, "int8 product")
    return op(x, w.panels, w.colsum, w.scale, w.bias, w.out_features, act)


def product(x: Tensor, w: Int8Weight, act: int = 0) -> Tensor:
    """``x (..., K) @ W^T + b`` -> (..., N) float32 on the kernel, or its GELU (``act`` `GELU`, as
    `few_row_gemm.product_fn`'s); RuntimeError where not `available`."""
    kernel = _kernel()
    if isinstance(kernel, str):
        raise RuntimeError(f"the int8 product kernel is not available: {kernel}")
    if act not in (0, GELU):
        raise ValueError(f"int8 product: act must be 0 or {GELU} (GELU), got {act!r}")
    return _call(kernel.op, x, w, act)
