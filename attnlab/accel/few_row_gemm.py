"""The few-row product kernel: ``x @ W^T + b`` for one decoding step's 1-8 rows (``csrc/few_row_gemm.cpp``).

Why: such a product reads the whole weight and does little with it, so it runs at the speed the weight streams
from memory. PyTorch's CPU BLAS (MKL) streams it well below the memory's speed; the kernel reads a copy of
the weight laid out for it, once and in order. Why: ``benchmarks/gemm.py --small-rows`` prints both (figures
in docs/design_measurements.md). The layout and the arithmetic are described in the C++ file; a row's
result does not depend on the other rows of the call or on the thread count.

The kernel is built on first use with ``torch.utils.cpp_extension`` and its ops registered as
``torch.ops.attnlab.few_row_gemm``, ``product_add_norm`` and ``attention`` (`attnlab.accel.kernel_build` says
how, where and when it is refused); their fake implementations below give ``torch.compile`` and
``torch.export`` the output shapes. Once loaded, its products are checked on random data against ``F.linear``
in float64 (every row count 1-9, 13 and 40, a column count that is not a multiple of 8, with and without
bias, with and without the GELU epilogue), and so are its attention and merged product. A library that
fails any of it is not used.

`available` is False, and the callers keep PyTorch's products, where any of this fails or where
``ATTNLAB_FEW_ROW_GEMM=off``. A `FewRowGemmWarning` says why, once, where the user can mend it (no compiler,
a failed build or check, a cache directory refused); a CPU without AVX2 and FMA (or not x86-64) is not
warned about. The products then differ from the kernel's in float32 summation order only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.accel.derived import derived
from attnlab.accel.kernel_build import check_version, load_library, register_fakes_once, warn_unless_loaded

__all__ = [
    "FewRowGemmWarning", "Ops", "attention", "available", "cached_merge_fn", "cached_product_fn", "panels",
    "product", "product_fn", "rows_input", "unavailable_reason",
]  # fmt: skip

SOURCE = Path(__file__).with_name("csrc") / "few_row_gemm.cpp"
VERSION = 5  # torch.ops.attnlab.few_row_gemm_version() of the source this module speaks to
PANEL = 8  # output columns per panel: one AVX register of float32
GELU = 1  # the ``act`` that applies the exact GELU to each output (csrc/epilogue.h)


class FewRowGemmWarning(RuntimeWarning):
    """The kernel could not be built or failed its check; PyTorch's products are used instead."""


@dataclass(frozen=True)
class Ops:
    """The loaded kernel's ops (``torch.ops.attnlab.*.default``: the overload itself, no lookup per call)."""

    product: Callable  # few_row_gemm(x, panels, bias, n, act)
    merge: Callable  # product_add_norm(x, panels, bias, residual, gamma, beta, eps)
    attention: Callable  # attention(qkv, heads, key_bias)


# the ops' fake implementations: their outputs' shapes and dtypes, for torch.compile and torch.export


def _product_fake(x: Tensor, panels: Tensor, bias: Tensor | None, n: int, act: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], n), dtype=torch.float32)


def _merge_fake(x, panels, bias, residual: Tensor, gamma, beta, eps) -> Tensor:
    return residual.new_empty(residual.shape, dtype=torch.float32)


def _attention_fake(qkv: Tensor, heads: int, key_bias: Tensor | None) -> Tensor:
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3), dtype=torch.float32)


def _check(fn) -> None:
    """Raise if the library's products differ from F.linear's (float64) beyond float32 rounding."""
    gen = torch.Generator().manual_seed(0)
    f32 = {"generator": gen, "dtype": torch.float32, "device": "cpu"}  # whatever the default dtype and device
    for n, k, with_bias in ((37, 19, True), (64, 48, False), (20, 8, True)):
        w = torch.randn(n, k, **f32)
        b = torch.randn(n, **f32) if with_bias else None
        p = _pack(w)
        for rows in (*range(1, 10), 13, 40):  # each few-row tile; the many-row tiles, pairs and remainders
            x = torch.randn(rows, k, **f32)
            want = F.linear(x.double(), w.double(), None if b is None else b.double())
            for act, name in ((0, "F.linear"), (GELU, "GELU(F.linear)")):
                got = _bound(fn, p, b, n, act)(x)
                if act == GELU:
                    want = F.gelu(want)
                if not torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5):
                    err = (got.double() - want).abs().max().item()
                    raise ValueError(
                        f"its products differ from {name} by {err:.3g} at rows={rows}, (N, K)=({n}, {k})"
                    )


