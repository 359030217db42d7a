"""attnlab.accel.int8_gemm: the int8 product kernel against its quantization computed in float64 and against
the float product, its invariances (a row's result does not depend on the other rows or the thread count), its
input checks, and how it is loaded and refused (the build itself is attnlab.accel.kernel_build's, tested with
few_row_gemm's)."""

from __future__ import annotations

import kernel_cache
import pytest
import torch

from attnlab.accel import int8_gemm, kernel_build

needs_kernel = pytest.mark.skipif(
    not int8_gemm.available(), reason=f"the int8 kernel is not available: {int8_gemm.unavailable_reason()}"
)


@needs_kernel
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("n", "k"), [(768, 256), (37, 19), (9, 1), (16, 100), (256, 1024)])
def test_products_equal_the_quantized_reference_and_stay_close_to_float(n, k, bias):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=gen) * 0.05
    b = torch.randn(n, generator=gen) if bias else None
    packed = int8_gemm.pack(w, b)
    for rows in (1, 5, 6, 7, 13, 128):
        x = torch.randn(rows, k, generator=gen)
        got = int8_gemm.product(x, packed)
        want = int8_gemm.reference_product(x, packed, int8_gemm.levels())
        # the same integers: only float32 rounding of the epilogue (and, rarely, of x / s at a rounding tie)
        assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-3 * want.abs().max().item())
        exact = x @ w.T + (0 if b is None else b)
        rel = ((got - exact).norm() / exact.norm()).item()
        assert 0 < rel < 0.03, rel  # 7-bit activations per row, 8-bit weights per row


@needs_kernel
def test_an_identity_weight_gives_back_the_dequantized_rows():
    # Wq = 127 I and scale 1/127: y = s_m (xq - z_m), the quantization itself, checked against the reference
    k = 70  # the 32-wide vector quantization and a scalar tail
    x = torch.randn(9, k) * torch.linspace(0.1, 5, 9)[:, None]
    x[3] = x[3].abs()  # a row with no negative values: zero point 0
    x[4] = 0.0  # an all-zero row
    got = int8_gemm.product(x, int8_gemm.pack(torch.eye(k)))
    xq, s, z = int8_gemm.quantize_rows_reference(x, int8_gemm.levels())
    assert torch.allclose(got, (xq - z[:, None]) * s[:, None], rtol=1e-6, atol=1e-6)
    assert torch.equal(got[4], torch.zeros(k))
    assert xq.min() >= 0 and xq.max() <= int8_gemm.levels() and z[3] == 0
    step = s.max().item()
    assert (got - x).abs().max() <= 0.5 * step * 1.001  # within half a step of each row's scale


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_batch_or_the_thread_count():
    torch.manual_seed(0)
    packed = int8_gemm.pack(torch.randn(200, 96), torch.randn(200))
    x = torch.randn(3, 41, 96)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = int8_gemm.product(x, packed)
        torch.set_num_threads(2)
        two = int8_gemm.product(x, packed)
    finally:
        torch.set_num_threads(before)
    assert one.shape == (3, 41, 200)
    assert torch.equal(one, two)
    assert torch.equal(int8_gemm.product(x[1, 7:8], packed), one[1, 7:8])
    assert torch.equal(int8_gemm.product(x[:, 5:19].transpose(0, 1), packed), one[:, 5:19].transpose(0, 1))


@needs_kernel
def test_bad_inputs_are_refused_before_the_kernel_reads_them():
    packed = int8_gemm.pack(torch.randn(8, 16))
    with pytest.raises(ValueError, match=r"x \(2, 15\).*against a \(8, 16\) weight"):
        int8_gemm.product(torch.randn(2, 15), packed)
    with pytest.raises(ValueError, match="float32 CPU input expected"):
        int8_gemm.product(torch.randn(2, 16, dtype=torch.float64), packed)
    assert int8_gemm.product(torch.randn(0, 16), packed).shape == (0, 8)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """`int8_gemm._load` run anew, building into an empty cache directory."""
    yield from kernel_cache.fresh(int8_gemm, "ATTNLAB_INT8_GEMM", tmp_path, monkeypatch)


@needs_kernel
@pytest.mark.slow  # two builds of its own (~20-60 s)
def test_built_into_the_cache_and_a_wrong_library_or_version_is_refused(tmp_path):
    module = "attnlab.accel.int8_gemm"
    assert kernel_cache.load_in_child(module, tmp_path) == "loaded"
    names = [p.name.split("-")[0] for p in (tmp_path / "kernels").iterdir()]
    assert names == ["int8_gemm_vnni" if int8_gemm.levels() == int8_gemm.VNNI_LEVELS else "int8_gemm"]
    reason = kernel_cache.load_in_child(module, tmp_path, "m.VERSION += 1")
    assert "failed its check" in reason and "version" in reason
    # the zero points' correction added instead of subtracted
    changed = int8_gemm.SOURCE.read_text().replace("_mm256_sub_epi32(acc", "_mm256_add_epi32(acc")
    wrong = kernel_cache.source_beside(int8_gemm, tmp_path, changed)
    reason = kernel_cache.load_in_child(module, tmp_path, f"m.SOURCE = Path({str(wrong)!r})")
    assert "differ from the reference" in reason


def test_the_vnni_build_is_chosen_by_the_cpu_flags():
    avx512 = frozenset({"avx2", "avx512_vnni", "avx512vl"})
    assert int8_gemm.vnni_flags(avx512) == ("-mavx512vnni", "-mavx512vl")
    assert int8_gemm.vnni_flags(frozenset({"avx2", "avx_vnni"})) == ("-mavxvnni",)
    assert int8_gemm.vnni_flags(frozenset({"avx2", "avx512_vnni"})) is None  # no 256-bit forms without VL
    if available := int8_gemm.available():
        has_vnni = int8_gemm.vnni_flags(kernel_build.cpu_flags()) is not None
        assert int8_gemm.levels() == (int8_gemm.VNNI_LEVELS if has_vnni else int8_gemm.LEVELS)
    assert available or int8_gemm.unavailable_reason()


@needs_kernel
def test_eight_bit_activations_halve_the_quantization_step():
    # 7 bits: the step is (hi - lo) / 127; 8 bits (VNNI): / 255
    x = torch.linspace(-1, 1, 64)[None, :]
    got = int8_gemm.product(x, int8_gemm.pack(torch.eye(64)))
    step = 2 / int8_gemm.levels()
    assert (got - x).abs().max() <= 0.5 * step * 1.01 + 1 / 127  # the weights' own step: 1 / 127 of 1


def test_switched_off_it_gives_its_reason_without_a_warning(fresh, monkeypatch, recwarn):
    monkeypatch.setenv("ATTNLAB_INT8_GEMM", "off")
    assert not int8_gemm.available()
    assert int8_gemm.unavailable_reason() == "ATTNLAB_INT8_GEMM=off"
    with pytest.raises(RuntimeError, match="int8 product kernel is not available: ATTNLAB_INT8_GEMM=off"):
        int8_gemm.product(torch.randn(1, 4), int8_gemm.pack(torch.randn(2, 4)))
    assert not [w for w in recwarn if issubclass(w.category, int8_gemm.Int8GemmWarning)]


def test_a_failed_build_warns_once(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setattr(kernel_build, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(kernel_build.platform, "machine", lambda: "x86_64")
    with pytest.warns(int8_gemm.Int8GemmWarning, match=r"int8 product kernel is not used .*C\+\+ compiler"):
        assert not int8_gemm.available()
    assert not int8_gemm.available()  # cached: no second warning (pytest would fail on an unexpected one)
