"""Keep freed memory for reuse: glibc's allocator tuned for repeated CPU forwards.

Why: glibc's ``malloc`` serves every block above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
and returns it with ``munmap`` when freed. A forward at batch size 32 makes tensors larger than that (BERT's
feed-forward activation at B=32, T=128: 48 MiB), so each one is new memory that the kernel must fault in and
zero page by page, on every forward (``benchmarks/inference.py``; figures in docs/design_measurements.md).
ONNX Runtime keeps its own arena and never pays this; PyTorch and HF's models on glibc do.

`keep_freed_memory` turns glibc's mmap path off (``M_MMAP_MAX`` 0: large blocks come from the heap too) and
stops it trimming the heap's top (``M_TRIM_THRESHOLD`` at its maximum), so a freed block is reused by the
next forward. The process keeps its peak memory instead of returning it to the system: what a server
wants, and what an arena allocator (ONNX Runtime's, jemalloc's) does. Where glibc cannot give the heap more
room, it still falls back to mmap. It acts process-wide; `attnlab serve` and `attnlab predict` call it at
start, and ``ATTNLAB_MALLOC=default`` leaves glibc's defaults. Nothing happens off glibc (musl, macOS).

`bound_kernel_caches`: oneDNN (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) and its C++ wrapper ideep
(``LRU_CACHE_CAPACITY``) keep a compiled kernel per input shape, 1,024 each by default, for the int8 layers'
products and attnlab's oneDNN float32 path. A server sees a new batch shape with almost every batch, so they
fill (figures in docs/design_measurements.md). Training fills them too where its float32 products run on
oneDNN (`attnlab.accel.onednn_linear`): every token batch has its own shape, each a forward and two backward
kernels per layer, so the training commands (``translate-train``, ``pretrain``, ``finetune``, ``distill``)
cap them as well: a flat peak after the first steps instead of growth over hundreds of steps
(``benchmarks/training_memory.py``). Both are read when oneDNN first needs them, so the commands set them
before loading a model; a value already in the environment wins. `keep_freed_memory` is for inference only:
training keeps glibc's defaults (kept memory would hold 40% more for a training run, same benchmark).
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["bound_kernel_caches", "keep_freed_memory"]

# glibc's <malloc.h> parameter numbers
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1

_applied = False


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)  # the running process's C library
    except OSError:
        return None
    # only glibc has gnu_get_libc_version (musl has a mallopt that does nothing)
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def keep_freed_memory(environ: dict[str, str] | None = None) -> bool:
    """Tune glibc so freed blocks stay in the process for reuse (see the module doc). Returns whether the
    settings are in force: False off glibc, or when ``ATTNLAB_MALLOC`` is ``default``. Idempotent."""
    global _applied
    env = os.environ if environ is None else environ
    choice = env.get("ATTNLAB_MALLOC", "reuse").strip().lower()
    if choice not in ("reuse", "default"):
        raise ValueError(f"environment variable ATTNLAB_MALLOC must be 'reuse' or 'default', got {choice!r}")
    if choice == "default":
        return _applied
    if _applied:
        return True
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success
    _applied = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, _INT_MAX))
    return _applied


KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's, ideep's


def bound_kernel_caches(capacity: int = 64, environ: dict[str, str] | None = None) -> None:
    """Cap oneDNN's and ideep's per-shape kernel caches at ``capacity`` entries unless the environment sets
    them (see the module doc); effective only before oneDNN's first use in the process."""
    env = os.environ if environ is None else environ
    for name in KERNEL_CACHES:
        env.setdefault(name, str(capacity))
