"""attnlab.accel.onednn_int8: oneDNN's int8 GEMM with attnlab's quantization computes what attnlab's kernel
computes (the same integers: equal to the float64 reference up to float32 rounding), a row's result does not
depend on the other rows or the thread count, the GELU epilogue, and its input checks."""

from __future__ import annotations

import pytest
import torch

from attnlab.accel import int8_gemm, onednn_int8

pytestmark = pytest.mark.skipif(
    not onednn_int8.available(),
    reason=f"oneDNN's int8 products are not used here: {onednn_int8.unavailable_reason()}",
)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("n", "k"), [(768, 256), (37, 19), (9, 1), (16, 100), (256, 1024)])
def test_products_equal_the_kernels_quantized_reference(n, k, bias):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=gen) * 0.05
    b = torch.randn(n, generator=gen) if bias else None
    packed, reference = onednn_int8.pack(w, b), int8_gemm.pack(w, b)
    for rows in (1, 5, 13, 128):
        x = torch.randn(rows, k, generator=gen)
        got = onednn_int8.product(x, packed)
        want = int8_gemm.reference_product(x, reference, int8_gemm.VNNI_LEVELS)
        # the same integers; the zero point's correction is applied in float32 after the product
        assert torch.allclose(got.double(), want, rtol=1e-5, atol=2e-5 * want.abs().max().item())
        exact = x @ w.T + (0 if b is None else b)
        rel = ((got - exact).norm() / exact.norm()).item()
        assert (0 < rel or k == 1) and rel < 0.02, rel  # 8-bit activations and weights per row (k = 1: exact)


def test_the_gelu_epilogue_is_gelu_of_the_product():
    torch.manual_seed(1)
    packed = onednn_int8.pack(torch.randn(300, 64) * 0.2, torch.randn(300))
    x = torch.randn(2, 7, 64)
    plain = onednn_int8.product(x, packed)
    fused = onednn_int8.product(x, packed, int8_gemm.GELU)
    assert fused.shape == (2, 7, 300)
    assert torch.allclose(fused, torch.nn.functional.gelu(plain), atol=1e-5)
    with pytest.raises(ValueError, match="act must be 0 or"):
        onednn_int8.product(x, packed, 7)


def test_a_rows_result_does_not_depend_on_the_batch_or_the_thread_count():
    torch.manual_seed(0)
    packed = onednn_int8.pack(torch.randn(200, 96), torch.randn(200))
    x = torch.randn(3, 41, 96)
    x[2] *= 50  # one sequence of large values: a scale per tensor would coarsen every other row
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = onednn_int8.product(x, packed)
        torch.set_num_threads(2)
        two = onednn_int8.product(x, packed)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    assert torch.equal(onednn_int8.product(x[1, 7:8], packed), one[1, 7:8])
    assert torch.equal(onednn_int8.product(x[0], packed), one[0])


def test_bad_inputs_are_refused_before_the_product():
    packed = onednn_int8.pack(torch.randn(8, 16))
    with pytest.raises(ValueError, match=r"x \(2, 15\).*against a \(8, 16\) weight"):
        onednn_int8.product(torch.randn(2, 15), packed)
    with pytest.raises(ValueError, match="float32 CPU input expected"):
        onednn_int8.product(torch.randn(2, 16, dtype=torch.float64), packed)
    assert onednn_int8.product(torch.randn(0, 16), packed).shape == (0, 8)


def test_the_quantization_and_epilogue_ops_have_fake_implementations():
    kernel = int8_gemm.loaded()
    x = torch.randn(4, 5, 32)
    torch.library.opcheck(kernel.quantize_rows, (x,))
    out = torch.randn(20, 12)
    args = (
        out,
        torch.rand(20) + 0.1,
        torch.randint(0, 255, (20,), dtype=torch.int32),
        torch.randn(12),
        None,
        1,
    )
    torch.library.opcheck(kernel.finish_rows, args)


def test_torch_compile_and_export_trace_the_three_ops():
    packed = onednn_int8.pack(torch.randn(64, 32), torch.randn(64))

    class Product(torch.nn.Module):
        def forward(self, x):
            return onednn_int8.product(x, packed, int8_gemm.GELU)

    x = torch.randn(5, 32)
    want = Product()(x)
    assert torch.equal(torch.compile(Product(), fullgraph=True, backend="aot_eager")(x), want)
    exported = torch.export.export(Product(), (x,))
    assert torch.equal(exported.module()(x), want)
