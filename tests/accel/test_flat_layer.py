"""`attnlab.accel.fused_layer.flat_encoder_layer`: an encoder layer the fused kernel cannot take (int8, other
activations) computed in one function, bit-identical to the module calls; `packed_encoder_layer` on attnlab's
kernel products, bit-identical too but for the exact GELU, which it applies in the first feed-forward
product's epilogue (within float32 rounding)."""

from __future__ import annotations

import encoder_layers
import pytest
import torch
from encoder_layers import both, inputs

import attnlab.accel.fused_layer as fused_layer
from attnlab.inference import quantize
from attnlab.models import Encoder

int8_engine = pytest.mark.skipif(not hasattr(torch, "_int_mm"), reason="no torch._int_mm in this PyTorch")


@pytest.fixture(autouse=True)
def _pytorch_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch's attention in the fast paths, as in the module calls, so that the rest compares bit for bit;
    `test_attention_on_attnlabs_kernel` turns attnlab's on."""
    monkeypatch.setattr(fused_layer, "KERNEL_ATTENTION", False)


def model(int8: str | None = None, **changes: object) -> Encoder:
    m = encoder_layers.model(**changes)
    return quantize(m, engine=int8) if int8 else m


def same_layers(a: torch.Tensor, b: torch.Tensor, gelu: bool = True) -> None:
    """Module calls ``a`` and fast path ``b``: bit-identical, but with the exact GELU applied in a product's
    epilogue (its own erf, within 4e-7 of PyTorch's) or a merged residual LayerNorm (``gelu`` True) equal
    within float32 rounding."""
    if gelu:
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(a, b)


# the layer variants both paths are checked on: post-LN, pre-LN, another activation, ALBERT's sharing
LAYER_KINDS = pytest.mark.parametrize(
    "changes",
    [{}, {"norm_first": True}, {"activation": "relu"}, {"sharing": "all"}],
    ids=["post-LN", "pre-LN", "relu", "albert-all"],
)


class Spy(encoder_layers.Spy):
    """Counts the layers `flat_encoder_layer` computed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch, fused_layer, "flat_encoder_layer")


def _int8_engines() -> list[str]:
    from attnlab.accel import int8_gemm, onednn_int8

    kernels = ["attnlab"] if int8_gemm.available() else []
    return ["int_mm", *kernels] + (["onednn"] if onednn_int8.available() else [])


@int8_engine
@LAYER_KINDS
def test_int8_layers_take_the_flat_path_bit_identical(monkeypatch: pytest.MonkeyPatch, changes: dict) -> None:
    m = model(int8=_int8_engines()[0], **changes)  # PyTorch's torch._int_mm products
    spy = Spy(monkeypatch)
    ids, mask = inputs()
    for attention_mask in (mask, None):
        ref, got = both(m, ids, attention_mask=attention_mask, output_hidden_states=True)
        for a, b in zip(ref.hidden_states, got.hidden_states, strict=True):
            assert torch.equal(a, b)  # the same operations in the same order: padded positions included
        assert torch.equal(ref.pooled_output, got.pooled_output)
    assert spy.calls == 2 * m.config.num_layers


def test_float_layers_the_kernel_lacks_take_the_flat_path(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model(activation="gelu_tanh")  # the fused kernel has only the exact GELU and ReLU
    monkeypatch.setattr(fused_layer, "_packed", lambda attention, feed_forward, x: False)  # MKL's products
    spy = Spy(monkeypatch)
    ids, mask = inputs()
    ref, got = both(m, ids, attention_mask=mask)
    assert torch.equal(ref.last_hidden_state, got.last_hidden_state)
    assert spy.calls == m.config.num_layers


def test_float_layers_on_onednn_products_take_the_flat_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPUs where attnlab's float32 products run on oneDNN the kernel is off (it would use MKL's)."""
    from attnlab.accel import cpu_gemm, set_cpu_gemm

    before = cpu_gemm()
    set_cpu_gemm("onednn")
    try:
        if cpu_gemm() != "onednn":
            pytest.skip("no oneDNN float32 product in this PyTorch build")
        m = model()
        spy = Spy(monkeypatch)
        ids, mask = inputs()
        ref, got = both(m, ids, attention_mask=mask)
    finally:
        set_cpu_gemm(before)
    assert torch.equal(ref.last_hidden_state, got.last_hidden_state)
    assert spy.calls == m.config.num_layers


