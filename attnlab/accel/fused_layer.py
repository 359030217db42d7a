"""Inference fast path for one encoder layer: PyTorch's fused C++ kernel instead of the module calls.

An encoder layer is ``Residual(MultiHeadAttention)`` then ``Residual(FeedForward)`` (`attnlab.nn.residual`).
In inference on the CPU, small shapes spend a fifth of their time outside the matrix products: three
separate query/key/value products, the bias and GELU passes, and Python's dispatch of some 60 operators a
layer. ``torch._transformer_encoder_layer_fwd`` (the kernel behind ``nn.TransformerEncoderLayer``'s
inference fast path) computes the same function in one call, with one fused query/key/value product;
outputs within 2e-6. Why: ``benchmarks/inference.py``, which times both as ``attnlab`` and ``attnlab
modules`` (figures in docs/design_measurements.md).

`fused_encoder_layer` returns None, and the caller runs the modules, unless all of these hold:

- the modules and all their children are in eval mode (no dropout) and carry no forward hooks (nor are
  global module hooks set), no gradient is recorded (``torch.no_grad`` or ``torch.inference_mode``), no
  autocast is active, and nothing traces the model (``torch.compile``, ``torch.export`` and the ONNX export
  see the modules);
- the input is float32 on the CPU, and `attnlab.accel.linear` uses PyTorch's own float32 product there (on
  CPUs with AVX-512 it sends large products to oneDNN, which the fused kernel would not use);
- the attention is exactly `MultiHeadAttention` (not a local, relative or LSH variant) with biases, the
  feed-forward is `FeedForward` with the exact GELU or ReLU, both residuals have the same placement
  (post-LN or pre-LN) and LayerNorm epsilon;
- the mask, if any, masks padded keys only and leaves every sequence at least one key (the kernel gives
  NaN for a row with none, where `scaled_dot_product_attention` gives a uniform average).

Where the kernel does not apply but the pair is still the plain layer in eval mode (int8 projections from
`attnlab.inference.quantize`, an activation the kernel lacks, oneDNN products), `flat_encoder_layer`
computes it in one function with the modules' own operations. `fast_encoder_layer`, which
`attnlab.accel.fused_encoder.FusedEncoder` calls per layer, picks `packed_encoder_layer` (below), else the
kernel, else that function, else None.

Where the layer's products run on attnlab's own kernel (`attnlab.accel.linear.packed_rows`: inference on a CPU
not made by Intel, up to 4,096 rows), `packed_encoder_layer` comes first: the fused kernel would compute its
products with MKL, which packs each weight again at every call.

The fused query/key/value weight is `attnlab.accel.derived.stacked_qkv`: built once and kept (outside the
module: deepcopy, pickling and ``torch.save`` never see it) until one of its three weights or biases changes:
a new tensor, or an in-place update such as an optimizer step, ``load_state_dict`` or ``.to()``. Writes that
bypass the version counter (through ``.data`` or a NumPy view) are not seen; call `clear_fused_weights` (the
same as `attnlab.accel.derived.clear_derived_weights`) after them. `fused_layers`
turns the path off in a ``with`` block (tests compare both paths; benchmarks time the module calls).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from torch import Tensor, nn

import attnlab.accel.few_row_gemm as few_row_gemm
from attnlab.accel.derived import clear_derived_weights, derived, stacked_qkv
from attnlab.accel.linear import MAX_COPIED_WEIGHT, FastLinear, packed_rows
from attnlab.accel.onednn_linear import cpu_gemm
from attnlab.accel.unpadded import Rows, skipping_padding
from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.residual import Residual

__all__ = [
    "clear_fused_weights", "fast_encoder_layer", "fast_path_allowed", "flat_encoder_layer",
    "fused_encoder_layer", "fused_layers", "fused_layers_enabled", "padding_for_fused", "unpadded_rows",
]  # fmt: skip

_OP = getattr(torch, "_transformer_encoder_layer_fwd", None)
_ENABLED = os.environ.get("ATTNLAB_FUSED_LAYERS", "1") != "0"  # the process's default
_LOCAL = threading.local()  # a `fused_layers` block's setting, for its own thread only


def fused_layers_enabled() -> bool:
    """Whether `fused_encoder_layer` may run in this thread (``ATTNLAB_FUSED_LAYERS=0`` turns it off for the
    process, a `fused_layers` block for its thread)."""
    return getattr(_LOCAL, "enabled", _ENABLED) and _OP is not None


@contextlib.contextmanager
def fused_layers(enabled: bool) -> Iterator[None]:
    """Turn the fused path on or off inside a ``with`` block, in this thread (the setting before is restored
    at the end; other threads, e.g. a server's, are not affected)."""
    before = getattr(_LOCAL, "enabled", None)
    _LOCAL.enabled = enabled
    try:
        yield
    finally:
        if before is None:
            del _LOCAL.enabled
        else:
            _LOCAL.enabled = before


# The cached weights live in attnlab.accel.derived; this name is kept for the callers that know it.
clear_fused_weights = clear_derived_weights


def _activation_is_gelu(ffn: FeedForward) -> bool | None:
    """True for the exact GELU, False for ReLU, None for an activation the kernel does not have."""
    act = ffn.activation
    if type(act) is nn.GELU and act.approximate == "none":
        return True
    return False if type(act) is nn.ReLU else None


def untouched(module: nn.Module) -> bool:
    """Whether ``module`` and its children are in eval mode (no dropout, Monte Carlo dropout included) and
    carry no forward hooks (the kernel would skip them: feature taps, pruning's and weight norm's hooks)."""
    # Walks the children itself: ``module.modules()`` (a generator with a memo of visited modules) is most of
    # the cost of this test, asked for every layer at every forward (a shared child is visited twice here).
    todo = [module]
    while todo:
        m = todo.pop()
        if m.training or m._forward_hooks or m._forward_pre_hooks:
            return False
        todo.extend(c for c in m._modules.values() if c is not None)
    return True


def _plain(attention: nn.Module, feed_forward: nn.Module) -> bool:
    """Whether the two residual sub-layers are the plain encoder layer the kernel computes."""
    if type(attention) is not Residual or type(feed_forward) is not Residual:
        return False
    attn, ffn = attention.layer, feed_forward.layer
    if type(attn) is not MultiHeadAttention or type(ffn) is not FeedForward:
        return False
    projections = (attn.query, attn.key, attn.value, attn.output, ffn.up, ffn.down)
    # The cheap checks first: an int8 model (`attnlab.inference.quantize`) fails the first one, and its
    # layers are asked at every forward.
    return (
        all(isinstance(p, nn.Linear) and p.bias is not None for p in projections)  # not int8, with biases
        and untouched(attention)
        and untouched(feed_forward)
        and _activation_is_gelu(ffn) is not None
        and attention.norm_first == feed_forward.norm_first
        and attention.norm.eps == feed_forward.norm.eps
        and attention.norm.weight is not None
        and feed_forward.norm.weight is not None
    )


def fast_path_allowed(x: Tensor) -> bool:
    """Whether the call's conditions allow a fast path (the kernel or `flat_encoder_layer`) for hidden
    states ``x`` (B, T, H) (the modules' conditions are checked per layer)."""
    return (
        fused_layers_enabled()
        and not torch.is_grad_enabled()
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.dim() == 3
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()  # torch.compile / torch.export (ONNX) trace the modules
        and not torch.jit.is_tracing()
        and not _global_hooks()
    )


def _global_hooks() -> bool:
    """Whether hooks registered for every module (``nn.modules.module.register_module_forward_hook``) are
    set: they expect each sub-module's call."""
    from torch.nn.modules import module as _module

    return bool(
        getattr(_module, "_global_forward_hooks", None) or getattr(_module, "_global_forward_pre_hooks", None)
    )


def padding_for_fused(keep: Tensor | None) -> tuple[bool, Tensor | None]:
    """From the encoder's key mask ``keep`` ((B, T), True = a real token; None = no padding): whether the
    fused path can take it, and the kernel's mask ((B, T), True = padding) or None."""
    if keep is None:
        return True, None
    if keep.dim() != 2 or not bool(keep.any(dim=1).all()):
        return False, None  # a per-query visibility matrix, or a sequence with no key at all
    return True, ~keep


def fused_encoder_layer(
    attention: nn.Module, feed_forward: nn.Module, x: Tensor, padding: Tensor | None
) -> Tensor | None:
    """One encoder layer, ``feed_forward(attention(x))``, through the fused kernel; None where it does not
    apply (see the module docstring). ``x`` (B, T, H); ``padding`` (B, T) True = padded key, or None."""
    if not (fast_path_allowed(x) and cpu_gemm() == "default" and _plain(attention, feed_forward)):
        return None
    return _kernel(attention, feed_forward, x, padding)


def _kernel(attention: nn.Module, feed_forward: nn.Module, x: Tensor, padding: Tensor | None) -> Tensor:
    attn, ffn = attention.layer, feed_forward.layer
    qkv_weight, qkv_bias = stacked_qkv(attn)
    return _OP(
        x, attn.dim, attn.num_heads, qkv_weight, qkv_bias, attn.output.weight, attn.output.bias,
        _activation_is_gelu(ffn), attention.norm_first, attention.norm.eps,
        attention.norm.weight, attention.norm.bias, feed_forward.norm.weight, feed_forward.norm.bias,
        ffn.up.weight, ffn.up.bias, ffn.down.weight, ffn.down.bias,
        padding, None if padding is None else 1,  # mask type 1: a (B, T) key-padding mask
    )  # fmt: skip


def _flat(attention: nn.Module, feed_forward: nn.Module) -> bool:
    """Whether `flat_encoder_layer` computes ``feed_forward(attention(x))`` for these two sub-layers."""
    return (
        type(attention) is Residual
        and type(feed_forward) is Residual
        and type(attention.layer) is MultiHeadAttention
        and type(feed_forward.layer) is FeedForward
        and untouched(attention)
        and untouched(feed_forward)
    )


def flat_encoder_layer(
    attention: Residual, feed_forward: Residual, x: Tensor, mask: Tensor | None, rows: Rows | None = None
) -> Tensor:
    """``feed_forward(attention(x, mask=mask))`` for two plain sub-layers in eval mode, the modules' own
    operations in the same order (outputs bit-identical) in one function, without their generic plumbing
    (`Residual`'s tuple handling, the attention's cache and weight options, a module call per dropout).

    For the layers the kernel does not take -- int8 ones (`attnlab.inference.quantize`), activations it
    lacks, oneDNN products -- on a small model the plumbing is a large share of the time (bert-mini int8 in
    ``benchmarks/inference.py``; figures in docs/design_measurements.md).
    ``x`` (B, T, H); ``mask`` the encoder's additive mask (B, 1, 1 or T, T) or None.

    Two deliberate differences, each within float32 rounding of the modules' results (and so not bit for
    bit): where the first feed-forward projection offers a ``gelu_product`` (int8 layers on attnlab's
    kernel) and the activation is the exact GELU, the GELU is applied in that product's epilogue
    (`_gelu_product`, within 4e-7 of PyTorch's); where the query/key/value are one stacked projection and
    `_kernel_attention` holds, the attention runs on attnlab's kernel (`few_row_gemm.attention`).

    ``rows`` (`attnlab.accel.unpadded`): ``x`` is (1, N, H), a padded batch's real tokens only; the query, key
    and value products are stacked (N, 3H) for `attend_stacked`, which runs the attention in the (B, T)
    layout.
    """
    attn = attention.layer
    if rows is not None:
        h = attention.branch_input(x)
        separate = attn.qkv is None
        qkv = torch.cat([attn.query(h), attn.key(h), attn.value(h)], -1) if separate else attn.qkv(h)
        out = attend_stacked(attn, qkv, mask, rows)
    elif attn.qkv is not None and _kernel_attention(x, mask):  # one stacked projection (int8's), the kernel
        out = attend_stacked(attn, attn.qkv(attention.branch_input(x)), mask)
    else:
        q, k, v = attn._self_projections(attention.branch_input(x))
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask)  # eval: no dropout
        out = attn._merge_heads(out)
    x = attention.merge(x, attn.output(out))  # the residuals' dropouts: identity in eval
    ffn = feed_forward.layer
    up_gelu = _gelu_product(ffn)
    if up_gelu is not None:
        return feed_forward.merge(x, ffn.down(up_gelu(feed_forward.branch_input(x))))
    return feed_forward.merge(x, ffn(feed_forward.branch_input(x)))


