"""Tensors derived from parameters for inference, cached outside the modules until a source changes.

Two kinds today: the stacked query/key/value weight (`stacked_qkv`: one product instead of three, for the
fused encoder layer and a decoding step) and a weight stored column-major
(`attnlab.accel.linear.column_major_copy`: the layout MKL reads fastest for one or two rows).

`derived` keeps each result beside its module in a ``WeakKeyDictionary``: the entry goes with the module,
and deepcopy, pickling, ``torch.save`` and the state dict never see it. An entry holds its source tensors
themselves (compared by identity), so none of them can be freed and another tensor take its address while
the entry stands; their data pointers and version counters tell an in-place change or new data (an
optimizer step, ``load_state_dict``, ``.to()``). Writes that bypass the version counter (through ``.data``
or a NumPy view) are not seen: call `clear_derived_weights` after them. Sources made under
``torch.inference_mode`` keep no version counter, so nothing would tell a change: those results are built
on every call and not cached.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

__all__ = ["clear_derived_weights", "derived", "stacked_qkv"]

T = TypeVar("T")

# module -> {name: (source tensors, their (data_ptr, version, dtype), result)}
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def derived(holder: nn.Module, name: str, sources: Sequence[Tensor], build: Callable[[], T]) -> T:
    """``build()``, cached beside ``holder`` under ``name`` until any of ``sources`` changes (see the
    module docstring)."""
    if any(s.is_inference() for s in sources):
        return build()
    key = tuple((s.data_ptr(), s._version, s.dtype) for s in sources)
    entries = _CACHE.get(holder)
    if entries is None:
        entries = _CACHE[holder] = {}
    cached = entries.get(name)
    if cached is None or cached[1] != key or any(a is not b for a, b in zip(cached[0], sources, strict=True)):
        with torch.inference_mode(False):  # a normal tensor, with a version counter, under inference_mode
            value = build()  # (generate runs there): a result derived from it in turn can then be cached
        cached = (tuple(sources), key, value)
        entries[name] = cached  # one assignment: concurrent forwards at worst build it twice
    return cached[2]


def clear_derived_weights(model: nn.Module) -> None:
    """Drop every cached result of ``model``'s modules. Needed only after writing weights in a way their
    version counters do not record (through ``.data`` or a NumPy view)."""
    for module in model.modules():
        _CACHE.pop(module, None)


def stacked_qkv(attn: nn.Module) -> tuple[Tensor, Tensor | None]:
    """The (3H, H) weight and (3H,) bias (None without biases) of ``attn``'s ``query``, ``key`` and
    ``value`` projections stacked (GPT-2's ``c_attn``), cached by `derived`."""
    q, k, v = attn.query, attn.key, attn.value
    weights = (q.weight, k.weight, v.weight)
    biases = () if q.bias is None else (q.bias, k.bias, v.bias)

    def build() -> tuple[Tensor, Tensor | None]:
        bias = torch.cat([b.detach() for b in biases]) if biases else None
        return torch.cat([w.detach() for w in weights]), bias

    return derived(attn, "stacked_qkv", weights + biases, build)
