"""A decoding step's layers as one function each (attnlab.accel.decoding_step, held by
its StepCache): bit-identical to the module calls, made once per cache, and left out wherever
the modules must run."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

import attnlab.accel.linear as linear_module
from attnlab.accel import few_row_gemm, optimize
from attnlab.accel.decoding_step import LayerStep, StepCache, plain_decoder_layer
from attnlab.accel.fused_layer import fused_layers
from attnlab.accel.linear import FastLinear, small_product, small_product_fn
from attnlab.generation import generate
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset


def use_layout(layout: str, monkeypatch) -> None:
    """Make `small_product` pick ``layout``: "kernel" (attnlab.accel.few_row_gemm), "streamed", "copies" or
    "intel" (PyTorch's layouts, the kernel off)."""
    monkeypatch.setattr(linear_module, "INTEL_MKL", layout == "intel")
    if layout == "kernel":
        if not few_row_gemm.available():
            pytest.skip(f"the few-row kernel is not available: {few_row_gemm.unavailable_reason()}")
        return
    monkeypatch.setattr(few_row_gemm, "available", lambda: False)
    if layout == "streamed":
        monkeypatch.setattr(linear_module, "STREAMED_WEIGHT", 0)


def _model(norm_first: bool = True, activation: str = "gelu_tanh", **overrides):
    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=2, max_positions=64, **overrides)
    cfg = dataclasses.replace(cfg, norm_first=norm_first, activation=activation)
    return optimize(build_gpt(cfg).eval())


def _count_step_calls(monkeypatch) -> list[int]:
    """Every `LayerStep` call appends to the list returned (the steps run, not only made)."""
    calls: list[int] = []
    call = LayerStep.__call__

    def counted(self, *args):
        calls.append(1)
        return call(self, *args)

    monkeypatch.setattr(LayerStep, "__call__", counted)
    return calls


def _step_logits(model, prompt, mask, steps: int, fast: bool) -> tuple[list[torch.Tensor], StepCache]:
    """The prompt's call, then ``steps`` one-token calls (the argmax fed back), each call's logits."""
    cache = model.new_cache()
    out, ids, full_mask = [], prompt, mask
    with fused_layers(fast), torch.inference_mode():
        for _ in range(steps + 1):
            logits = model(ids, attention_mask=full_mask, cache=cache).logits
            out.append(logits)
            ids = logits[:, -1].argmax(-1, keepdim=True)
            if full_mask is not None:
                full_mask = torch.cat([full_mask, torch.ones_like(ids)], dim=1)
    return out, cache


@pytest.mark.parametrize("norm_first", [True, False])  # GPT-2 (pre-LN) and GPT (post-LN)
@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@pytest.mark.parametrize("layout", ["kernel", "streamed", "copies", "intel"])
def test_steps_give_the_modules_logits_bit_for_bit(norm_first, rows, layout, monkeypatch):
    # every form `small_product` picks: attnlab's few-row kernel; where it is off, column-major copies at 1-2
    # rows and (W @ x^T)^T at 3-8 ("streamed": these small weights counted as streamed), or F.linear
    # throughout (Intel's MKL)
    use_layout(layout, monkeypatch)
    model = _model(norm_first)
    torch.manual_seed(rows)
    prompt = torch.randint(1, 300, (rows, 5))
    mask = torch.ones_like(prompt)
    mask[0, :2] = 0  # a left-padded row: the padding mask reaches every layer
    want, plain_cache = _step_logits(model, prompt, mask, 6, fast=False)
    calls = _count_step_calls(monkeypatch)
    got, cache = _step_logits(model, prompt, mask, 6, fast=True)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert len(calls) == 2 * (7 if rows * 5 <= 8 else 6)  # 2 layers a call; the prompt's too if few rows
    assert plain_cache.steps == {}  # the switch off: no steps made
    assert isinstance(cache.steps[rows], list) and all(isinstance(s, LayerStep) for s in cache.steps[rows])
    for name in ("key_buffer", "value_buffer"):  # the same buffers written
        assert torch.equal(cache[1]["self"][name][:, :, :11], plain_cache[1]["self"][name][:, :, :11])


