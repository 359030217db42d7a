"""``FastLinear``: ``nn.Linear`` whose no-gradient CPU products run in the fastest layout for their rows.

Products of at most `SMALL_ROWS` rows without a gradient (a decoding step) take `small_product`: the
few-row kernel of `attnlab.accel.few_row_gemm` where it can be built, else the layout MKL streams fastest.
Products of up to `PACKED_ROWS` rows without a gradient (an encoder's tokens in inference) take that kernel
too on CPUs not made by Intel (`packed_rows`): its copy of the weight is packed once, where MKL packs the
weight again at every call. Every other product is `attnlab.accel.onednn_linear.linear` (oneDNN or
``F.linear``).

The module keeps ``nn.Linear``'s parameters, names and initialisation (`attnlab.accel.optimize` re-classes
a model's ``nn.Linear`` layers to it in place), so checkpoints and HF key mappings are unchanged and
``isinstance(m, nn.Linear)`` still holds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attnlab.accel.few_row_gemm as few_row_gemm
import attnlab.accel.onednn_linear as gemm
from attnlab.accel.derived import derived
from attnlab.accel.onednn_linear import linear
from attnlab.cpu import cpu_vendor

__all__ = [
    "FastLinear",
    "GenerationHead",
    "small_rows",
    "small_product",
    "small_product_fn",
    "packed_rows",
    "packed_weight",
    "column_major_copy",
]

# Rows (M) at or below which a no-grad product picks its weight layout by shape (`small_product`: decoding)
SMALL_ROWS = 8
# Weight elements (1 MiB of float32) from which `small_product` treats a weight as streamed from memory
STREAMED_WEIGHT = 1 << 18
# Weight elements (64 MiB of float32) above which `small_product` keeps no column-major copy: the copy would
# double a large output layer (BERT's 30,522 x 768 head for one short fill-mask request, GPT-2's 50,257 x 768)
MAX_COPIED_WEIGHT = 1 << 24
# Rows (M) up to which a no-grad product of `FastLinear` runs on the kernel's panels (`packed_rows`):
# B=32 x T=128, the largest shape `benchmarks/inference.py` times
PACKED_ROWS = 4096
# The cap instead of `MAX_COPIED_WEIGHT` (256 MiB of float32) for the output layer of a generation, which
# repeats its product at every token (`GenerationHead`): GPT-2's output layer (38.6 M elements) and
# gpt2-large's (64.3 M) are copied for the few-row kernel, gpt2-xl's (80.4 M) is not
MAX_GENERATION_COPY = 1 << 26
# MKL on its own vendor's CPUs: `small_product` keeps the plain product at 1-8 rows there
INTEL_MKL = cpu_vendor() == "GenuineIntel"


def small_rows(x: Tensor, weight: Tensor) -> bool:
    """True for a product of at most `SMALL_ROWS` rows, float32 on the CPU, with no gradient recorded: one
    step of decoding (a row per sequence). `small_product` then picks the weight's layout by shape."""
    return kernel_product(x, weight) and x.numel() <= SMALL_ROWS * weight.shape[1]


def packed_rows(x: Tensor, weight: Tensor) -> bool:
    """True for a product of at most `PACKED_ROWS` rows that `FastLinear` sends to the kernel's panels: no
    gradient, float32 on the CPU, a weight of at most `MAX_COPIED_WEIGHT` elements, PyTorch's own product
    chosen (`cpu_gemm` ``"default"``: with AVX-512, oneDNN's are faster), a CPU not made by Intel (MKL takes
    its own fast path there), a weight not made under ``torch.inference_mode``, and the kernel
    `few_row_gemm.available`.

    Why: at these sizes MKL packs the weight into its own layout at every call; the kernel reads a copy
    packed once (`few_row_gemm.panels`, kept beside the module; it doubles the memory of those weights).
    Outputs within 2e-6 of PyTorch's fused encoder-layer kernel's. Shown by ``benchmarks/inference.py``
    (figures in docs/design_measurements.md)."""
    return kernel_product(x, weight) and x.numel() <= PACKED_ROWS * weight.shape[1] and packed_weight(weight)