def _gelu_product(ffn: FeedForward):
    """``x -> GELU(up(x))`` in one product where ``ffn.up`` offers one (``gelu_product``: attnlab's int8
    layers on their kernel) and the activation is the exact GELU; else None. It saves a pass over the
    activations (``benchmarks/inference.py``; figures in docs/design_measurements.md)."""
    fused = getattr(ffn.up, "gelu_product", None)
    return fused if fused is not None and _activation_is_gelu(ffn) else None


def packed_encoder_layer(
    attention: Residual, feed_forward: Residual, x: Tensor, mask: Tensor | None, rows: Rows | None = None
) -> Tensor:
    """`flat_encoder_layer` for layers whose products run on attnlab's kernel (`_packed`), with each product
    bound once and kept beside the layer (`_packed_plan`) and one product for the stacked
    query, key and value (`attnlab.accel.derived.stacked_qkv`): the kernel computes each output column on its
    own, so the stacked product's columns are the three products' bit for bit. Outputs equal the module
    calls' (``torch.equal``; tests/accel/test_flat_layer.py) but for three deliberate differences, each within
    float32 rounding: each sub-layer's output product, residual add and LayerNorm run as one kernel call
    (`_merged`); with the exact GELU, the activation runs in the first feed-forward product's epilogue
    (`few_row_gemm.GELU`: its own erf, within 4e-7 of PyTorch's), which saves a pass over the (B, T, 4H)
    activations; and the attention runs on attnlab's kernel where `_kernel_attention` holds
    (`few_row_gemm.attention`: reads the stacked product as it is and writes the heads merged, no permute or
    copy between).

    It takes less time than `flat_encoder_layer` on the same kernel products: the module calls and two of the
    three query/key/value products are saved (``benchmarks/inference.py``; figures in
    docs/design_measurements.md). Memory: the stacked query/key/value weight is kept beside its panels, two
    copies of those three weights besides the panels of the output and feed-forward weights.

    ``rows`` (`attnlab.accel.unpadded`): ``x`` is (1, N, H), a padded batch's real tokens only, and the
    attention runs in the batch's (B, T) layout (`attend_stacked`)."""
    attn, ffn = attention.layer, feed_forward.layer
    gelu = _activation_is_gelu(ffn)
    plan = _packed_plan(attention, feed_forward, attn, ffn, gelu)
    out = attend_stacked(attn, plan.project(attention.branch_input(x)), mask, rows)
    x = plan.output(out, x) if plan.output_merged else attention.merge(x, plan.output(out))
    h = plan.up(feed_forward.branch_input(x))  # GELU(up(x)) in one product with the exact GELU
    if not gelu:
        h = ffn.activation(h)  # the inner dropout: identity in eval
    return plan.down(h, x) if plan.down_merged else feed_forward.merge(x, plan.down(h))