def test_a_short_prompt_of_few_rows_takes_the_steps_too():
    model = _model()
    prompt = torch.randint(1, 300, (1, 4))  # 4 rows with its causal mask
    want, _ = _step_logits(model, prompt, None, 3, fast=False)
    got, cache = _step_logits(model, prompt, None, 3, fast=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert set(cache.steps) == {4, 1}  # the prompt's 4 rows, then one row a step


# exact GELU and ReLU as their functional forms; the sigmoid GELU has none and runs its module
@pytest.mark.parametrize("activation", ["gelu", "relu", "gelu_sigmoid"])
def test_every_activation_gives_the_modules_logits(activation, monkeypatch):
    model = _model(activation=activation)
    prompt = torch.randint(1, 300, (2, 3))
    want, _ = _step_logits(model, prompt, None, 4, fast=False)
    calls = _count_step_calls(monkeypatch)
    got, cache = _step_logits(model, prompt, None, 4, fast=True)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert cache.steps[2] is not None and len(calls) == 2 * 5  # the prompt (6 rows) and 4 steps


def test_a_deep_copy_of_the_cache_keeps_the_keys_and_values_and_remakes_its_steps():
    model = _model()
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.randint(1, 300, (1, 3)), cache=cache)
        model(torch.tensor([[5]]), cache=cache)
        copied = copy.deepcopy(cache)
        assert isinstance(copied, StepCache) and copied.steps == {} and 1 in cache.steps
        assert torch.equal(copied[0]["self"]["key"], cache[0]["self"]["key"])
        a = model(torch.tensor([[6]]), cache=cache).logits
        b = model(torch.tensor([[6]]), cache=copied).logits
    assert torch.equal(a, b) and copied.steps[1] is not None


def test_steps_are_made_once_per_cache_and_number_of_rows():
    model = _model()
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.randint(1, 300, (1, 9)), cache=cache)  # 9 rows: more than a step takes
        assert cache.steps == {}
        model(torch.tensor([[5]]), cache=cache)
        made = cache.steps[1]
        model(torch.tensor([[6]]), cache=cache)
        assert cache.steps[1] is made
    assert model.new_cache().steps == {}  # a new generation checks the layers again


def test_generation_is_unchanged_greedy_sampled_and_beam():
    model = _model()
    prompt = torch.randint(1, 300, (3, 4))
    mask = torch.ones_like(prompt)
    mask[1, 0] = 0
    cases = [(3, {}), (3, {"do_sample": True, "top_k": 20, "seed": 3}), (2, {"num_beams": 3})]  # 3, 3, 6 rows
    for b, kwargs in cases:
        options = {"max_new_tokens": 8, "ignore_eos": True, **kwargs}
        with fused_layers(False):
            want = generate(model, prompt[:b], mask[:b], **options).sequences
        assert generate(model, prompt[:b], mask[:b], **options).sequences == want, kwargs


def test_beam_search_makes_steps_for_the_rows_left_when_a_sentence_ends(monkeypatch):
    made: list[StepCache] = []
    init = StepCache.__init__

    def recording_init(self, layers):
        init(self, layers)
        made.append(self)

    monkeypatch.setattr(StepCache, "__init__", recording_init)
    model = _model()
    torch.manual_seed(0)
    prompt = torch.randint(1, 300, (2, 4))
    mask = torch.ones_like(prompt)
    mask[1, 0] = 0
    # with this seed the first sentence ends at EOS 29 after 7 tokens; its 2 beams leave, 2 rows go on
    options = {"max_new_tokens": 20, "num_beams": 2, "eos_token_id": 29}
    with fused_layers(False):
        want = generate(model, prompt, mask, **options).sequences
    made.clear()
    got = generate(model, prompt, mask, **options).sequences
    assert got == want and [len(row) for row in got] == [7, 8]
    assert sorted(made[0].steps) == [2, 4]  # the prompt's 16 rows take the modules


def _hook_fired(model) -> list[int]:
    fired: list[int] = []
    model.decoder.layers[1].feed_forward.layer.up.register_forward_hook(lambda *_: fired.append(1))
    return fired