def packed_weight(weight: Tensor) -> bool:
    """`packed_rows`'s tests of the weight and the machine (for a caller that checked the input). A weight
    made under ``torch.inference_mode`` has no version counter, so its panels could not be kept
    (`attnlab.accel.derived`): it keeps MKL's product rather than packing a copy at every call."""
    return (
        weight.dtype == torch.float32
        and weight.device.type == "cpu"
        and weight.numel() <= MAX_COPIED_WEIGHT
        and gemm.cpu_gemm() == "default"
        and not INTEL_MKL
        and not weight.is_inference()
        and few_row_gemm.available()
    )


def kernel_product(x: Tensor, weight: Tensor) -> bool:
    """Whether a product could leave PyTorch's: no gradient recorded, float32 on the CPU, nothing tracing or
    transforming it (the row count is the caller's test)."""
    return (
        not torch.is_grad_enabled()  # first: training's products leave at the cheapest test
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.device.type == "cpu"
        and weight.device.type == "cpu"  # a CUDA weight with CPU rows: F.linear's error, not a silent copy
        and not torch.compiler.is_compiling()  # before the sizes: no guards on symbolic sizes
        and not torch.jit.is_tracing()
        and not torch.is_autocast_enabled("cpu")  # autocast's products return its dtype: F.linear's path
        and not _functorch_active()  # vmap's batched tensors have no data pointer for the kernel
        and x.dim() >= 2
    )