def _attention_reference(qkv: Tensor, heads: int, key_bias: Tensor | None) -> Tensor:
    """`attention` in float64 with PyTorch's scaled_dot_product_attention."""
    b, t, width = qkv.shape
    q, k, v = qkv.double().view(b, t, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4).unbind(0)
    mask = None if key_bias is None else key_bias.double()[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, -1)


def _check_attention(attend) -> None:
    """Raise if the library's attention differs from PyTorch's (float64) beyond float32 rounding."""
    gen = torch.Generator().manual_seed(1)
    for b, t, heads, d in ((2, 13, 2, 12), (1, 70, 3, 8), (3, 1, 1, 4)):
        qkv = torch.randn(b, t, 3 * heads * d, generator=gen)
        bias = torch.zeros(b, t)
        bias[0, t // 2 + 1 :] = torch.finfo(torch.float32).min  # padded keys, as `masks.to_additive` makes
        for key_bias in (None, bias):
            got = _attend(attend, qkv, heads, key_bias)
            want = _attention_reference(qkv, heads, key_bias)
            if not torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5):
                err = (got.double() - want).abs().max().item()
                raise ValueError(f"its attention differs from PyTorch's by {err:.3g} at (B, T, H, D)="
                                 f"({b}, {t}, {heads}, {d})")  # fmt: skip


def _check_merge(merge) -> None:
    """Raise if the library's product with a residual merge differs from PyTorch's (float64)."""
    gen = torch.Generator().manual_seed(2)
    f32 = {"generator": gen, "dtype": torch.float32}
    for n, k, rows in ((37, 19, 13), (64, 48, 1), (20, 8, 40)):
        w, b = torch.randn(n, k, **f32), torch.randn(n, **f32)
        gamma, beta = torch.randn(n, **f32), torch.randn(n, **f32)
        x, residual = torch.randn(rows, k, **f32), torch.randn(rows, n, **f32)
        summed = F.linear(x.double(), w.double(), b.double()) + residual.double()
        p = _pack(w)
        for norm, want in (
            (None, summed),
            ((gamma, beta, 1e-5), F.layer_norm(summed, (n,), gamma.double(), beta.double(), 1e-5)),
        ):
            got = _bound_merge(merge, p, b, n, norm)(x, residual)
            if not torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5):
                err = (got.double() - want).abs().max().item()
                what = "LayerNorm(x W^T + b + residual)" if norm else "x W^T + b + residual"
                raise ValueError(f"its {what} differs from PyTorch's by {err:.3g} at rows={rows}, "
                                 f"(N, K)=({n}, {k})")  # fmt: skip


def _merge_call(merge, x: Tensor, residual: Tensor, p: Tensor, bias: Tensor | None, n: int,
                norm: tuple[Tensor, Tensor, float] | None) -> Tensor:  # fmt: skip
    x = rows_input(x, p.shape[1], n, "merged product")
    if residual.shape != (*x.shape[:-1], n) or residual.dtype is not torch.float32 or not residual.is_cpu:
        raise ValueError(f"merged product: residual {tuple(residual.shape)} {residual.dtype} for an output "
                         f"{(*x.shape[:-1], n)} float32")  # fmt: skip
    gamma, beta, eps = norm if norm is not None else (None, None, 0.0)
    return merge(x, p, bias, residual, gamma, beta, eps)


def _bound_merge(merge, p: Tensor, bias: Tensor | None, n: int, norm: tuple[Tensor, Tensor, float] | None):
    """``fn(x, residual)``: the product of x with the panels ``p`` (and ``bias``) plus ``residual``, then
    LayerNorm with ``norm`` = (weight, bias, eps) where given; the tensors checked and bound."""
    _bound(None, p, bias, n)  # the same checks of the panels and the bias
    bias = None if bias is None else bias.detach().contiguous()
    if norm is not None:
        gamma, beta, eps = norm
        gamma, beta = gamma.detach().float().contiguous(), beta.detach().float().contiguous()
        if gamma.shape != (n,) or beta.shape != (n,) or not gamma.is_cpu or not beta.is_cpu:
            raise ValueError(f"merged product: LayerNorm weight {tuple(gamma.shape)} and bias "
                             f"{tuple(beta.shape)} for {n} columns")  # fmt: skip
        norm = (gamma, beta, float(eps))
    return functools.partial(_merge_call, merge, p=p, bias=bias, n=n, norm=norm)


