"""int8 dynamic quantization of attnlab's linear layers, for CPU inference.

``torch.ao.quantization.quantize_dynamic`` swaps modules whose type is exactly ``nn.Linear``; an
optimized model's `attnlab.accel.linear.FastLinear` (the subclass `attnlab.accel.optimize` swaps in) is not,
so it leaves almost all of such a model in float32 (about as fast as float32 for bert-base).
`quantize` swaps every ``nn.Linear`` (subclasses included) for `Int8Linear`:

- weights: int8, symmetric, one scale per output channel (row), ``scale = max|w_row| / 127``;
- activations: quantized on the fly per call, per row (token), the product accumulated in int32 and the
  bias added in float32. Two engines (`auto_engine` picks one), neither on PyTorch's deprecated quantized
  tensors (``torch.quantize_per_channel``, ``torch.ops.quantized.linear_dynamic``):
  - ``attnlab``: attnlab's kernel (`attnlab.accel.int8_gemm`), a scale and zero point per row, the
    quantization inside the product: 8 bits on the 8-bit dot product of CPUs with VNNI, 7 bits on AVX2;
  - ``onednn``: the same numbers, the integer product on oneDNN's u8 x s8 GEMM (`attnlab.accel.onednn_int8`),
    faster where the CPU has VNNI;
  - ``int_mm``: PyTorch's ``torch._int_mm`` (int8 x int8 -> int32) with each row of x quantized
    symmetrically by PyTorch operations first, for CPUs where attnlab's kernel is not available.

``reduce_range`` (``int_mm``) uses 7-bit activations: needed where the CPU has no VNNI instructions (AVX2's
``vpmaddubsw`` saturates int16 sums of 8-bit products); with VNNI (``avx512_vnni`` / ``avx_vnni``) the full
8 bits are exact and more accurate, so the default picks by the CPU's flags. The ``attnlab`` engine's bits
are its kernel's.

Embeddings, LayerNorm, softmax and the attention products stay float32. Quantize a model in eval mode for
inference only: `Int8Linear` has no gradient.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.accel import int8_gemm, onednn_int8
from attnlab.cpu import cpu_flags
from attnlab.nn.attention import MultiHeadAttention

ENGINES = ("onednn", "attnlab", "int_mm")


def cpu_has_vnni() -> bool:
    """Whether the CPU has 8-bit dot-product instructions (x86 VNNI); False when it cannot be told."""
    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


def auto_engine(kernel: bool | None = None) -> str:
    """The engine `quantize` packs for: ``onednn`` where `onednn_int8.available` (VNNI), else ``attnlab``
    where attnlab's int8 kernel is available (``kernel``, default `int8_gemm.available`: an x86-64 CPU with
    AVX2 and a compiler), else ``int_mm``. Why: ``benchmarks/inference.py``'s int8 rows (figures in
    docs/performance.md and docs/design_measurements.md)."""
    if not (int8_gemm.available() if kernel is None else kernel):
        return "int_mm"
    return "onednn" if kernel is None and onednn_int8.available() else "attnlab"


@dataclass(frozen=True)
class IntMMWeight:
    """A weight (N, K) for the ``int_mm`` engine: ``weight_t`` (K, N) int8 (one scale per output column of
    it), ``scale`` (N,) float32, ``bias`` (N,) float32 or None; the activations' ``levels`` (127 or 63)."""

    weight_t: Tensor
    scale: Tensor
    bias: Tensor | None
    levels: int


def _int_mm_pack(linear: nn.Linear, reduce_range: bool) -> IntMMWeight:
    w = linear.weight.detach().to("cpu", torch.float32)
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    wq = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    bias = None if linear.bias is None else linear.bias.detach().to("cpu", torch.float32).contiguous()
    return IntMMWeight(wq.t().contiguous(), scale, bias, 63 if reduce_range else 127)


def _int_mm_product(x: Tensor, w: IntMMWeight) -> Tensor:
    """``x (..., K) @ W^T + b`` with each row of x quantized symmetrically to ``w.levels``."""
    k, n = w.weight_t.shape
    rows = x.reshape(-1, k)
    step = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-30) / w.levels  # (M, 1)
    xq = torch.round(rows / step).to(torch.int8)  # |x / step| <= levels: no clamp needed
    y = torch._int_mm(xq, w.weight_t).float().mul_(step).mul_(w.scale)
    if w.bias is not None:
        y.add_(w.bias)
    return y.reshape(*x.shape[:-1], n)