class _PackedPlan(NamedTuple):
    """A layer's four bound products (`packed_encoder_layer`). They hold tensors, never the modules: the plan
    is kept in a dictionary weak on the layer's module, which a reference back would keep alive."""

    project: Callable[[Tensor], Tensor]  # (.., H) -> (.., 3H): the stacked query, key and value
    output: Callable  # merged: (attention output, x) -> x; else (attention output) -> (.., H) (`_merged`)
    output_merged: bool
    up: Callable[[Tensor], Tensor]  # (.., H) -> (.., I), with the GELU where the plan was built with it
    down: Callable  # as ``output``
    down_merged: bool


def _packed_plan(
    attention: Residual, feed_forward: Residual, attn: MultiHeadAttention, ffn: FeedForward, gelu: bool | None
) -> _PackedPlan:
    """The layer's bound products, kept beside ``attention`` until one of the tensors they read changes
    (`attnlab.accel.derived`: a new tensor or an in-place update), or the GELU or `MERGED_PRODUCTS` setting:
    one cache lookup a layer instead of four, each with its own checks (about 45 us a layer)."""
    stacked = attn.qkv is not None  # one (3H, H) projection already
    projections = (attn.qkv,) if stacked else (attn.query, attn.key, attn.value)
    sources = []
    for module in (*projections, attn.output, attention.norm, ffn.up, ffn.down, feed_forward.norm):
        tensors = (getattr(module, "weight", None), getattr(module, "bias", None))  # a norm may have none
        sources += [t for t in tensors if t is not None]

    def build() -> _PackedPlan:
        if stacked:
            project = few_row_gemm.cached_product_fn(attn.qkv, attn.qkv.weight, attn.qkv.bias, "_weight_t")
        else:
            project = _qkv_product(attn)
        act = few_row_gemm.GELU if gelu else 0
        up = few_row_gemm.cached_product_fn(ffn.up, ffn.up.weight, ffn.up.bias, "_weight_t", act)
        return _PackedPlan(project, *_merged(attention, attn.output), up, *_merged(feed_forward, ffn.down))

    name = f"_packed_plan_{bool(gelu)}_{MERGED_PRODUCTS}"
    return derived(attention, name, sources, build)