def cached_merge_fn(
    holder: nn.Module, weight: Tensor, bias: Tensor | None, norm: nn.LayerNorm | None, name: str = "_weight"
) -> Callable[[Tensor, Tensor], Tensor]:
    """``fn(x, residual)``: a residual sub-layer's output product and merge in one kernel call,
    ``norm(residual + F.linear(x, weight, bias))`` (post-LN) or, with ``norm`` None, ``residual + F.linear(x,
    weight, bias)`` (pre-LN): no separate add and LayerNorm passes, and one OpenMP region instead of three.
    ``norm`` an ``nn.LayerNorm`` over the last dimension with weight and bias. Its own LayerNorm (two
    passes in float32): within 1e-6 of PyTorch's. Kept beside ``holder`` until one of the tensors changes
    (a new ``norm.eps`` is not seen: `attnlab.accel.derived.clear_derived_weights` after changing it); the
    panels are the ones `product_fn` uses under the same ``name``. RuntimeError where the kernel is not
    `available`."""
    ops = _kernel()
    if isinstance(ops, str):
        raise RuntimeError(f"the few-row product kernel is not available: {ops}")
    sources = tuple(t for t in (weight, bias) if t is not None)
    if norm is not None:
        sources += (norm.weight, norm.bias)

    def build():
        spec = None if norm is None else (norm.weight, norm.bias, norm.eps)
        return _bound_merge(ops.merge, panels(holder, weight, name), bias, weight.shape[0], spec)

    return derived(holder, name + ("_norm_merge_fn" if norm is not None else "_merge_fn"), sources, build)


def _attend(attend, qkv: Tensor, heads: int, key_bias: Tensor | None) -> Tensor:
    b, t, width = qkv.shape
    if qkv.dtype is not torch.float32 or not qkv.is_cpu or width % (3 * heads):
        raise ValueError(f"attention: qkv {tuple(qkv.shape)} {qkv.dtype} {qkv.device} for {heads} heads "
                         "(float32 CPU (B, T, 3 * H * D) expected)")  # fmt: skip
    if key_bias is not None and (key_bias.shape != (b, t) or key_bias.dtype is not torch.float32):
        raise ValueError(f"attention: key_bias {tuple(key_bias.shape)} {key_bias.dtype}, expected ({b}, {t}) "
                         "float32")  # fmt: skip
    return attend(qkv, heads, key_bias)


