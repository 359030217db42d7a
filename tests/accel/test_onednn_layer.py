"""`attnlab.accel.onednn_layer`: an encoder layer on oneDNN's products with its weights packed once, the
query/key/value stacked and the activation in the first feed-forward product's epilogue: equal to the module
calls within float32 rounding, taken only where it applies, and rebuilt when a weight changes."""

from __future__ import annotations

import dataclasses

import encoder_layers
import pytest
import torch
from encoder_layers import Spy, both

import attnlab.accel.fused_encoder as fused_encoder
import attnlab.accel.onednn_layer as onednn_layer
from attnlab.accel import set_cpu_gemm, skip_padding
from attnlab.inference import quantize

pytestmark = pytest.mark.skipif(onednn_layer._OP is None, reason="PyTorch built without oneDNN")
# products of at least oneDNN's MIN_MACS multiply-adds (3 x 24 rows x 128 x 128), where the path applies
WIDER = {"hidden_size": 128, "intermediate_size": 256, "num_heads": 4}


@pytest.fixture(autouse=True)
def _onednn_products():
    set_cpu_gemm("onednn")
    yield
    set_cpu_gemm("auto")


def inputs(b: int = 3, t: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 99, (b, t), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 17:] = 0
    mask[1, 5:] = 0
    return ids, mask


@pytest.mark.parametrize(
    "changes",
    [{}, {"norm_first": True}, {"activation": "relu"}, {"activation": "gelu_tanh"}, {"sharing": "all"}],
    ids=["post-LN", "pre-LN", "relu", "gelu-tanh", "albert-all"],
)
def test_equals_the_module_calls(changes, monkeypatch):
    m = encoder_layers.model(**WIDER, **changes)
    spy = Spy(monkeypatch, fused_encoder, "onednn_encoder_layer")
    ids, mask = inputs()
    ref, got = both(m, input_ids=ids, attention_mask=mask)
    assert spy.calls == m.config.num_layers
    keep = mask.bool()
    torch.testing.assert_close(got.last_hidden_state[keep], ref.last_hidden_state[keep], rtol=1e-5, atol=1e-5)


def test_real_tokens_only_inside_skip_padding(monkeypatch):
    m = encoder_layers.model(**WIDER)
    spy = Spy(monkeypatch, fused_encoder, "onednn_encoder_layer")
    ids, mask = inputs(t=48)  # 70 real tokens: products of at least MIN_MACS
    with skip_padding():
        ref, got = both(m, input_ids=ids, attention_mask=mask)
    assert spy.calls == m.config.num_layers
    assert spy.args[0][2].shape[:2] == (1, int(mask.sum()))  # (1, N, H): the real tokens
    keep = mask.bool()
    torch.testing.assert_close(got.last_hidden_state[keep], ref.last_hidden_state[keep], rtol=1e-5, atol=1e-5)


def test_not_taken_for_small_products_int8_or_other_choices(monkeypatch):
    spy = Spy(monkeypatch, fused_encoder, "onednn_encoder_layer")
    ids, mask = inputs(t=6)
    both(encoder_layers.model(**WIDER), input_ids=ids, attention_mask=mask)  # 18 rows: below MIN_MACS
    both(quantize(encoder_layers.model(**WIDER)), input_ids=ids, attention_mask=mask)
    set_cpu_gemm("default")
    both(encoder_layers.model(**WIDER), *inputs())
    assert spy.calls == 0


def test_packed_weights_follow_an_in_place_update():
    m = encoder_layers.model(**WIDER)
    ids, mask = inputs()
    with torch.no_grad():
        before = m(input_ids=ids, attention_mask=mask).last_hidden_state
        m.attention[0].layer.query.weight.mul_(0.5)  # the version counter moves: the packed copy is rebuilt
        ref, got = both(m, input_ids=ids, attention_mask=mask)
    keep = mask.bool()
    assert not torch.allclose(got.last_hidden_state[keep], before[keep])
    torch.testing.assert_close(got.last_hidden_state[keep], ref.last_hidden_state[keep], rtol=1e-5, atol=1e-5)


def test_config_of_the_wider_layers_takes_the_path():
    config = dataclasses.replace(encoder_layers.TINY, **WIDER)
    rows = 3 * 24
    assert rows * config.hidden_size**2 >= onednn_layer.MIN_MACS