MERGED_PRODUCTS = True  # tests turn it off to compare the rest of the packed path bit for bit


def _merged(residual: Residual, projection: FastLinear) -> tuple[Callable, bool]:
    """``(fn, True)`` with ``fn(h, x) = residual.merge(x, projection(h))`` -- ``norm(x + projection(h))``
    post-LN, ``x + projection(h)`` pre-LN -- as one kernel call (`few_row_gemm.cached_merge_fn`: no
    separate add and LayerNorm passes) where the norm is a plain LayerNorm with weight and bias; else
    ``(projection's product, False)``, for the caller to merge with the module's ``merge``."""
    norm = residual.norm
    plain = type(norm) is nn.LayerNorm and norm.weight is not None and norm.bias is not None
    if MERGED_PRODUCTS and (residual.norm_first or plain):
        merge = few_row_gemm.cached_merge_fn(projection, projection.weight, projection.bias,
                                             None if residual.norm_first else norm, "_weight_t")  # fmt: skip
        return merge, True
    return few_row_gemm.cached_product_fn(projection, projection.weight, projection.bias, "_weight_t"), False


KERNEL_ATTENTION = True  # tests turn it off to compare the rest of the fast paths bit for bit


def _kernel_attention(x: Tensor, mask: Tensor | None) -> bool:
    """Whether `attend_stacked` runs on attnlab's attention kernel: the kernel available, float32 on the CPU,
    no mask or a padding mask over keys only ((B, 1, 1, T) additive float32, what `Encoder` builds without a
    visibility matrix).

    Why: PyTorch's CPU flash attention computes its small blocks with BLAS calls that pack their operands
    every time; the kernel is faster at bert-mini's attention (figures in docs/design_measurements.md)."""
    if not KERNEL_ATTENTION or x.dtype is not torch.float32 or not x.is_cpu or not few_row_gemm.available():
        return False
    if mask is None:
        return True
    b, t = x.shape[0], x.shape[1]
    return mask.dtype is torch.float32 and tuple(mask.shape) in ((b, 1, 1, t), (1, 1, 1, t)) and mask.is_cpu


