"""`attnlab.nn.fused_layer.flat_encoder_layer`: an encoder layer the fused kernel cannot take (int8, other
activations) computed in one function, bit-identical to the module calls."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import attnlab.nn.fused_layer as fused_layer
from attnlab.inference import quantize
from attnlab.models import Encoder, EncoderConfig
from attnlab.nn.fused_layer import fused_layers

TINY = EncoderConfig(
    vocab_size=99, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
    max_position_embeddings=64, hidden_dropout=0.1, attention_dropout=0.1,
)  # fmt: skip

int8_engine = pytest.mark.skipif(
    not {"x86", "fbgemm", "onednn"} & set(torch.backends.quantized.supported_engines),
    reason="no int8 engine in this PyTorch build",
)


def model(int8: bool = False, **changes: object) -> Encoder:
    torch.manual_seed(0)
    m = Encoder(dataclasses.replace(TINY, **changes)).eval()
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swapped norm shows
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return quantize(m) if int8 else m


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 99, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0  # padding in two rows, of different lengths
    mask[1, 3:] = 0
    return ids, mask


class Spy:
    """Counts the layers `flat_encoder_layer` computed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = fused_layer.flat_encoder_layer

        def flat(*args: object) -> torch.Tensor:
            self.calls += 1
            return real(*args)

        monkeypatch.setattr(fused_layer, "flat_encoder_layer", flat)


def both(m: Encoder, *args: object, **kwargs: object) -> tuple[object, object]:
    """(module calls, fast path) outputs of the same call."""
    with torch.inference_mode():
        with fused_layers(False):
            ref = m(*args, **kwargs)
        got = m(*args, **kwargs)
    return ref, got


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
