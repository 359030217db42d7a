"""The few-row product kernel: ``x @ W^T + b`` for one decoding step's 1-8 rows (``csrc/few_row_gemm.cpp``).

Why: such a product reads the whole weight and does little with it, so it runs at the speed the weight streams
from memory. PyTorch's CPU BLAS (MKL) streams it well below the memory's speed; the kernel reads a copy of
the weight laid out for it, once and in order. Why: ``benchmarks/gemm.py --small-rows`` prints both (figures
in docs/design_measurements.md). The layout and the arithmetic are described in the C++ file; a row's
result does not depend on the other rows of the call or on the thread count.

The library is built on first use, not at install time, so that an install needs no compiler:

- ``g++`` (or ``$CXX``) compiles the file with ``-O3 -mavx2 -mfma``, and with ``-fopenmp`` when the process
  already runs GNU OpenMP (PyTorch's wheels bring ``libgomp.so.1``): the library then shares PyTorch's
  threads instead of starting a second pool;
- into ``$ATTNLAB_CACHE/kernels`` (default ``$XDG_CACHE_HOME/attnlab/kernels`` or
  ``~/.cache/attnlab/kernels``, and ``$TMPDIR/attnlab-<uid>/kernels`` where that cannot be created), under a
  name that hashes the source, the flags and the compiler, written to a temporary name and renamed
  (`attnlab.atomic.atomic_path`; concurrent processes at worst build it twice); a directory that another
  user may write to is refused;
- loaded with ``ctypes``, then checked: its version number, and its products on random data against
  ``F.linear`` in float64 (every row count 1-9, 13 and 40, a column count that is not a multiple of 8, with
  and without bias, with and without the GELU epilogue). A library that fails any of it is not used.

`available` is False, and the callers keep PyTorch's products, where any of this fails or where
``ATTNLAB_FEW_ROW_GEMM=off``. A `FewRowGemmWarning` says why, once, where the user can mend it (no compiler,
a failed build or check, a cache directory refused); a CPU without AVX2 and FMA (or not x86-64) is not
warned about. The products then differ from the kernel's in float32 summation order only.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.accel.derived import derived
from attnlab.atomic import atomic_path
from attnlab.cpu import cpu_flags

__all__ = [
    "FewRowGemmWarning", "attention", "available", "cached_product_fn", "load_library", "panels", "product",
    "product_fn", "rows_input", "unavailable_reason", "warn_unless_loaded", "cached_merge_fn",
]  # fmt: skip

SOURCE = Path(__file__).with_name("csrc") / "few_row_gemm.cpp"
VERSION = 4  # attnlab_few_row_gemm_version() of the source this module speaks to
PANEL = 8  # output columns per panel: one AVX register of float32
GELU = 1  # the ``act`` that applies the exact GELU to each output (csrc/epilogue.h)
NOT_THIS_CPU = "the CPU is not x86-64 with AVX2 and FMA (or /proc/cpuinfo cannot be read)"


class FewRowGemmWarning(RuntimeWarning):
    """The kernel could not be built or failed its check; PyTorch's products are used instead."""


def _temporary_cache() -> Path:
    return Path(tempfile.gettempdir()) / f"attnlab-{os.getuid()}"