@pytest.mark.parametrize(
    "change",
    ["train", "hook", "layer_hook", "grad", "float64"],
)
def test_the_modules_run_where_the_steps_would_skip_something(change):
    model = _model()
    fired = _hook_fired(model) if change == "hook" else []
    if change == "layer_hook":
        model.decoder.layers[0].register_forward_pre_hook(lambda *_: fired.append(1))
    if change == "train":
        model.decoder.layers[0].feed_forward.train()  # dropout on in one sub-layer
    if change == "float64":
        model = model.double()
    cache = model.new_cache()
    prompt = torch.randint(1, 300, (1, 3))
    with torch.set_grad_enabled(change == "grad"):
        model(prompt, cache=cache)
        model(torch.tensor([[7]]), cache=cache)
    if change == "hook":
        assert len(fired) == 2 and cache.steps == {1: None, 3: None}
    elif change == "layer_hook":
        assert len(fired) == 2 and cache.steps == {1: None, 3: None}
    elif change == "train":
        assert cache.steps == {1: None, 3: None}
    else:  # the call's own conditions: nothing is made
        assert cache.steps == {}


def test_plain_decoder_layer_refuses_other_layers():
    model = _model()
    layer = model.decoder.layers[0]
    assert plain_decoder_layer(layer.self_attn, layer.feed_forward)
    assert not plain_decoder_layer(layer.feed_forward, layer.self_attn)
    local = optimize(build_gpt(dataclasses.replace(model.config, attention="local", attention_window=4)))
    local.eval()
    lay = local.decoder.layers[0]
    assert not plain_decoder_layer(lay.self_attn, lay.feed_forward)
    mixed = _model()
    mixed.decoder.layers[0].self_attn.norm_first = False  # placements differ between the two residuals
    lay = mixed.decoder.layers[0]
    assert not plain_decoder_layer(lay.self_attn, lay.feed_forward)


def test_translation_decoding_keeps_its_modules():
    from attnlab.translation.config import Seq2SeqConfig
    from attnlab.translation.model import build_model  # layers with cross-attention

    torch.manual_seed(0)
    cfg = Seq2SeqConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=2, num_layers=1, dropout=0.0)
    model = optimize(build_model(cfg)).eval()
    src = torch.randint(4, 40, (1, 5))
    cache = model.new_cache()
    with torch.inference_mode():
        memory = model.encode(src, torch.ones_like(src))
        model.decode(torch.tensor([[2]]), memory, torch.ones_like(src), cache=cache)
        model.decode(torch.tensor([[7]]), memory, torch.ones_like(src), cache=cache, offset=1)
    assert isinstance(cache, StepCache) and cache.steps == {}
    assert "key" in cache[0]["cross"]  # the modules ran: the encoder-decoder keys are cached


@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@pytest.mark.parametrize("n, k", [(96, 32), (32, 96)])
@pytest.mark.parametrize("layout", ["kernel", "streamed"])
def test_small_product_fn_computes_small_product(rows, n, k, layout, monkeypatch):
    use_layout(layout, monkeypatch)
    torch.manual_seed(rows)
    layer = FastLinear(k, n)
    x = torch.randn(rows, 1, k)
    with torch.no_grad():
        fn = small_product_fn(layer, layer.weight, layer.bias, rows)
        assert torch.equal(fn(x), small_product(layer, x, layer.weight, layer.bias))
        torch.testing.assert_close(fn(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_a_hook_on_the_output_layer_keeps_the_module():
    model = _model()
    seen = []
    model.lm_head.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([[5, 6]]), cache=cache)
        model(torch.tensor([[7]]), cache=cache)
    assert seen == [(1, 2, 300), (1, 1, 300)]
    assert 1 in cache.steps  # the layers' steps are unaffected


def test_an_int8_model_generates_the_same_with_and_without_the_cache():
    from attnlab.inference.quantize import quantize

    model = quantize(_model())  # int8 projections and output layer: no `weight` to take a fast path on
    prompt = torch.randint(1, 300, (2, 3))
    cached = generate(model, prompt, max_new_tokens=6, ignore_eos=True).sequences
    assert cached == generate(model, prompt, max_new_tokens=6, ignore_eos=True, use_cache=False).sequences