class Int8Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` stored as int8 (per-row scales) and ``x`` quantized at each call.

    x (..., K) float32 -> (..., N) float32. Built by `Int8Linear.from_float` from any ``nn.Linear``.
    """

    def __init__(self, packed: object, in_features: int, out_features: int, reduce_range: bool) -> None:
        super().__init__()
        # not a parameter: an `int8_gemm.Int8Weight`, `onednn_int8.OneDNNInt8Weight` or `IntMMWeight`
        self._packed = packed
        self.in_features = in_features
        self.out_features = out_features
        self.reduce_range = reduce_range  # 7-bit activations

    @classmethod
    def from_float(
        cls, linear: nn.Linear, reduce_range: bool | None = None, engine: str | None = None
    ) -> Int8Linear:
        """Packed for ``engine`` (`ENGINES`; default `auto_engine`). ``reduce_range`` (``int_mm``): None
        picks by the CPU (see the module doc); the ``attnlab`` engine's bits are its kernel's."""
        engine = auto_engine() if engine is None else engine
        if engine in ("attnlab", "onednn"):
            pack = int8_gemm.pack if engine == "attnlab" else onednn_int8.pack
            seven_bits = int8_gemm.levels() < int8_gemm.VNNI_LEVELS
            packed = pack(linear.weight, linear.bias)
            return cls(packed, linear.in_features, linear.out_features, reduce_range=seven_bits)
        if engine != "int_mm":
            raise ValueError(
                f"Int8Linear: engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}"
            )
        if reduce_range is None:
            reduce_range = not cpu_has_vnni()
        packed = _int_mm_pack(linear, reduce_range)
        return cls(packed, linear.in_features, linear.out_features, reduce_range)

    @property
    def gelu_product(self):
        """``x -> F.gelu(self(x))`` in one call, the GELU in the product's epilogue (within 4e-7 of
        PyTorch's), on the ``attnlab`` and ``onednn`` engines; None on ``int_mm``. For
        `attnlab.accel.fused_layer.flat_encoder_layer`."""
        if isinstance(self._packed, IntMMWeight):
            return None
        return self._gelu

    def _gelu(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Int8Linear: expected float32 input, got {x.dtype}")
        return self._product(x, int8_gemm.GELU)

    def _product(self, x: Tensor, act: int) -> Tensor:
        if isinstance(self._packed, onednn_int8.OneDNNInt8Weight):
            return onednn_int8.product(x, self._packed, act)
        return int8_gemm.product(x, self._packed, act)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Int8Linear: expected float32 input, got {x.dtype}")
        if isinstance(self._packed, IntMMWeight):
            return _int_mm_product(x, self._packed)
        return self._product(x, 0)

    def extra_repr(self) -> str:
        engine = {int8_gemm.Int8Weight: "attnlab", onednn_int8.OneDNNInt8Weight: "onednn"}.get(
            type(self._packed), "int_mm"
        )
        activations = f"{engine}: {7 if self.reduce_range else 8}-bit activations per row"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel weights, "
            f"{activations}"
        )


def _stacked_int8(attn: MultiHeadAttention, reduce_range: bool | None, engine: str) -> Int8Linear | None:
    """The query, key and value projections of ``attn`` as one `Int8Linear` (H -> 3H), for self-attention:
    one product and one quantization of the input instead of three. Weights are quantized per output row
    and the input per row, so its outputs are the three layers' exactly. None unless all
    three are ``nn.Linear`` of one input width."""
    parts = (attn.query, attn.key, attn.value)
    if not all(isinstance(p, nn.Linear) for p in parts) or len({p.in_features for p in parts}) != 1:
        return None
    has_bias = [p.bias is not None for p in parts]
    stacked = nn.Linear(parts[0].in_features, sum(p.out_features for p in parts), bias=any(has_bias))
    with torch.no_grad():
        stacked.weight.copy_(torch.cat([p.weight.detach().float() for p in parts]))
        if stacked.bias is not None:
            biases = [p.weight.new_zeros(p.out_features) if p.bias is None else p.bias for p in parts]
            stacked.bias.copy_(torch.cat(biases).float())
    return Int8Linear.from_float(stacked, reduce_range, engine)


def quantize(
    model: nn.Module, reduce_range: bool | None = None, inplace: bool = False, engine: str | None = None
) -> nn.Module:
    """``model`` with every ``nn.Linear`` (`attnlab.accel.optimize`'s subclasses included) replaced by
    `Int8Linear`.

    Self-attention layers also get their query, key and value as one stacked product
    (`MultiHeadAttention.qkv`). A copy unless ``inplace``; the result is in eval mode, on the CPU, for
    inference. Tied weights (the MLM decoder shares the word embedding) are read, not changed: the
    embedding stays float32 and the decoder gets its own int8 copy. ``reduce_range`` None picks by the
    CPU (see the module doc). ``engine`` is the engine the weights are packed for (``attnlab`` or
    ``int_mm``); None: `auto_engine`.
    """
    engine = auto_engine() if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"quantize: engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "attnlab" and not int8_gemm.available():
        reason = int8_gemm.unavailable_reason()
        raise RuntimeError(f"the 'attnlab' int8 engine is not available: {reason}")
    if engine == "onednn" and not onednn_int8.available():
        raise RuntimeError(f"the 'onednn' int8 engine is not available: {onednn_int8.unavailable_reason()}")
    if not inplace:
        model = copy.deepcopy(model)
    model = model.cpu().float().eval()
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention):
            module.qkv = _stacked_int8(module, reduce_range, engine)
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear.from_float(child, reduce_range, engine))
    return model.eval()  # the new Int8Linear children too (a new module starts in training mode)


__all__ = ["ENGINES", "Int8Linear", "IntMMWeight", "auto_engine", "cpu_has_vnni", "quantize"]
