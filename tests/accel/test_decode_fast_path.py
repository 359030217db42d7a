"""The decoding step's fast path: products of a few rows in the weight layout chosen by shape
(attnlab.accel.linear.small_rows / small_product) and the stacked query/key/value projection
(nn.buffered_attention.BufferedSelfAttention) give the three-product, F.linear results, and their cached
copies follow the parameters when those change."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab.accel.derived as derived
import attnlab.accel.linear as linear_module
from attnlab.accel import few_row_gemm, optimize
from attnlab.accel.linear import FastLinear, GenerationHead, column_major_copy, small_product, small_rows
from attnlab.generation import generate
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset


@pytest.fixture(params=["kernel", "blas"])
def products(request, monkeypatch):
    """Each few-row product path: attnlab's kernel (attnlab.accel.few_row_gemm) and PyTorch's BLAS layouts."""
    if request.param == "kernel":
        if not few_row_gemm.available():
            pytest.skip(f"the few-row kernel is not available: {few_row_gemm.unavailable_reason()}")
    else:
        blas_only(monkeypatch)
    return request.param


def blas_only(monkeypatch):
    """The few-row kernel off: `small_product` picks among PyTorch's layouts, as where it cannot be built."""
    monkeypatch.setattr(few_row_gemm, "available", lambda: False)


def test_small_rows_path_equals_f_linear_and_follows_the_weight(products):
    torch.manual_seed(0)
    layer = FastLinear(48, 40)
    x = torch.randn(1, 1, 48)
    with torch.no_grad():
        assert small_rows(x, layer.weight)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
        layer.weight.add_(1.0)  # an in-place update (an optimizer step) must not leave a stale copy
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
    assert not small_rows(x, layer.weight)  # gradients recorded: the ordinary path
    with torch.no_grad():
        assert small_rows(torch.randn(8, 48), layer.weight)  # a batch of 8 decoding steps
        assert not small_rows(torch.randn(9, 48), layer.weight)  # more rows than that
        assert not small_rows(torch.randn(2, 48, dtype=torch.float64), layer.weight.double())


# (N, K) wide, square and narrow; rows 1-2 read a transposed copy, 3-8 compute (W @ x^T)^T when N > K and
# the weight is streamed (``streamed``: the threshold lowered to 0 so these small weights count as such)
@pytest.mark.parametrize("n, k", [(96, 32), (32, 32), (32, 96)])
@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (1, 2), (3, 1), (8, 1), (2, 4), (5,)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("streamed", [True, False])
def test_small_product_equals_f_linear_in_every_layout(n, k, shape, bias, streamed, products, monkeypatch):
    if streamed:
        monkeypatch.setattr(linear_module, "STREAMED_WEIGHT", 0)
        monkeypatch.setattr(linear_module, "INTEL_MKL", False)  # the transposed form on any CPU
    torch.manual_seed(n + k + len(shape))
    layer = FastLinear(k, n, bias=bias)
    x = torch.randn(*shape, k)
    want = F.linear(x, layer.weight, layer.bias)
    with torch.no_grad():
        got = small_product(layer, x, layer.weight, layer.bias)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)  # FastLinear takes this path
        # the column-major result of 3-8 rows feeds the next product and elementwise ops correctly
        after, want_after = F.gelu(got) @ layer.weight, F.gelu(want) @ layer.weight
        torch.testing.assert_close(after, want_after, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("intel", [True, False])
def test_streamed_few_row_product_takes_the_transposed_form_except_on_intel(intel, monkeypatch):
    blas_only(monkeypatch)
    monkeypatch.setattr(linear_module, "STREAMED_WEIGHT", 0)
    monkeypatch.setattr(linear_module, "INTEL_MKL", intel)
    layer = FastLinear(32, 96)
    x = torch.randn(8, 32)
    with torch.no_grad():
        got = small_product(layer, x, layer.weight, layer.bias)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    # (W @ x^T)^T comes back column-major; MKL's plain x @ W^T row-major
    assert got.is_contiguous() == intel


def test_column_major_copy_follows_a_new_tensor_and_in_place_changes():
    holder = torch.nn.Module()
    first = torch.randn(6, 4)
    copy = column_major_copy(holder, first)
    torch.testing.assert_close(copy, first)
    assert copy.t().is_contiguous()
    second = first.clone()
    second.add_(1.0)
    torch.testing.assert_close(column_major_copy(holder, second), second)  # another tensor: rebuilt
    first.mul_(2.0)  # in place: rebuilt from the new values
    torch.testing.assert_close(column_major_copy(holder, first), first)


def test_no_column_major_copy_of_a_weight_above_the_cap(monkeypatch):
    blas_only(monkeypatch)
    monkeypatch.setattr(linear_module, "INTEL_MKL", False)  # on Intel MKL's plain product takes 1-2 rows
    monkeypatch.setattr(linear_module, "MAX_COPIED_WEIGHT", 96 * 32 - 1)
    layer = FastLinear(32, 96)
    x = torch.randn(1, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    assert layer not in derived._CACHE
    monkeypatch.setattr(linear_module, "MAX_COPIED_WEIGHT", 96 * 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert "_weight_t" in derived._CACHE[layer]
    assert "_weight_t" not in layer.__dict__ and layer.state_dict().keys() == {"weight", "bias"}


def test_no_column_major_copy_on_intel(monkeypatch):
    """On Intel CPUs one or two rows take MKL's plain x @ W^T: the same values, and no copy of the weight."""
    blas_only(monkeypatch)
    monkeypatch.setattr(linear_module, "INTEL_MKL", True)
    layer = FastLinear(32, 96)
    for rows in (1, 2):
        x = torch.randn(rows, 32)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
    assert layer not in derived._CACHE
    monkeypatch.setattr(linear_module, "INTEL_MKL", False)
    with torch.no_grad():
        layer(torch.randn(1, 32))
    assert "_weight_t" in derived._CACHE[layer]


@pytest.mark.parametrize("streamed", [True, False])
def test_batched_decoding_equals_the_uncached_model_at_every_batch_size_up_to_the_small_row_limit(
    streamed, products, monkeypatch
):
    if streamed:  # the (W @ x^T)^T form for 3-8 rows, which a weight this small would not take
        monkeypatch.setattr(linear_module, "STREAMED_WEIGHT", 0)
        monkeypatch.setattr(linear_module, "INTEL_MKL", False)
    torch.manual_seed(0)
    # vocabulary 300 > width 128: the output layer is a wide product
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=2, max_positions=64)
    model = optimize(build_gpt(cfg).eval())
    for b in (1, 2, 3, 8):
        prompt = torch.randint(0, 300, (b, 4))
        cached = generate(model, prompt, max_new_tokens=10, ignore_eos=True).sequences
        uncached = generate(model, prompt, max_new_tokens=10, ignore_eos=True, use_cache=False).sequences
        assert cached == uncached, b


def test_generation_after_a_training_step_uses_the_new_weights(products):
    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=50, num_layers=2, max_positions=48)
    model = optimize(build_gpt(cfg))
    prompt = torch.randint(0, 50, (2, 5))
    for _ in range(2):
        cached = generate(model, prompt, max_new_tokens=12, ignore_eos=True).sequences
        uncached = generate(model, prompt, max_new_tokens=12, ignore_eos=True, use_cache=False).sequences
        assert cached == uncached
        model.train()  # a training step: every projection changes in place
        opt = torch.optim.SGD(model.parameters(), lr=5.0)
        model(prompt, labels=prompt).loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            want = model(prompt[:1]).logits[0, -1].argmax().item()
        assert generate(model, prompt[:1], max_new_tokens=1, ignore_eos=True).sequences[0][0] == want


def test_decoding_builds_its_derived_weights_once(products, monkeypatch):
    # generate runs under inference_mode; a copy derived there from another derived weight (the stacked
    # q/k/v's column-major copy, kept where the CPU is not Intel's) must still be cached, not rebuilt on every
    # step
    monkeypatch.setattr(linear_module, "INTEL_MKL", False)
    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=2, max_positions=64)
    model = optimize(build_gpt(cfg))
    model.eval()
    prompt = torch.randint(0, 300, (1, 4))
    generate(model, prompt, max_new_tokens=3, ignore_eos=True)

    def results():
        return {(id(m), name): id(entry[2]) for m in model.modules() for name, entry in
                derived._CACHE.get(m, {}).items()}  # fmt: skip

    before = results()
    qkv_copy = "_qkv_t_panels" if products == "kernel" else "_qkv_t"
    assert any(name == qkv_copy for _, name in before)
    generate(model, prompt, max_new_tokens=5, ignore_eos=True)
    assert results() == before