def _cache_dir() -> Path:
    root = os.environ.get("ATTNLAB_CACHE")
    if root:
        return Path(root) / "kernels"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not xdg:
        try:
            xdg = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry (a container's arbitrary uid)
            return _temporary_cache() / "kernels"
    return Path(xdg) / "attnlab" / "kernels"


def _gnu_openmp_loaded() -> bool:
    """Whether this process has GNU OpenMP mapped (PyTorch's own ``libgomp``): only then is ``-fopenmp``
    safe, since the library's ``libgomp.so.1`` resolves to the copy already loaded."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return False


def _private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) and refuse it if another user owns it or may write to it: a library
    loaded from there runs as this process."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{path} is owned by uid {st.st_uid} or writable by others (mode {oct(st.st_mode)})")


def _build(compiler: list[str], openmp: bool, again: bool = False, source_path: Path | None = None) -> Path:
    """The compiled library's path, compiling ``source_path`` (default `SOURCE`) unless a build of the same
    source and flags is there (or ``again``: the one there failed to load or its check)."""
    source_path = SOURCE if source_path is None else source_path
    flags = ["-O3", "-mavx2", "-mfma", "-shared", "-fPIC", "-std=c++17"] + (["-fopenmp"] if openmp else [])
    source = source_path.read_bytes()
    for header in sorted(source_path.parent.glob("*.h")):  # the files it includes are part of the build
        source += header.read_bytes()
    key = hashlib.sha256(source + " ".join([*compiler, *flags]).encode()).hexdigest()[:20]
    out_dir = _cache_dir()
    try:
        _private_dir(out_dir)
    except OSError as e:
        if os.environ.get("ATTNLAB_CACHE"):
            raise  # the directory the user named: say so rather than build elsewhere
        # the home cache cannot be used (read-only home, no home): a private directory in the temporary one,
        # each level checked (another user could have made the first in the shared temporary directory)
        fallback = _temporary_cache() / "kernels"
        try:
            _private_dir(fallback.parent)
            _private_dir(fallback)
        except OSError as e2:
            raise OSError(f"{e}; and {e2}") from e2
        out_dir = fallback
    target = out_dir / f"{source_path.stem}-{key}.so"
    if target.is_file() and not again:
        return target
    with atomic_path(target) as tmp:  # g++ writes a temporary name; renamed on success, removed on failure
        done = subprocess.run(
            [*compiler, *flags, "-o", str(tmp), str(source_path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"{' '.join(compiler)} exited with {done.returncode}: {done.stderr.strip()[-800:]}")
    return target


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
            got = _attend(attend, qkv, heads, key_bias, 1)
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


def _merge_call(merge, x: Tensor, residual: Tensor, p_ptr: int, b_ptr: int | None, k: int, n: int,
                norm_ptrs: tuple[int, int, float] | None, keep: tuple) -> Tensor:  # fmt: skip
    x = rows_input(x, k, n, "merged product")
    if residual.shape != (*x.shape[:-1], n) or residual.dtype is not torch.float32 or not residual.is_cpu:
        raise ValueError(f"merged product: residual {tuple(residual.shape)} {residual.dtype} for an output "
                         f"{(*x.shape[:-1], n)} float32")  # fmt: skip
    residual = rows_input(residual, n, n, "merged product (residual)")
    y = torch.empty(residual.shape, dtype=torch.float32)
    gamma, beta, eps = norm_ptrs if norm_ptrs is not None else (None, None, 0.0)
    rows = residual.numel() // n if n else 0
    merge(rows, n, k, x.data_ptr(), p_ptr, b_ptr, residual.data_ptr(), gamma, beta, eps, y.data_ptr(),
          torch.get_num_threads())  # fmt: skip
    return y


def _bound_merge(merge, p: Tensor, bias: Tensor | None, n: int, norm: tuple[Tensor, Tensor, float] | None):
    """``fn(x, residual)``: the product of x with the panels ``p`` (and ``bias``) plus ``residual``, then
    LayerNorm with ``norm`` = (weight, bias, eps) where given; the tensors checked and bound."""
    _bound(None, p, bias, n)  # the same checks of the panels and the bias
    bias = None if bias is None else bias.detach().contiguous()
    ptrs = None
    if norm is not None:
        gamma, beta, eps = norm
        gamma, beta = gamma.detach().float().contiguous(), beta.detach().float().contiguous()
        if gamma.shape != (n,) or beta.shape != (n,) or not gamma.is_cpu or not beta.is_cpu:
            raise ValueError(f"merged product: LayerNorm weight {tuple(gamma.shape)} and bias "
                             f"{tuple(beta.shape)} for {n} columns")  # fmt: skip
        norm, ptrs = (gamma, beta), (gamma.data_ptr(), beta.data_ptr(), float(eps))
    b_ptr = None if bias is None else bias.data_ptr()
    return functools.partial(_merge_call, merge, p_ptr=p.data_ptr(), b_ptr=b_ptr, k=p.shape[1], n=n,
                             norm_ptrs=ptrs, keep=(p, bias, norm))  # fmt: skip


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
    fn = _kernel()
    if isinstance(fn, str):
        raise RuntimeError(f"the few-row product kernel is not available: {fn}")
    sources = tuple(t for t in (weight, bias) if t is not None)
    if norm is not None:
        sources += (norm.weight, norm.bias)

    def build():
        spec = None if norm is None else (norm.weight, norm.bias, norm.eps)
        return _bound_merge(fn.merge, panels(holder, weight, name), bias, weight.shape[0], spec)

    return derived(holder, name + ("_norm_merge_fn" if norm is not None else "_merge_fn"), sources, build)


def _attend(attend, qkv: Tensor, heads: int, key_bias: Tensor | None, threads: int) -> Tensor:
    b, t, width = qkv.shape
    if qkv.dtype is not torch.float32 or not qkv.is_cpu or width % (3 * heads):
        raise ValueError(f"attention: qkv {tuple(qkv.shape)} {qkv.dtype} {qkv.device} for {heads} heads "
                         "(float32 CPU (B, T, 3 * H * D) expected)")  # fmt: skip
    if key_bias is not None and (key_bias.shape != (b, t) or key_bias.dtype is not torch.float32):
        raise ValueError(f"attention: key_bias {tuple(key_bias.shape)} {key_bias.dtype}, expected ({b}, {t}) "
                         "float32")  # fmt: skip
    qkv = qkv.contiguous()
    key_bias = None if key_bias is None else key_bias.contiguous()
    d = width // (3 * heads)
    out = torch.empty(b, t, heads * d, dtype=torch.float32)
    attend(b, t, heads, d, qkv.data_ptr(), None if key_bias is None else key_bias.data_ptr(), out.data_ptr(),
           1.0 / math.sqrt(d) if d else 1.0, threads)  # fmt: skip
    return out


def attention(qkv: Tensor, heads: int, key_bias: Tensor | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(D) + key_bias) v`` for every head, on the kernel: qkv (B, T, 3 * H * D) float32,
    the stacked query/key/value product (each token's query, then key, then value, heads adjacent);
    key_bias (B, T) additive per key (`attnlab.nn.masks.to_additive`'s padding) or None -> (B, T, H * D),
    the heads merged. Its own softmax (csrc/epilogue.h's exp) and summation order: within 1e-6 of PyTorch's
    scaled_dot_product_attention. RuntimeError where the kernel is not `available`."""
    fn = _kernel()
    if isinstance(fn, str):
        raise RuntimeError(f"the few-row product kernel is not available: {fn}")
    return _attend(fn.attention, qkv, heads, key_bias, torch.get_num_threads())


def _load():
    """The checked kernel function, or the reason there is none (a string)."""
    return load_library(SOURCE, "ATTNLAB_FEW_ROW_GEMM", _open)


def load_library(source: Path, switch: str, open_library: Callable[[Path], object]):
    """``open_library(path)`` of ``source`` built (or found in the cache) for this CPU and process, or the
    reason there is none (a string): the switch ``$switch`` is off, the CPU is not x86-64 with AVX2 and FMA,
    no compiler, a failed build, or ``open_library`` raised (a library that loads badly or fails its check
    is built once more). Shared by the kernels in ``csrc/``."""
    if os.environ.get(switch, "auto").lower() in ("0", "off", "false", "no"):
        return f"{switch}=off"
    if platform.machine().lower() not in ("x86_64", "amd64") or not {"avx2", "fma"} <= cpu_flags():
        return NOT_THIS_CPU
    cxx = shlex.split(os.environ.get("CXX", "g++")) or ["g++"]  # CXX may carry a launcher: "ccache g++"
    found = shutil.which(cxx[0])
    if found is None:
        return f"no C++ compiler: {cxx[0]!r} is not on PATH (install g++)"
    compiler = [found, *cxx[1:]]
    # -fopenmp only with GCC, whose libgomp.so.1 is the copy PyTorch loaded; clang's would bring libomp, a
    # second OpenMP runtime in the process
    openmp = _gnu_openmp_loaded() and "clang" not in Path(compiler[-1]).name
    try:
        try:
            return open_library(_build(compiler, openmp, source_path=source))
        except (OSError, ValueError, AttributeError):  # a cached build that is damaged: once more
            return open_library(_build(compiler, openmp, again=True, source_path=source))
    except Exception as e:  # noqa: BLE001 - whatever fails here, products fall back to PyTorch's
        return f"the kernel failed to build or load or its check: {e}"


def versioned_library(path: Path, name: str, version: int) -> ctypes.CDLL:
    """The library at ``path``, whose ``attnlab_{name}_version()`` must return ``version`` (ValueError
    otherwise: a build of other arguments' meaning). For each kernel's ``open_library``."""
    lib = ctypes.CDLL(str(path))
    found = getattr(lib, f"attnlab_{name}_version")()
    if found != version:
        raise ValueError(f"{path} is version {found}, expected {version}")
    return lib


def _open(path: Path):
    """The library's checked product function (raises if it does not load, is another version or computes
    wrongly)."""
    lib = versioned_library(path, "few_row_gemm", VERSION)
    fn = lib.attnlab_few_row_gemm
    fn.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_int]
    fn.restype = None
    attend = lib.attnlab_attention
    attend.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_int]
    attend.restype = None
    fn.attention = attend  # the same library's attention (`attention`)
    merge = lib.attnlab_product_add_norm
    merge.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 6 + [ctypes.c_float, ctypes.c_void_p]
    merge.argtypes += [ctypes.c_int]
    merge.restype = None
    fn.merge = merge  # and its product with the residual merge (`merged_product_fn`)
    _check(fn)
    _check_attention(attend)
    _check_merge(merge)
    return fn