def attend_stacked(
    attn: MultiHeadAttention, qkv: Tensor, mask: Tensor | None, rows: Rows | None = None
) -> Tensor:
    """The attention of the stacked query/key/value product ``qkv`` (B, T, 3H) -> (B, T, H), heads merged: on
    attnlab's kernel where `_kernel_attention` holds, else `scaled_dot_product_attention` (eval: no
    dropout). With ``rows``, ``qkv`` is (1, N, 3H), the batch's real tokens: scattered into the (B, T)
    layout (zeros at the padding, which the mask hides as keys) and the output gathered back, (1, N, H)."""
    if rows is not None:
        return rows.gather(attend_stacked(attn, rows.scatter(qkv), mask))
    b, t, _ = qkv.shape
    if _kernel_attention(qkv, mask):
        key_bias = None if mask is None else mask.reshape(-1, t).expand(b, t)
        return few_row_gemm.attention(qkv, attn.num_heads, key_bias)
    heads = qkv.view(b, t, 3, attn.num_heads, attn.head_dim)
    q, k, v = heads.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, N, T, D)
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    return attn._merge_heads(out)


def _qkv_product(attn: MultiHeadAttention):
    """The kernel's product with the stacked (3H, H) query/key/value weight, kept beside ``attn`` until one of
    the six tensors changes."""
    q, k, v = attn.query, attn.key, attn.value
    sources = tuple(p for p in (q.weight, k.weight, v.weight, q.bias, k.bias, v.bias) if p is not None)

    def build():
        weight, bias = stacked_qkv(attn)
        return few_row_gemm.product_fn(attn, weight, bias, "_qkv")

    return derived(attn, "_qkv_fn", sources, build)


