"""The fused inference path of an encoder layer (attnlab.accel.fused_layer) against the module calls."""

from __future__ import annotations

import copy
import threading

import encoder_layers
import pytest
import torch
from encoder_layers import both, inputs, model

import attnlab.accel.derived as derived
import attnlab.accel.fused_layer as fused_layer
from attnlab.accel.fused_layer import (
    clear_fused_weights,
    fused_encoder_layer,
    fused_layers,
    fused_layers_enabled,
    padding_for_fused,
)

pytestmark = pytest.mark.skipif(
    not fused_layer.fused_layers_enabled() or fused_layer.cpu_gemm() != "default",
    reason="the fused path is off here (ATTNLAB_FUSED_LAYERS=0, old PyTorch, or oneDNN products on AVX-512)",
)


@pytest.fixture(autouse=True)
def pytorch_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the fused kernel: layers whose products would run on attnlab's kernel take the
    flat path instead (tests/accel/test_flat_layer.py), so that choice is off here."""
    monkeypatch.setattr(fused_layer, "_packed", lambda attention, feed_forward, x: False)


class Spy(encoder_layers.Spy):
    """Counts the layers the fused kernel computed (calls that did not return None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch, fused_layer, "_OP")


@pytest.mark.parametrize(
    "changes",
    [{}, {"norm_first": True}, {"activation": "relu"}, {"sharing": "all"}, {"sharing": "ffn"}],
    ids=["post-LN", "pre-LN", "relu", "albert-all", "albert-ffn"],
)
def test_fused_equals_modules_with_padding(monkeypatch: pytest.MonkeyPatch, changes: dict) -> None:
    m = model(**changes)
    spy = Spy(monkeypatch)
    ids, mask = inputs()
    ref, got = both(m, ids, attention_mask=mask, output_hidden_states=True)
    assert spy.calls == m.config.num_layers  # every layer took the kernel
    for a, b in zip(ref.hidden_states, got.hidden_states, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)  # padded positions included
    torch.testing.assert_close(got.pooled_output, ref.pooled_output, atol=1e-5, rtol=1e-5)


def test_no_padding_and_bool_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model()
    spy = Spy(monkeypatch)
    ids, mask = inputs()
    for attention_mask in (None, torch.ones_like(ids), mask.bool()):
        ref, got = both(m, ids, attention_mask=attention_mask)
        torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert spy.calls == 3 * m.config.num_layers