# whether a torch.func transform (vmap, grad) is running; False where this PyTorch lacks the query
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def small_product(
    holder: nn.Module, x: Tensor, weight: Tensor, bias: Tensor | None, name: str = "_weight_t"
) -> Tensor:
    """``F.linear(x, weight, bias)`` for a `small_rows` product, x (..., K), weight (N, K) -> (..., N). Those
    few rows read the whole weight, so the step is bound by how well the product streams it.

    First choice, for a weight of at most `MAX_COPIED_WEIGHT` elements: attnlab's few-row kernel
    (`attnlab.accel.few_row_gemm`), on a panel copy of the weight kept on ``holder`` under ``name +
    "_panels"``, where it can be built (x86-64 with AVX2 and FMA, a C++ compiler): it streams the weight
    faster than any of MKL's layouts below (``ATTNLAB_FEW_ROW_GEMM=off`` returns to them).

    Otherwise the layout in which PyTorch's CPU BLAS (MKL) is fastest for the shape:

    - N >= K, 1-2 rows, a weight of at most `MAX_COPIED_WEIGHT` elements, a CPU not made by Intel: ``x @ W``
      on a contiguous (K, N) copy of W (GPT-2's ``Conv1D`` layout), kept on ``holder`` under ``name``
      (`column_major_copy`). On Intel CPUs MKL's plain ``x @ W^T`` is as fast or faster, so there `linear`
      takes them, and no copy is kept (`INTEL_MKL`).
    - N > K, 3-8 rows, a weight of at least `STREAMED_WEIGHT` elements, a CPU not made by Intel:
      ``(W @ x^T)^T``, W as stored: MKL then packs the few rows, not the weight. The result is
      column-major (a copy costs more than the strided reads after it). A smaller weight stays in cache
      from step to step, and there this form is the slowest. On Intel CPUs MKL's own path for ``x @ W^T``
      is the faster one at 3-8 rows, so there `linear` takes them (`INTEL_MKL`).
    - otherwise (N < K; a larger weight at 1-2 rows; N = K or a small weight at 3-8 rows): `linear`.

    Why: ``benchmarks/gemm.py --small-rows`` (figures in docs/design_measurements.md).

    Results equal `linear`'s up to float32 summation order (about 1e-7 relative). The kernel's do not depend
    on the number of rows or threads; MKL's may."""
    n, k = weight.shape
    if n * k <= MAX_COPIED_WEIGHT and few_row_gemm.available():  # the kernel, its bound product kept
        return few_row_gemm.cached_product_fn(holder, weight, bias, name)(x)  # (binding it: 40 of 45 us)
    return small_product_fn(holder, weight, bias, x.numel() // k, name)(x)


def small_product_fn(
    holder: nn.Module,
    weight: Tensor,
    bias: Tensor | None,
    rows: int,
    name: str = "_weight_t",
    max_copy: int | None = None,
) -> Callable[[Tensor], Tensor]:
    """`small_product`'s product for inputs of ``rows`` rows, its layout chosen and its weight copy taken
    now: ``fn(x)`` computes exactly what ``small_product(holder, x, weight, bias, name)`` does, without
    choosing again (for a caller that repeats one product step after step: `attnlab.accel.decoding_step`).
    ``max_copy`` replaces `MAX_COPIED_WEIGHT`, the largest weight (elements) copied into the kernel's panels.
    A later change of the weight is not seen by ``fn`` (it may hold a copy): make a new one."""
    n, k = weight.shape
    cap = MAX_COPIED_WEIGHT if max_copy is None else max_copy
    if n * k <= cap and few_row_gemm.available():
        return few_row_gemm.product_fn(holder, weight, bias, name)
    if rows <= 2:  # the column-major copy keeps the common cap: `max_copy` is for the kernel's panels
        if n < k or n * k > MAX_COPIED_WEIGHT or INTEL_MKL:
            return functools.partial(linear, weight=weight, bias=bias)
        # F.linear on the column-major copy is MKL's x @ W with W (K, N) contiguous: addmm in one call
        return functools.partial(F.linear, weight=column_major_copy(holder, weight, name), bias=bias)
    if n <= k or n * k < STREAMED_WEIGHT or INTEL_MKL:
        return functools.partial(linear, weight=weight, bias=bias)
    return functools.partial(_transposed_product, weight=weight, bias=bias)


def _transposed_product(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``(W @ x^T)^T (+ bias)``: x (..., K), weight (N, K) -> (..., N), column-major (a view, no copy)."""
    n, k = weight.shape
    x2 = x.reshape(-1, k)
    out_t = torch.addmm(bias[:, None], weight, x2.t()) if bias is not None else torch.mm(weight, x2.t())
    return out_t.t().reshape(*x.shape[:-1], n)


def column_major_copy(holder: nn.Module, weight: Tensor, name: str = "_weight_t") -> Tensor:
    """``weight`` (N, K) stored column-major: the (N, K) transpose of a contiguous (K, N) copy, kept beside
    ``holder`` under ``name`` by `attnlab.accel.derived.derived` (rebuilt when the weight is another tensor,
    changes in place or gets new data; never saved). It doubles the memory of the weights that decoding
    reads this way."""
    return derived(holder, name, (weight,), lambda: weight.detach().t().contiguous().t())


class FastLinear(nn.Linear):
    """``nn.Linear`` computed by `linear` (same parameters, state-dict keys and initialisation); one decoding
    step's few rows go through `small_product`, an inference product of up to `PACKED_ROWS` rows through the
    kernel's panels where `packed_rows` holds."""

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight
        if kernel_product(x, weight):  # `small_rows` and `packed_rows`, their common tests made once
            k = weight.shape[1]
            if x.numel() <= SMALL_ROWS * k:
                return small_product(self, x, weight, self.bias)
            if x.numel() <= PACKED_ROWS * k and packed_weight(weight):
                return few_row_gemm.cached_product_fn(self, weight, self.bias, "_weight_t")(x)
        return linear(x, weight, self.bias)


class GenerationHead(FastLinear):
    """A language model's output layer: a generation repeats its product at every token, so its few-row
    products copy a weight of up to `MAX_GENERATION_COPY` elements into the kernel's panels, where other
    layers keep `MAX_COPIED_WEIGHT` (GPT-2's 38.6 M-element output layer is copied). The same product as
    `FastLinear`'s up to float32 summation order."""

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight
        n, k = weight.shape
        if (
            n * k <= MAX_GENERATION_COPY
            and kernel_product(x, weight)
            and x.numel() <= SMALL_ROWS * k
            and few_row_gemm.available()
        ):
            return few_row_gemm.cached_product_fn(self, weight, self.bias, "_weight_t")(x)
        return super().forward(x)