def attention(qkv: Tensor, heads: int, key_bias: Tensor | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(D) + key_bias) v`` for every head, on the kernel: qkv (B, T, 3 * H * D) float32,
    the stacked query/key/value product (each token's query, then key, then value, heads adjacent);
    key_bias (B, T) additive per key (`attnlab.nn.masks.to_additive`'s padding) or None -> (B, T, H * D),
    the heads merged. Its own softmax (csrc/epilogue.h's exp) and summation order: within 1e-6 of PyTorch's
    scaled_dot_product_attention. RuntimeError where the kernel is not `available`."""
    ops = _kernel()
    if isinstance(ops, str):
        raise RuntimeError(f"the few-row product kernel is not available: {ops}")
    return _attend(ops.attention, qkv, heads, key_bias)


def _checked_ops() -> Ops:
    """The loaded library's ops, checked (raises if it is another version or computes wrongly)."""
    check_version("few_row_gemm", VERSION)
    register_fakes_once({"few_row_gemm": _product_fake, "product_add_norm": _merge_fake,
                         "attention": _attention_fake})  # fmt: skip
    ops = torch.ops.attnlab
    checked = Ops(ops.few_row_gemm.default, ops.product_add_norm.default, ops.attention.default)
    _check(checked.product)
    _check_attention(checked.attention)
    _check_merge(checked.merge)
    return checked


def _load():
    """The checked kernel's ops, or the reason there are none (a string)."""
    return load_library(SOURCE, "ATTNLAB_FEW_ROW_GEMM", _checked_ops)


@functools.cache
def _kernel():
    return warn_unless_loaded(
        _load(), "the panel product kernel", "slower for generation and encoder inference",
        "ATTNLAB_FEW_ROW_GEMM", FewRowGemmWarning,
    )  # fmt: skip


def available() -> bool:
    """True when the kernel is built, loaded and checked (built on the first call)."""
    return not isinstance(_kernel(), str)


def unavailable_reason() -> str | None:
    """Why the kernel is not used, or None when it is."""
    got = _kernel()
    return got if isinstance(got, str) else None


def _pack(weight: Tensor) -> Tensor:
    """W (N, K) as (ceil(N / 8), K, 8) panels, the last zero-padded (the layout in the C++ file)."""
    n, k = weight.shape
    padded = torch.zeros(-(-n // PANEL) * PANEL, k, dtype=torch.float32, device="cpu")
    padded[:n] = weight.detach()
    return padded.view(padded.shape[0] // PANEL, PANEL, k).transpose(1, 2).contiguous()


def panels(holder: nn.Module, weight: Tensor, name: str = "_weight") -> Tensor:
    """``weight``'s panels, kept beside ``holder`` by `attnlab.accel.derived.derived` (rebuilt when the weight
    changes; never saved). Like the column-major copy it replaces, it doubles the memory of those weights.
    A write that bypasses the weight's version counter (through ``.data`` or a NumPy view) is not seen:
    call `attnlab.accel.derived.clear_derived_weights` after one, as for every derived weight."""
    return derived(holder, name + "_panels", (weight,), lambda: _pack(weight))


def _call(op, x: Tensor, p: Tensor, bias: Tensor | None, n: int, act: int = 0) -> Tensor:
    """The kernel's ``F.linear(x, W, bias)`` (``act`` 0) or ``F.gelu`` of it (``act`` `GELU`): x (..., K),
    ``p`` W's panels (`_pack`), ``bias`` (N,) contiguous float32 or None -> (..., N). ``x`` is checked here
    for the error's message (the op checks it again, and every other tensor). Kept lean: a decoding step
    makes some 25 of these calls."""
    return op(rows_input(x, p.shape[1], n, "few-row product"), p, bias, n, act)


def rows_input(x: Tensor, k: int, n: int, what: str) -> Tensor:
    """``x`` (..., K) if it is float32 on the CPU with K columns, else ValueError naming ``what``. For this
    module's products and `attnlab.accel.int8_gemm`'s (their ops make it contiguous; the dispatcher
    materialises a negated or zero tensor's values)."""
    if x.dtype is not torch.float32 or not x.is_cpu or x.dim() == 0 or x.shape[-1] != k:
        raise ValueError(f"{what}: x {tuple(x.shape)} {x.dtype} {x.device} against a ({n}, {k}) weight "
                         "(float32 CPU input expected)")  # fmt: skip
    return x


def _bound(fn, p: Tensor, bias: Tensor | None, n: int, act: int = 0) -> Callable[[Tensor], Tensor]:
    """``_call`` with the panels and bias checked and bound (the partial keeps them alive)."""
    if (
        p.dtype != torch.float32
        or not p.is_cpu
        or p.dim() != 3
        or p.shape[2] != PANEL
        or p.shape[0] * PANEL < n
        or not p.is_contiguous()
    ):
        raise ValueError(f"few-row product: panels {tuple(p.shape)} {p.dtype} for {n} columns")
    if bias is not None:
        if bias.shape != (n,) or bias.dtype != torch.float32 or not bias.is_cpu:
            raise ValueError(
                f"few-row product: bias {tuple(bias.shape)} {bias.dtype} for {n} float32 columns"
            )
        bias = bias.detach().contiguous()
    if act not in (0, GELU):
        raise ValueError(f"few-row product: act must be 0 or {GELU} (GELU), got {act!r}")
    return functools.partial(_call, fn, p=p, bias=bias, n=n, act=act)


def product(x: Tensor, p: Tensor, bias: Tensor | None, n: int, act: int = 0) -> Tensor:
    """``F.linear(x, W, bias)`` (or its GELU, ``act`` `GELU`) for x (..., K) float32 with the panels ``p`` of
    W (N, K): (..., N)."""
    ops = _kernel()
    if isinstance(ops, str):
        raise RuntimeError(f"the few-row product kernel is not available: {ops}")
    return _bound(ops.product, p, bias, n, act)(x)


def cached_product_fn(
    holder: nn.Module, weight: Tensor, bias: Tensor | None, name: str = "_weight", act: int = 0
) -> Callable[[Tensor], Tensor]:
    """`product_fn`, itself kept beside ``holder`` until ``weight`` or ``bias`` changes (one cache lookup
    instead of the panels' lookup and the checks of every call): for `attnlab.accel.linear.Linear`, called at
    every product. The panels are the ones `product_fn` uses under the same ``name``."""
    sources = (weight,) if bias is None else (weight, bias)
    key = name + ("_gelu_fn" if act else "_fn")
    return derived(holder, key, sources, lambda: product_fn(holder, weight, bias, name, act))


def product_fn(
    holder: nn.Module, weight: Tensor, bias: Tensor | None, name: str = "_weight", act: int = 0
) -> Callable[[Tensor], Tensor]:
    """``fn(x) = F.linear(x, weight, bias)`` on the kernel (``act`` `GELU`: ``F.gelu`` of it, within 4e-7 of
    the exact function: the epilogue's own erf, csrc/epilogue.h), the panels taken now (see `panels`); raises
    RuntimeError where the kernel is not `available`."""
    ops = _kernel()
    if isinstance(ops, str):
        raise RuntimeError(f"the few-row product kernel is not available: {ops}")
    return _bound(ops.product, panels(holder, weight, name), bias, weight.shape[0], act)
