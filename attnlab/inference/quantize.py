"""int8 dynamic quantization of attnlab's linear layers, for CPU inference.

``torch.ao.quantization.quantize_dynamic`` swaps modules whose type is exactly ``nn.Linear``; an
optimized model's `attnlab.accel.linear.FastLinear` (the subclass `attnlab.accel.optimize` swaps in) is not,
so it leaves almost all of such a model in float32 (about as fast as float32 for bert-base).
`quantize` swaps every ``nn.Linear`` (subclasses included) for `Int8Linear`:

- weights: int8, symmetric, one scale per output channel (row), ``scale = max|w_row| / 127``;
- activations: quantized on the fly per call, the product accumulated in int32 and the bias added in float32.
  Three engines (`auto_engine` picks one by the CPU):
  - ``attnlab``: attnlab's AVX2 kernel (`attnlab.accel.int8_gemm`), 7 bits with a scale and zero point per row
    (token), the quantization inside the product; for CPUs with AVX2 but neither AVX-512 nor VNNI, where
    it is faster and more accurate than FBGEMM's (see that module);
  - ``x86`` / ``fbgemm``: FBGEMM's ``torch.ops.quantized.linear_dynamic``, uint8 with one scale and zero
    point per tensor;
  - ``onednn``: oneDNN's, for CPUs with AMX's int8 tiles.

``reduce_range`` (FBGEMM and oneDNN) uses 7-bit activations: needed where the CPU has no VNNI instructions
(AVX2's ``vpmaddubsw`` saturates int16 sums of 8-bit products); with VNNI (``avx512_vnni`` / ``avx_vnni``)
the full 8 bits are exact and more accurate, so the default picks by the CPU's flags. The ``attnlab``
engine always uses 7 bits, per row.

Embeddings, LayerNorm, softmax and the attention products stay float32. Quantize a model in eval mode for
inference only: `Int8Linear` has no gradient.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from attnlab.accel import int8_gemm
from attnlab.cpu import cpu_flags
from attnlab.nn.attention import MultiHeadAttention

ENGINES = ("attnlab", "x86", "fbgemm", "onednn")


def cpu_has_vnni() -> bool:
    """Whether the CPU has 8-bit dot-product instructions (x86 VNNI); False when it cannot be told."""
    return bool({"avx512_vnni", "avx_vnni"} & cpu_flags())


def auto_engine(
    flags: frozenset[str] | None = None, engines: list[str] | None = None, kernel: bool | None = None
) -> str:
    """The engine `quantize` packs for: ``onednn`` where the CPU has AMX's int8 tiles (``amx_int8``) and the
    build has it; ``attnlab`` (`attnlab.accel.int8_gemm`) where the CPU has neither AVX-512 nor VNNI and the
    kernel is available; else PyTorch's current engine (``x86``: FBGEMM's kernels, which use AVX-512 and
    VNNI where the CPU has them).
    Why: ``benchmarks/inference.py``'s int8 rows (figures in docs/design_measurements.md).
    ``flags``, ``engines`` and ``kernel`` default to the CPU's, ``torch.backends.quantized.supported_engines``
    and `int8_gemm.available`."""
    flags = cpu_flags() if flags is None else flags
    engines = torch.backends.quantized.supported_engines if engines is None else engines
    if "amx_int8" in flags and "onednn" in engines:
        return "onednn"
    if not {"avx512f", "avx512_vnni", "avx_vnni"} & flags and (int8_gemm.available() if kernel is None
                                                                 else kernel):  # fmt: skip
        return "attnlab"
    return torch.backends.quantized.engine


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
        # not a parameter: attnlab's `int8_gemm.Int8Weight` (weight and bias), or FBGEMM's / oneDNN's packed
        # int8 weight and float bias
        self._packed = packed
        self.in_features = in_features
        self.out_features = out_features
        self.reduce_range = reduce_range

    @classmethod
    def from_float(
        cls, linear: nn.Linear, reduce_range: bool | None = None, engine: str | None = None
    ) -> Int8Linear:
        """Packed for ``engine`` (`ENGINES`; default PyTorch's current quantized engine; `quantize` chooses
        it): the packed weight keeps its engine's kernels whatever the global engine is when it runs."""
        if engine == "attnlab":
            packed = int8_gemm.pack(linear.weight, linear.bias)
            return cls(packed, linear.in_features, linear.out_features, reduce_range=True)
        if reduce_range is None:
            reduce_range = not cpu_has_vnni()
        bias = linear.bias.detach().float() if linear.bias is not None else None
        packed = torch.ops.quantized.linear_prepack(_quantize_rows(linear.weight), bias)
        return cls(packed, linear.in_features, linear.out_features, reduce_range)

    @property
    def gelu_product(self):
        """``x -> F.gelu(self(x))`` in one call, the GELU in the product's epilogue (within 4e-7 of
        PyTorch's), where the weights are on attnlab's kernel; None on FBGEMM's and oneDNN's. For
        `attnlab.accel.fused_layer.flat_encoder_layer`."""
        if not isinstance(self._packed, int8_gemm.Int8Weight):
            return None
        return self._gelu

    def _gelu(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Int8Linear: expected float32 input, got {x.dtype}")
        return int8_gemm.product(x, self._packed, int8_gemm.GELU)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Int8Linear: expected float32 input, got {x.dtype}")
        if isinstance(self._packed, int8_gemm.Int8Weight):
            return int8_gemm.product(x, self._packed)
        return torch.ops.quantized.linear_dynamic(x, self._packed, self.reduce_range)

    def extra_repr(self) -> str:
        if isinstance(self._packed, int8_gemm.Int8Weight):
            activations = "attnlab kernel: 7-bit activations per row"
        else:
            activations = f"reduce_range={self.reduce_range}"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel weights, "
            f"{activations}"
        )


def _stacked_int8(attn: MultiHeadAttention, reduce_range: bool | None, engine: str) -> Int8Linear | None:
    """The query, key and value projections of ``attn`` as one `Int8Linear` (H -> 3H), for self-attention:
    one product and one quantization of the input instead of three. Weights are quantized per output row
    and the input per tensor (or per row), so its outputs are the three layers' exactly. None unless all
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
    CPU (see the module doc). ``engine`` is the engine the weights are packed for (``attnlab``, ``x86``,
    ``fbgemm`` or ``onednn``); None: `auto_engine`. PyTorch's global engine is left as it was.
    """
    engine = auto_engine() if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"quantize: engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "attnlab":
        if not int8_gemm.available():
            reason = int8_gemm.unavailable_reason()
            raise RuntimeError(f"the 'attnlab' int8 engine is not available: {reason}")
    elif engine not in torch.backends.quantized.supported_engines:
        raise RuntimeError(
            f"int8 quantization needs the {engine!r} quantized engine; this PyTorch build has "
            f"{', '.join(torch.backends.quantized.supported_engines)}"
        )
    if not inplace:
        import copy

        model = copy.deepcopy(model)
    model = model.cpu().float().eval()
    previous = torch.backends.quantized.engine
    if engine != "attnlab":
        torch.backends.quantized.engine = engine
    try:
        for module in list(model.modules()):
            if isinstance(module, MultiHeadAttention):
                module.qkv = _stacked_int8(module, reduce_range, engine)
            for child_name, child in list(module.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(module, child_name, Int8Linear.from_float(child, reduce_range, engine))
    finally:
        torch.backends.quantized.engine = previous
    return model.eval()  # the new Int8Linear children too (a new module starts in training mode)


__all__ = ["ENGINES", "Int8Linear", "auto_engine", "cpu_has_vnni", "quantize"]