@functools.cache
def _kernel():
    return warn_unless_loaded(
        _load(), "the panel product kernel", "slower for generation and encoder inference",
        "ATTNLAB_FEW_ROW_GEMM", FewRowGemmWarning,
    )  # fmt: skip


def warn_unless_loaded(got, what: str, cost: str, switch: str, category: type[Warning]):
    """``got`` (a `load_library` result), after a warning (stacklevel for a caller's caller) where it is
    a reason the user can mend (a compiler, a cache directory): none for the switch or the CPU."""
    if isinstance(got, str) and not got.startswith(switch) and got != NOT_THIS_CPU:
        warnings.warn(
            f"attnlab: {what} is not used ({got}); PyTorch's products are used instead, {cost}. It is "
            f"built into {_cache_dir()} (ATTNLAB_CACHE moves it); {switch}=off silences this.",
            category,
            stacklevel=4,
        )
    return got


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


def _call(
    fn, x: Tensor, p: Tensor, bias: Tensor | None, n: int, p_ptr: int, b_ptr: int | None, act: int = 0
) -> Tensor:
    """The kernel's ``F.linear(x, W, bias)`` (``act`` 0) or ``F.gelu`` of it (``act`` `GELU`): x (..., K),
    ``p`` W's panels (`_pack`) at address ``p_ptr``,
    ``bias`` (N,) contiguous float32 at ``b_ptr`` (or both None) -> (..., N). The caller keeps ``p`` and
    ``bias`` alive; this checks ``x``, which the C++ side trusts (a wrong size or type would read outside
    the tensors). Kept lean: a decoding step makes some 25 of these calls."""
    k = p.shape[1]
    x = rows_input(x, k, n, "few-row product")
    # y (..., N) row-major, as x: the rows are x's leading dimensions flattened. Sizes as ints: torch.empty
    # takes a torch.Size about 3 us slower
    shape = x.shape
    if len(shape) == 3:  # (B, T, K): a decoding step
        y = torch.empty(shape[0], shape[1], n, dtype=torch.float32, device="cpu")
    elif len(shape) == 2:
        y = torch.empty(shape[0], n, dtype=torch.float32, device="cpu")
    else:
        y = torch.empty([*shape[:-1], n], dtype=torch.float32, device="cpu")
    rows = x.numel() // k if k else y.numel() // max(n, 1)  # K = 0: no elements in x to count rows by
    fn(rows, n, k, x.data_ptr(), p_ptr, b_ptr, y.data_ptr(), torch.get_num_threads(), act)
    return y