@pytest.mark.parametrize(
    "case",
    ["train mode", "grad", "attentions", "visibility matrix", "empty row", "tanh gelu", "local attention",
     "float64", "autocast"],
)  # fmt: skip
def test_falls_back_to_the_modules(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    changes = {"tanh gelu": {"activation": "gelu_tanh"}, "local attention": {"attention": "local"}}
    m = model(**changes.get(case, {}))
    ids, mask = inputs()
    kwargs: dict = {"attention_mask": mask}
    if case == "attentions":
        kwargs["output_attentions"] = True
    elif case == "visibility matrix":
        kwargs["attention_mask"] = torch.ones(3, 11, 11, dtype=torch.long).tril()
    elif case == "empty row":
        kwargs["attention_mask"] = mask.clone()
        kwargs["attention_mask"][2] = 0
    elif case == "float64":
        m = m.double()
    spy = Spy(monkeypatch)
    with torch.inference_mode(case != "grad"):
        if case == "train mode":
            m.train()
            torch.manual_seed(0)
            out = m(ids, **kwargs).last_hidden_state
            torch.manual_seed(0)
            with fused_layers(False):
                ref = m(ids, **kwargs).last_hidden_state
            torch.testing.assert_close(out, ref)  # dropout drew the same masks: the same path
        elif case == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                m(ids, **kwargs)
        else:
            out = m(ids, **kwargs).last_hidden_state
            assert not out.isnan().any()
    assert spy.calls == 0


def test_fused_weights_follow_changes_to_the_parameters() -> None:
    m = model()
    ids, mask = inputs()
    with torch.inference_mode():
        before = m(ids, attention_mask=mask).last_hidden_state
        m(ids, attention_mask=mask)  # the fused query/key/value weights are cached now
    other = model()
    with torch.no_grad():
        other.attention[1].layer.key.weight.mul_(3.0)
        other.attention[2].layer.value.bias.add_(1.0)
    m.load_state_dict(other.state_dict())  # in-place copies: version counters move
    ref, got = both(m, ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert (got.last_hidden_state - before).abs().max() > 1e-2
    with torch.no_grad():  # a new Parameter object for one projection
        m.attention[0].layer.query.weight = torch.nn.Parameter(torch.randn(32, 32) * 0.05)
    ref, got = both(m, ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert m.attention[0].layer in derived._CACHE
    assert copy.deepcopy(m).attention[0].layer not in derived._CACHE  # the cache stays outside


def test_writes_through_data_need_clear_fused_weights() -> None:
    m = model()
    ids, mask = inputs()
    with torch.inference_mode():
        m(ids, attention_mask=mask)
    m.attention[1].layer.value.bias.data.add_(1.0)  # .data has its own version counter: not seen
    clear_fused_weights(m)
    ref, got = both(m, ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-5)


def test_hooks_and_train_mode_children_fall_back_per_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model()
    ids, mask = inputs()
    seen = []
    handle = m.attention[0].layer.register_forward_hook(lambda mod, args, out: seen.append(out[0].shape))
    m.feed_forward[2].layer.dropout = torch.nn.Dropout(0.0)  # Monte Carlo dropout: one child in train mode
    m.feed_forward[2].layer.dropout.train()
    spy = Spy(monkeypatch)
    ref, got = both(m, ids, attention_mask=mask)
    assert spy.calls == 1 and len(seen) == 2  # layer 1 fused; the hooked layer 0 and layer 2 not
    torch.testing.assert_close(got.last_hidden_state, ref.last_hidden_state, atol=1e-5, rtol=1e-5)
    handle.remove()
    m.feed_forward[2].layer.dropout.eval()
    with torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: None):
        both(m, ids, attention_mask=mask)
    assert spy.calls == 1  # a global hook: no layer fused
    both(m, ids, attention_mask=mask)
    assert spy.calls == 1 + m.config.num_layers


def test_fused_layers_switch_is_per_thread() -> None:
    seen = {}

    def worker() -> None:
        seen["worker"] = fused_layers_enabled()

    with fused_layers(False):
        seen["main"] = fused_layers_enabled()
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == {"main": False, "worker": True}
    assert fused_layers_enabled()


def test_weights_made_under_inference_mode() -> None:
    with torch.inference_mode():  # inference tensors have no version counter: nothing is cached
        m = model()
        ids, mask = inputs()
        got = m(ids, attention_mask=mask).last_hidden_state
        with fused_layers(False):
            ref = m(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert m.attention[0].layer not in derived._CACHE


def test_padding_for_fused() -> None:
    keep = torch.tensor([[True, True, False], [True, False, False]])
    ok, padding = padding_for_fused(keep)
    assert ok and padding.tolist() == [[False, False, True], [False, True, True]]
    assert padding_for_fused(None) == (True, None)
    assert padding_for_fused(torch.tensor([[True, False], [False, False]]))[0] is False
    assert padding_for_fused(torch.ones(2, 3, 3, dtype=torch.bool))[0] is False


def test_direct_call_returns_none_when_it_cannot_apply() -> None:
    m = model()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert fused_encoder_layer(m.attention[0], m.feed_forward[0], x, None) is not None
        assert fused_encoder_layer(m.attention[0], m.attention[1], x, None) is None  # not a layer
        with fused_layers(False):
            assert fused_encoder_layer(m.attention[0], m.feed_forward[0], x, None) is None
    assert fused_encoder_layer(m.attention[0], m.feed_forward[0], x, None) is None  # grad mode
