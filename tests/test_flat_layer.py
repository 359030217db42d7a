"""`attnlab.nn.fused_layer.flat_encoder_layer`: an encoder layer the fused kernel cannot take (int8, other
activations) computed in one function, bit-identical to the module calls."""

from __future__ import annotations

import encoder_layers
import pytest
import torch
from encoder_layers import both, inputs

import attnlab.nn.fused_layer as fused_layer
from attnlab.inference import quantize
from attnlab.models import Encoder

int8_engine = pytest.mark.skipif(
    not {"x86", "fbgemm", "onednn"} & set(torch.backends.quantized.supported_engines),
    reason="no int8 engine in this PyTorch build",
)


def model(int8: bool = False, **changes: object) -> Encoder:
    m = encoder_layers.model(**changes)
    return quantize(m) if int8 else m


class Spy(encoder_layers.Spy):
    """Counts the layers `flat_encoder_layer` computed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch, fused_layer, "flat_encoder_layer")


@int8_engine
@pytest.mark.parametrize(
    "changes",
    [{}, {"norm_first": True}, {"activation": "relu"}, {"sharing": "all"}],
    ids=["post-LN", "pre-LN", "relu", "albert-all"],
)
def test_int8_layers_take_the_flat_path_bit_identical(monkeypatch: pytest.MonkeyPatch, changes: dict) -> None:
    m = model(int8=True, **changes)
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
    spy = Spy(monkeypatch)
    ids, mask = inputs()
    ref, got = both(m, ids, attention_mask=mask)
    assert torch.equal(ref.last_hidden_state, got.last_hidden_state)
    assert spy.calls == m.config.num_layers


def test_float_layers_on_onednn_products_take_the_flat_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPUs where attnlab's float32 products run on oneDNN the kernel is off (it would use MKL's)."""
    from attnlab.nn.linear import cpu_gemm, set_cpu_gemm

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
    m = model(int8=case != "local", **({"attention": "local"} if case == "local" else {}))
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