@int8_engine
@pytest.mark.parametrize("case", ["train mode", "grad", "attentions", "visibility matrix", "hook", "local"])
def test_falls_back_to_the_modules(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    local = case == "local"
    m = model(int8=None if local else _int8_engines()[0], **({"attention": "local"} if local else {}))
    ids, mask = inputs()
    kwargs: dict = {"attention_mask": mask}
    if case == "train mode":
        m.feed_forward[0].layer.dropout.train()  # one child in train mode is enough
    elif case == "attentions":
        kwargs["output_attentions"] = True
    elif case == "visibility matrix":
        kwargs["attention_mask"] = torch.ones(3, 11, 11, dtype=torch.long).tril()
    elif case == "hook":
        m.attention[0].layer.output.register_forward_hook(lambda *_: None)
    spy = Spy(monkeypatch)
    with torch.inference_mode(case != "grad"):
        m(ids, **kwargs)
    if case in ("train mode", "hook"):
        assert spy.calls == m.config.num_layers - 1  # every other layer still takes it
    else:
        assert spy.calls == 0


@int8_engine
def test_quantized_model_is_in_eval_mode_throughout() -> None:
    m = quantize(model().train())
    assert not any(module.training for module in m.modules())  # the new int8 children included


def _packed_here() -> bool:
    with torch.no_grad():
        return fused_layer.packed_rows(torch.zeros(2, 8), torch.zeros(8, 8))


packed_here = pytest.mark.skipif(
    not _packed_here(),
    reason="attnlab's kernel does not take an encoder's products here (an Intel CPU, oneDNN, or no kernel)",
)


class PackedSpy(encoder_layers.Spy):
    """Counts the layers `packed_encoder_layer` computed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch, fused_layer, "packed_encoder_layer")


class KernelSpy(encoder_layers.Spy):
    """Counts the products `FastLinear` sent to attnlab's kernel."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from attnlab.accel import few_row_gemm

        super().__init__(monkeypatch, few_row_gemm, "_call")  # what every bound product calls


@packed_here
@LAYER_KINDS
def test_kernel_products_take_the_flat_path(monkeypatch: pytest.MonkeyPatch, changes: dict) -> None:
    """The modules and the packed path run the same kernel products: bit-identical where the GELU and the
    merges are not fused (another activation, `MERGED_PRODUCTS` off), within float32 rounding where they
    are; and within float32 rounding of PyTorch's fused kernel on MKL's products."""
    from attnlab.accel import few_row_gemm

    m = model(**changes)
    ids, mask = inputs()
    spy, products = PackedSpy(monkeypatch), KernelSpy(monkeypatch)
    merges = encoder_layers.Spy(monkeypatch, few_row_gemm, "_merge_call")
    for attention_mask in (mask, None):
        ref, got = both(m, ids, attention_mask=attention_mask, output_hidden_states=True)
        for a, b in zip(ref.hidden_states, got.hidden_states, strict=True):
            same_layers(a, b)
    layers = m.config.num_layers
    assert spy.calls == 2 * layers
    # per call of `both`: the modules' 6 products a layer; the packed path's 2 (q, k, v stacked; the first
    # feed-forward) and 2 merged with their residual (`_merged`); the pooler twice (3 rows: decoding's
    # few-row path)
    assert products.calls == 2 * (6 * layers + 2 * layers + 2)
    assert merges.calls == 2 * 2 * layers
    monkeypatch.setattr(fused_layer, "MERGED_PRODUCTS", False)
    ref, got = both(m, ids, attention_mask=mask, output_hidden_states=True)
    for a, b in zip(ref.hidden_states, got.hidden_states, strict=True):
        same_layers(a, b, gelu=changes.get("activation", "gelu") == "gelu")
    monkeypatch.setattr(fused_layer, "_packed", lambda attention, feed_forward, x: False)
    with torch.inference_mode():
        mkl = m(ids, attention_mask=mask, output_hidden_states=True)
    monkeypatch.undo()
    with torch.inference_mode():
        got = m(ids, attention_mask=mask, output_hidden_states=True)
    for a, b in zip(mkl.hidden_states, got.hidden_states, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)  # padded positions included


@packed_here
def test_more_rows_than_packed_rows_keep_pytorchs_products(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnlab.accel import linear

    m = model()
    ids, mask = inputs()  # 3 x 11 = 33 rows
    monkeypatch.setattr(linear, "PACKED_ROWS", 32)
    spy, products = PackedSpy(monkeypatch), KernelSpy(monkeypatch)
    with torch.inference_mode():
        m(ids, attention_mask=mask)
    assert spy.calls == 0  # the fused kernel took the layers
    assert products.calls == 1  # the pooler's 3 rows: decoding's few-row path
    monkeypatch.setattr(linear, "PACKED_ROWS", 33)
    with torch.inference_mode():
        m(ids, attention_mask=mask)
    # 2 products a layer on their own, 2 merged with their residual (`_merge_call`, not counted here)
    assert spy.calls == m.config.num_layers and products.calls == 1 + 2 * m.config.num_layers + 1


@packed_here
def test_wrapped_projections_and_a_stacked_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A projection that is not a `FastLinear` (a wrapper, an adapter) keeps its layer off the packed
    path; a single query/key/value projection (`MultiHeadAttention.qkv`) is taken as it is."""
    from attnlab.accel.linear import FastLinear

    m = model()
    ids, mask = inputs()

    class Wrapped(torch.nn.Module):  # e.g. an adapter around the projection
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) * 2.0

    m.feed_forward[1].layer.down = Wrapped(m.feed_forward[1].layer.down)
    attn = m.attention[2].layer
    attn.qkv = FastLinear(32, 96).eval()
    with torch.no_grad():
        attn.qkv.weight.copy_(torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]) * 0.5)
        attn.qkv.bias.copy_(torch.cat([attn.query.bias, attn.key.bias, attn.value.bias]))
    spy = PackedSpy(monkeypatch)
    ref, got = both(m, ids, attention_mask=mask)
    same_layers(ref.last_hidden_state, got.last_hidden_state)
    assert spy.calls == 2  # layers 0 and 2; layer 1's wrapped projection took the flat path


@packed_here
def test_projection_biases_the_packed_path_takes_and_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layer 1 without any projection bias: the stacked product has none either, and the layer takes the
    packed path. Layer 0 with a query without a bias beside a key and value with one: not stackable as one
    (weight, bias), so it keeps the flat path."""
    m = model()
    layer = m.attention[1].layer
    for p in (layer.query, layer.key, layer.value, layer.output, m.feed_forward[1].layer.up):
        p.bias = None
    m.attention[0].layer.query.bias = None
    ids, mask = inputs()
    spy, flat = PackedSpy(monkeypatch), Spy(monkeypatch)
    ref, got = both(m, ids, attention_mask=mask)
    same_layers(ref.last_hidden_state, got.last_hidden_state)
    assert spy.calls == m.config.num_layers - 1 and flat.calls == 1


@packed_here
def test_the_stacked_product_follows_changes_of_any_of_its_six_tensors() -> None:
    m = model()
    ids, mask = inputs()
    with torch.inference_mode():
        m(ids, attention_mask=mask)  # the stacked products are kept now
    attn = m.attention[1].layer
    with torch.no_grad():
        attn.key.weight.mul_(3.0)  # in place: the version moves
        attn.value.bias.add_(1.0)
    ref, got = both(m, ids, attention_mask=mask)
    same_layers(ref.last_hidden_state, got.last_hidden_state)


@packed_here
@pytest.mark.parametrize("change", ["output weight", "up bias", "down weight", "norm weight", "norm bias",
                                    "new norm", "activation", "merged products off"])  # fmt: skip
def test_the_layers_plan_follows_every_change(monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """`packed_encoder_layer` keeps a layer's bound products (`_packed_plan`) until one of their tensors or
    settings changes: after each change, the path still equals the module calls."""
    m = model()
    ids, mask = inputs()
    with torch.inference_mode():
        before = m(ids, attention_mask=mask).last_hidden_state  # the plans are kept now
    attention, feed_forward = m.attention[1], m.feed_forward[1]
    with torch.no_grad():
        if change == "output weight":
            attention.layer.output.weight.mul_(2.0)
        elif change == "up bias":
            feed_forward.layer.up.bias.add_(0.5)
        elif change == "down weight":
            feed_forward.layer.down.weight.mul_(-1.0)
        elif change == "norm weight":
            attention.norm.weight.mul_(3.0)
        elif change == "norm bias":
            feed_forward.norm.bias.add_(1.0)
        elif change == "new norm":
            feed_forward.norm = torch.nn.LayerNorm(feed_forward.norm.normalized_shape, eps=1e-12).eval()
        elif change == "activation":
            feed_forward.layer.activation = torch.nn.ReLU().eval()
        else:
            monkeypatch.setattr(fused_layer, "MERGED_PRODUCTS", False)
    builds = encoder_layers.Spy(monkeypatch, fused_layer, "_merged")  # called twice by each plan built
    ref, got = both(m, ids, attention_mask=mask)
    same_layers(ref.last_hidden_state, got.last_hidden_state)
    assert builds.calls == (6 if change == "merged products off" else 2)  # all layers' plans, or layer 1's
    if change != "merged products off":
        assert not torch.allclose(got.last_hidden_state, before)


@packed_here
@pytest.mark.parametrize("merged", [True, False])
def test_kept_plans_do_not_keep_the_model_alive(monkeypatch: pytest.MonkeyPatch, merged: bool) -> None:
    """The plans live in a dictionary weak on the layers' modules; nothing in them may refer back."""
    import gc
    import weakref

    monkeypatch.setattr(fused_layer, "MERGED_PRODUCTS", merged)
    m = model()
    ids, mask = inputs()
    builds = encoder_layers.Spy(monkeypatch, fused_layer, "_merged")
    with torch.inference_mode():
        m(ids, attention_mask=mask)
    assert builds.calls == 6  # three layers' plans were built and kept
    gone = weakref.ref(m.attention[0])
    builds.args.clear()  # the spy's own references to the modules
    del m
    gc.collect()
    assert gone() is None


@LAYER_KINDS
def test_int8_layers_on_attnlabs_kernel_apply_the_gelu_in_the_product(
    monkeypatch: pytest.MonkeyPatch, changes: dict
) -> None:
    """attnlab's int8 engine: the flat path, with GELU(up(x)) as one product where the activation is the
    exact GELU; the outputs then differ from the module calls' where an activation 4e-7 away lands in the
    next product's other quantization step (a few in a thousand, of one step each)."""
    from attnlab.accel import int8_gemm

    if "attnlab" not in _int8_engines():
        pytest.skip(f"attnlab's int8 kernel is not available: {int8_gemm.unavailable_reason()}")
    m = model(int8="attnlab", **changes)
    spy = Spy(monkeypatch)
    fused = encoder_layers.Spy(monkeypatch, int8_gemm, "_call")
    ids, mask = inputs()
    ref, got = both(m, ids, attention_mask=mask)
    gelu = changes.get("activation", "gelu") == "gelu"
    if gelu:
        keep = mask.bool()
        a, b = ref.last_hidden_state[keep], got.last_hidden_state[keep]
        assert ((a - b).norm() / a.norm()).item() < 2e-3
    else:
        assert torch.equal(ref.last_hidden_state, got.last_hidden_state)
    layers = m.config.num_layers
    assert spy.calls == layers
    # the module calls' 4 int8 products a layer (q, k, v stacked) and the flat path's 4, plus the pooler's two
    assert fused.calls == 4 * layers + 4 * layers + 2
    with_gelu = [a for a in fused.args if len(a) > 3 and a[3] == int8_gemm.GELU]  # a: (fn, x, w, act)
    assert len(with_gelu) == (layers if gelu else 0)


@pytest.mark.parametrize("int8", [None, "attnlab"])
def test_attention_on_attnlabs_kernel(monkeypatch: pytest.MonkeyPatch, int8: str | None) -> None:
    """With the kernel's attention on (the default), the packed path (float32) and the flat path (int8 with
    a stacked projection) take it for a padding mask and for none, and stay within float32 rounding of the
    module calls; a visibility matrix (B, 1, T, T) keeps PyTorch's attention."""
    from attnlab.accel import few_row_gemm, int8_gemm

    if not few_row_gemm.available():
        pytest.skip(f"the kernel is not available: {few_row_gemm.unavailable_reason()}")
    if int8 and not int8_gemm.available():
        pytest.skip(f"attnlab's int8 kernel is not available: {int8_gemm.unavailable_reason()}")
    if not int8 and not _packed_here():
        pytest.skip("attnlab's kernel does not take an encoder's products here")
    monkeypatch.setattr(fused_layer, "KERNEL_ATTENTION", True)
    m = model(int8=int8)
    ids, mask = inputs()
    layers = m.config.num_layers
    for attention_mask in (mask, None):
        kernel = encoder_layers.Spy(monkeypatch, few_row_gemm, "attention")
        ref, got = both(m, ids, attention_mask=attention_mask)
        assert kernel.calls == layers
        keep = mask.bool() if attention_mask is not None else torch.ones_like(mask, dtype=torch.bool)
        a, b = ref.last_hidden_state[keep], got.last_hidden_state[keep]
        if int8:  # a rounding 1e-7 away can put a value in the next quantization step: a relative bound
            assert ((a - b).norm() / a.norm()).item() < 2e-3
        else:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        monkeypatch.undo()
        monkeypatch.setattr(fused_layer, "KERNEL_ATTENTION", True)
    kernel = encoder_layers.Spy(monkeypatch, few_row_gemm, "attention")
    with torch.inference_mode():
        m(ids, attention_mask=torch.ones(3, 11, 11, dtype=torch.long).tril())  # a visibility matrix
    assert kernel.calls == 0