def test_no_panels_of_a_weight_above_the_cap(products, monkeypatch):
    monkeypatch.setattr(linear_module, "INTEL_MKL", False)
    monkeypatch.setattr(linear_module, "MAX_COPIED_WEIGHT", 96 * 32 - 1)
    layer = FastLinear(32, 96)
    x = torch.randn(3, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert "_weight_t_panels" not in derived._CACHE.get(layer, {})
    monkeypatch.setattr(linear_module, "MAX_COPIED_WEIGHT", 96 * 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert ("_weight_t_panels" in derived._CACHE.get(layer, {})) == (products == "kernel")


def test_a_generations_output_layer_may_copy_above_the_cap(products, monkeypatch):
    # a GPT's output layer (GenerationHead: generation repeats it) takes MAX_GENERATION_COPY for the kernel's
    # panels; another layer of its size keeps MAX_COPIED_WEIGHT (here below the 300 x 128 weight)
    monkeypatch.setattr(linear_module, "INTEL_MKL", False)
    monkeypatch.setattr(linear_module, "MAX_COPIED_WEIGHT", 300 * 128 - 1)
    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=1, max_positions=64)
    model = optimize(build_gpt(cfg))
    model.eval()
    head = model.lm_head
    assert type(head) is GenerationHead
    other = FastLinear(128, 300, bias=False)
    with torch.no_grad():
        other(torch.randn(1, 1, 128))
    assert not derived._CACHE.get(other)
    prompt = torch.randint(0, 300, (2, 4))
    got = generate(model, prompt, max_new_tokens=5, ignore_eos=True).sequences
    # the kernel's panels; without the kernel MKL's column-major copy keeps the common cap: none
    made = set(derived._CACHE.get(head, {}))
    # the kernel's panels and the product bound on them
    assert made == ({"_weight_t_panels", "_weight_t_fn"} if products == "kernel" else set())
    assert got == generate(model, prompt, max_new_tokens=5, ignore_eos=True, use_cache=False).sequences


def test_the_kernel_is_taken_whatever_the_cpu_vendor(products, monkeypatch):
    monkeypatch.setattr(linear_module, "INTEL_MKL", True)
    layer = FastLinear(32, 96)
    with torch.no_grad():
        layer(torch.randn(4, 32))
    assert ("_weight_t_panels" in derived._CACHE.get(layer, {})) == (products == "kernel")