def rows_input(x: Tensor, k: int, n: int, what: str) -> Tensor:
    """``x`` (..., K) as a kernel reads it -- float32 on the CPU, contiguous, its values in its memory (a
    negated or zero tensor materialised) -- or ValueError naming ``what``: the C++ side trusts the sizes and
    would read outside the tensor. For this module's products and `attnlab.accel.int8_gemm`'s."""
    if x.dtype is not torch.float32 or not x.is_cpu or x.dim() == 0 or x.shape[-1] != k:
        raise ValueError(f"{what}: x {tuple(x.shape)} {x.dtype} {x.device} against a ({n}, {k}) weight "
                         "(float32 CPU input expected)")  # fmt: skip
    if x.is_neg() or x._is_zerotensor():  # values the raw data does not show: materialised
        x = x.resolve_neg() if x.is_neg() else torch.zeros(x.shape, dtype=torch.float32)
    return x if x.is_contiguous() else x.contiguous()


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
    b_ptr = None if bias is None else bias.data_ptr()
    if act not in (0, GELU):
        raise ValueError(f"few-row product: act must be 0 or {GELU} (GELU), got {act!r}")
    return functools.partial(_call, fn, p=p, bias=bias, n=n, p_ptr=p.data_ptr(), b_ptr=b_ptr, act=act)


def product(x: Tensor, p: Tensor, bias: Tensor | None, n: int, act: int = 0) -> Tensor:
    """``F.linear(x, W, bias)`` (or its GELU, ``act`` `GELU`) for x (..., K) float32 with the panels ``p`` of
    W (N, K): (..., N)."""
    fn = _kernel()
    if isinstance(fn, str):
        raise RuntimeError(f"the few-row product kernel is not available: {fn}")
    return _bound(fn, p, bias, n, act)(x)


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
    fn = _kernel()
    if isinstance(fn, str):
        raise RuntimeError(f"the few-row product kernel is not available: {fn}")
    return _bound(fn, panels(holder, weight, name), bias, weight.shape[0], act)