def _packed(attention: nn.Module, feed_forward: nn.Module, x: Tensor) -> bool:
    """Whether the layer's products all run on the kernel's panels, as the module calls' would
    (`attnlab.accel.linear.packed_rows` for the input, `packed_weight` for every weight): every projection a
    `FastLinear` (not int8, not wrapped); the stacked query/key/value of at most `MAX_COPIED_WEIGHT`
    elements, its three biases all present or all absent (`derived.stacked_qkv` stacks them so). Then
    `packed_encoder_layer` is the faster path: the fused kernel would take MKL's products."""
    # Asked for every layer at every forward: plain loops, each attribute read once (about 15 us a layer).
    attn, ffn = getattr(attention, "layer", None), getattr(feed_forward, "layer", None)
    if type(attn) is not MultiHeadAttention or type(ffn) is not FeedForward:
        return False
    qkv = attn.qkv
    separate = qkv is None
    projections = (attn.query, attn.key, attn.value) if separate else (qkv,)
    projections += (attn.output, ffn.up, ffn.down)
    for p in projections:
        if type(p) is not FastLinear:  # first: int8 layers leave here
            return False
    weights = [p.weight for p in projections]
    if separate:
        biases = [p.bias is None for p in projections[:3]]
        if biases[0] != biases[1] or biases[0] != biases[2] or 3 * weights[0].numel() > MAX_COPIED_WEIGHT:
            return False
    # packed_rows checks the input, the machine and the up projection's weight; the others' weights here
    up = weights[-2]
    if not packed_rows(x, up):
        return False
    for w in weights:  # as the up projection's (float32 on the CPU, which packed_rows checked)
        if w.dtype is not torch.float32 or not w.is_cpu or w.numel() > MAX_COPIED_WEIGHT or w.is_inference():
            return False
    return True


def fast_encoder_layer(
    attention: nn.Module,
    feed_forward: nn.Module,
    x: Tensor,
    padding: Tensor | None,
    mask: Tensor | None,
    rows: Rows | None = None,
) -> Tensor | None:
    """One encoder layer on the fastest path that applies: `packed_encoder_layer`, else the fused kernel, else
    `flat_encoder_layer`;
    None (run the modules) for other sub-layers. For a caller that checked `fast_path_allowed` for ``x``;
    ``padding`` is the kernel's mask (`padding_for_fused`), ``mask`` the same keys as the additive mask.
    With ``rows`` (from `unpadded_rows`, which checked that this layer takes it), ``x`` is the (1, N, H) real
    tokens and the layer runs on the packed path or the flat function."""
    if _packed(attention, feed_forward, x) and _flat(attention, feed_forward):  # first: the cheaper test
        return packed_encoder_layer(attention, feed_forward, x, mask, rows)
    if rows is not None:
        return flat_encoder_layer(attention, feed_forward, x, mask, rows)
    if cpu_gemm() == "default" and _plain(attention, feed_forward):
        return _kernel(attention, feed_forward, x, padding)
    if _flat(attention, feed_forward):
        return flat_encoder_layer(attention, feed_forward, x, mask)
    return None


def unpadded_rows(
    layers: list[tuple[nn.Module, nn.Module]], x: Tensor, padding: Tensor | None
) -> Rows | None:
    """Where the real tokens of ``x`` (B, T, H) are, for an encoder whose every layer (the (attention,
    feed-forward) pairs ``layers``) then runs on them alone (`attnlab.accel.unpadded`): inside `skip_padding`,
    with padding (``padding`` (B, T) True = padded, from `padding_for_fused`) and every layer on the packed
    path or the flat function (not PyTorch's fused kernel, which takes the padded batch: float32 products
    on MKL, Intel's CPUs). Else None: the layers run on the padded batch."""
    if padding is None or not skipping_padding():
        return None
    kernel = cpu_gemm() == "default"
    for a, f in layers:
        if not _flat(a, f) or (not _packed(a, f, x) and kernel and _plain(a, f)):
            return None
    return Rows(torch.logical_not(padding))
