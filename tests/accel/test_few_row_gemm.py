"""attnlab.accel.few_row_gemm: the few-row product kernel against F.linear, its invariances (a row's result
does not depend on the other rows or the thread count), its input checks, and how it is built, cached,
checked and refused."""

from __future__ import annotations

import os

import kernel_cache
import pytest
import torch
import torch.nn.functional as F

from attnlab.accel import few_row_gemm, kernel_build, optimize
from attnlab.accel.derived import _CACHE as derived_cache
from attnlab.accel.derived import derived
from attnlab.accel.linear import FastLinear

needs_kernel = pytest.mark.skipif(
    not few_row_gemm.available(),
    reason=f"the few-row kernel is not available: {few_row_gemm.unavailable_reason()}",
)


def test_the_kernel_is_used_wherever_it_can_be_built():
    # a kernel that fails its check is not used and the tests above skip: this one fails instead
    buildable = (
        {"avx2", "fma"} <= kernel_build.cpu_flags()
        and kernel_build.platform.machine().lower() in ("x86_64", "amd64")
        and kernel_build.shutil.which(os.environ.get("CXX", "c++")) is not None
        and not kernel_build.switched_off("ATTNLAB_FEW_ROW_GEMM")
    )
    if not buildable:
        pytest.skip(f"no kernel to build here: {few_row_gemm.unavailable_reason()}")
    assert few_row_gemm.available(), few_row_gemm.unavailable_reason()


def reference(x, w, b):
    return F.linear(x.double(), w.double(), None if b is None else b.double())


@needs_kernel
@pytest.mark.parametrize("rows", list(range(1, 18)))  # every tile shape, and more than 8 rows (two passes)
@pytest.mark.parametrize("n, k", [(8, 8), (37, 19), (200, 64), (1, 5), (64, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_f_linear_in_float64(rows, n, k, bias):
    g = torch.Generator().manual_seed(rows * 1000 + n + k)
    w, x = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    fn = few_row_gemm.product_fn(torch.nn.Module(), w, b)
    got = fn(x)
    assert got.shape == (rows, n) and got.dtype == torch.float32 and got.is_contiguous()
    torch.testing.assert_close(got.double(), reference(x, w, b), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize(
    "rows, n, k",
    [(100, 37, 19), (257, 200, 64), (50, 24, 2048), (61, 8, 40), (130, 9, 300), (4096, 16, 8)],
)  # 6-row tiles and their remainders, panel pairs and an odd panel, several row blocks (K = 2048), few panels
def test_many_rows_equal_f_linear_and_each_row_alone(rows, n, k):
    g = torch.Generator().manual_seed(rows + n + k)
    w, b, x = torch.randn(n, k, generator=g), torch.randn(n, generator=g), torch.randn(rows, k, generator=g)
    x /= k**0.5  # outputs of order 1 whatever K: float32 summation's error stays within the tolerance
    fn = few_row_gemm.product_fn(torch.nn.Module(), w, b)
    got = fn(x)
    torch.testing.assert_close(got.double(), reference(x, w, b), rtol=1e-5, atol=1e-5)
    for i in (0, rows // 2, rows - 1):  # a row's result is the one it has alone (the arithmetic per output)
        assert torch.equal(fn(x[i : i + 1]), got[i : i + 1]), i


def seeded_product(seed: int, n: int, k: int, rows: int):
    """The kernel's product with a random (n, k) weight and bias, and random input rows (rows, k)."""
    g = torch.Generator().manual_seed(seed)
    w, b = torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    return few_row_gemm.product_fn(torch.nn.Module(), w, b), torch.randn(rows, k, generator=g)


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_other_rows():
    fn, x = seeded_product(1, 100, 48, 8)
    alone = torch.cat([fn(x[i : i + 1]) for i in range(8)])
    for rows in range(2, 9):
        assert torch.equal(fn(x[:rows]), alone[:rows]), rows


@needs_kernel
def test_the_result_does_not_depend_on_the_thread_count():
    cases = [(1000, 96, 5), (1000, 96, 40), (16, 32, 100)]  # few rows; many rows split by panels, by rows
    for n, k, rows in cases:
        fn, x = seeded_product(2, n, k, rows)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = fn(x)
            torch.set_num_threads(3)  # an uneven split
            three = fn(x)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(one, three), (n, k, rows)


@needs_kernel
def test_leading_dimensions_and_strided_input():
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    fn = few_row_gemm.product_fn(torch.nn.Module(), w, b)
    inputs = [torch.randn(*shape, 16, generator=g) for shape in ((2, 1), (2, 2, 1), ())]
    inputs += [torch.randn(16, 3, generator=g).t(), torch.randn(0, 16)]  # strided; no rows
    for x in inputs:
        got = fn(x)
        assert got.shape == (*x.shape[:-1], 24)
        torch.testing.assert_close(got.double(), reference(x, w, b), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_wrong_inputs_are_refused_before_the_kernel_reads_them():
    w = torch.randn(24, 16)
    fn = few_row_gemm.product_fn(torch.nn.Module(), w, None)
    for x in (
        torch.randn(2, 15),
        torch.randn(2, 17),
        torch.randn(2, 16, dtype=torch.float64),
        torch.tensor(1.0),
    ):
        with pytest.raises(ValueError, match=r"few-row product: x .* against a \(24, 16\)"):
            fn(x)
    with pytest.raises(ValueError, match="bias"):
        few_row_gemm.product_fn(torch.nn.Module(), w, torch.randn(23))
    with pytest.raises(ValueError, match="panels"):
        few_row_gemm.product(torch.randn(1, 16), torch.randn(2, 16, 4), None, 24)


@needs_kernel
def test_panels_follow_the_weight_and_are_never_saved():
    layer = FastLinear(16, 20)
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        layer.weight.mul_(2.0)  # in place: the panels are rebuilt
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert layer.state_dict().keys() == {"weight", "bias"}
    panels = derived(layer, "_weight_t_panels", (layer.weight,), lambda: None)
    assert panels.shape == (3, 16, 8)  # 20 columns: 3 panels, the last half zeros
    assert torch.equal(panels[2, :, 4:], torch.zeros(16, 4))
    assert torch.equal(panels[0, :, 3], layer.weight[3].detach())


@needs_kernel
def test_decoding_with_the_kernel_matches_pytorchs_products(monkeypatch):
    from attnlab.generation import generate
    from attnlab.models.gpt import build_gpt
    from attnlab.models.gpt_presets import get_gpt_preset

    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=300, num_layers=2, max_positions=64)
    model = optimize(build_gpt(cfg))
    model.eval()
    prompt = torch.randint(0, 300, (3, 5))

    def step_logits():  # the prompt, then 6 greedy steps of 3 rows each, through the key/value cache
        cache, ids, out = model.new_cache(), prompt, []
        with torch.no_grad():
            for _ in range(7):
                out.append(model(ids, cache=cache).logits[:, -1])
                ids = out[-1].argmax(-1, keepdim=True)
        return out

    kernel = step_logits()
    panels = {name for m in model.modules() for name in derived_cache.get(m, {}) if name.endswith("_panels")}
    assert panels == {"_qkv_t_panels", "_weight_t_panels"}  # every product of the steps took the kernel
    kernel_tokens = generate(model, prompt, max_new_tokens=8, ignore_eos=True).sequences
    monkeypatch.setattr(few_row_gemm, "available", lambda: False)
    blas = step_logits()
    assert generate(model, prompt, max_new_tokens=8, ignore_eos=True).sequences == kernel_tokens
    for a, b in zip(kernel, blas, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# building, caching and refusing: a test that builds anew loads in a child process (ops register once a
# process); the others run `_load` here, into their own cache directory, and stop before loading


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """`few_row_gemm._load` run anew, building into an empty cache directory."""
    yield from kernel_cache.fresh(few_row_gemm, "ATTNLAB_FEW_ROW_GEMM", tmp_path, monkeypatch)


MODULE = "attnlab.accel.few_row_gemm"


@needs_kernel
def test_built_once_then_loaded_from_the_cache_and_another_version_refused(tmp_path):
    assert kernel_cache.load_in_child(MODULE, tmp_path) == "loaded"
    kernels = tmp_path / "kernels"
    assert kernels.stat().st_mode & 0o777 == 0o700
    (build,) = kernels.iterdir()
    assert build.name.startswith("few_row_gemm-") and build.stat().st_mode & 0o777 == 0o700
    library = build / "attnlab_few_row_gemm.so"
    before = library.stat()
    assert kernel_cache.load_in_child(MODULE, tmp_path) == "loaded"
    after = library.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not compiled again
    # a library whose version op disagrees is refused, and its build removed for the next process
    reason = kernel_cache.load_in_child(MODULE, tmp_path, "m.VERSION += 1")
    assert "failed its check" in reason and "version 5, expected 6" in reason
    assert not build.exists()


@needs_kernel
@pytest.mark.slow  # a build of its own (~10-30 s)
def test_a_library_that_computes_wrongly_is_refused(tmp_path):
    source = few_row_gemm.SOURCE.read_text()
    changed = source.replace("acc[m][q] = _mm256_fmadd_ps(xv, w[q], acc[m][q])",
                             "acc[m][q] = _mm256_add_ps(xv, acc[m][q])")  # fmt: skip
    assert changed != source
    wrong = kernel_cache.source_beside(few_row_gemm, tmp_path, changed)
    reason = kernel_cache.load_in_child(MODULE, tmp_path / "cache", f"m.SOURCE = Path({str(wrong)!r})")
    assert "differ from F.linear" in reason
    assert not list((tmp_path / "cache" / "kernels").iterdir())  # its build removed


@needs_kernel
def test_another_build_is_not_loaded_into_a_process_that_has_one(fresh):
    # its ops would be registered twice, which aborts the process: refused with a reason instead
    reason = few_row_gemm._load()
    assert isinstance(reason, str) and "another build of the kernel is loaded in this process" in reason
    assert few_row_gemm.torch.ops.attnlab.few_row_gemm_version() == few_row_gemm.VERSION  # the first stays


def test_no_compiler_failed_build_and_switch_off_give_reasons(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNLAB_FEW_ROW_GEMM", "off")
    assert few_row_gemm._load() == "ATTNLAB_FEW_ROW_GEMM=off"
    monkeypatch.delenv("ATTNLAB_FEW_ROW_GEMM")
    if not {"avx2", "fma"} <= kernel_build.cpu_flags():
        assert "AVX2" in few_row_gemm._load()
        return
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert "no C++ compiler: 'no-such-compiler-here'" in few_row_gemm._load()
    # /bin/false: a compiler that fails (in a child: this process may have loaded a build already)
    reason = kernel_cache.load_in_child(MODULE, tmp_path / "child", env={"CXX": "false"})
    assert "failed to build" in reason and "'false'" in reason
    assert not list((tmp_path / "child" / "kernels").glob("*/*.so"))  # nothing half-written left behind


def test_a_cache_directory_others_may_write_to_is_refused(fresh):
    fresh.mkdir(parents=True)
    fresh.chmod(0o777)
    if not {"avx2", "fma"} <= kernel_build.cpu_flags() or kernel_build.shutil.which("c++") is None:
        pytest.skip("no kernel to build here")
    reason = few_row_gemm._load()
    assert isinstance(reason, str) and "writable by others" in reason


def test_a_failure_warns_once_and_the_products_fall_back(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setattr(kernel_build, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(kernel_build.platform, "machine", lambda: "x86_64")
    with pytest.warns(few_row_gemm.FewRowGemmWarning, match="panel product kernel is not used"):
        assert not few_row_gemm.available()
    assert "no C++ compiler" in few_row_gemm.unavailable_reason()
    layer = FastLinear(16, 40)
    x = torch.randn(2, 16)
    with torch.no_grad():  # small_product falls back to PyTorch's products
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="not available: no C\\+\\+ compiler"):
        few_row_gemm.product_fn(torch.nn.Module(), layer.weight, None)


def test_no_warning_for_a_cpu_the_kernel_is_not_for(fresh, monkeypatch, recwarn):
    monkeypatch.setattr(kernel_build.platform, "machine", lambda: "arm64")
    assert not few_row_gemm.available()
    assert few_row_gemm.unavailable_reason() == kernel_build.NOT_THIS_CPU
    assert not [w for w in recwarn if issubclass(w.category, few_row_gemm.FewRowGemmWarning)]


@needs_kernel
@pytest.mark.slow  # a build of its own (~10-30 s)
def test_an_unusable_home_cache_falls_back_to_a_private_temporary_directory(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # the cache directory would have to be made under a file
    setup = f"import tempfile\ntempfile.tempdir = {str(tmp_path / 'tmp')!r}\n"
    (tmp_path / "tmp").mkdir()
    env = {"XDG_CACHE_HOME": str(blocked), "ATTNLAB_CACHE": ""}
    assert kernel_cache.load_in_child(MODULE, tmp_path, setup, env) == "loaded"
    assert list((tmp_path / "tmp" / f"attnlab-{os.getuid()}" / "kernels").glob("few_row_gemm-*/*.so"))


def test_a_named_cache_directory_that_cannot_be_made_is_reported(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("ATTNLAB_CACHE", str(blocked))
    monkeypatch.delenv("ATTNLAB_FEW_ROW_GEMM", raising=False)
    if not {"avx2", "fma"} <= kernel_build.cpu_flags() or kernel_build.shutil.which("c++") is None:
        pytest.skip("no kernel to build here")
    reason = few_row_gemm._load()
    assert isinstance(reason, str) and str(blocked) in reason


@needs_kernel
@pytest.mark.parametrize("n, k, lead", [(5, 0, (3,)), (0, 4, (2,)), (0, 0, (2,)), (5, 4, (0,))])
def test_empty_sizes(n, k, lead):
    w, b, x = torch.randn(n, k), torch.randn(n), torch.randn(*lead, k)
    got = few_row_gemm.product_fn(torch.nn.Module(), w, b)(x)
    want = F.linear(x, w, b)
    assert got.shape == want.shape and torch.equal(got, want)  # no product to round: bias or nothing


# what the kernel's path must leave as PyTorch has it (found in review)


@needs_kernel
def test_default_dtype_and_device_do_not_reach_the_kernel():
    layer = FastLinear(16, 40)
    x = torch.randn(2, 16)
    want = F.linear(x, layer.weight, layer.bias)
    with torch.no_grad():
        layer(x)  # panels made under the defaults
        for dtype in (torch.float16, torch.float64):
            previous = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                got = layer(x)
            finally:
                torch.set_default_dtype(previous)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        with torch.device("meta"):
            got = layer(x)
        assert got.device.type == "cpu"
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_autocast_vmap_and_negative_views_keep_pytorchs_results():
    layer = FastLinear(16, 40)
    x = torch.randn(2, 16)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x).dtype == torch.bfloat16  # as F.linear under autocast
        batched = torch.vmap(layer)(torch.randn(3, 2, 16))
        assert batched.shape == (3, 2, 40)
        neg = torch._neg_view(x)
        torch.testing.assert_close(layer(neg), F.linear(-x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize(
    ("b", "t", "heads", "d"), [(1, 128, 4, 64), (2, 13, 2, 12), (3, 70, 3, 8), (1, 1, 1, 4)]
)
def test_attention_equals_pytorchs_within_rounding_and_ignores_the_thread_count(b, t, heads, d):
    gen = torch.Generator().manual_seed(t)
    qkv = torch.randn(b, t, 3 * heads * d, generator=gen)
    bias = torch.zeros(b, t)
    bias[0, t // 2 + 1 :] = torch.finfo(torch.float32).min  # one sequence padded
    before = torch.get_num_threads()
    try:
        for key_bias in (None, bias):
            want = few_row_gemm._attention_reference(qkv, heads, key_bias)
            torch.set_num_threads(1)
            one = few_row_gemm.attention(qkv, heads, key_bias)
            torch.set_num_threads(2)
            two = few_row_gemm.attention(qkv, heads, key_bias)
            assert one.shape == (b, t, heads * d)
            assert torch.allclose(one.double(), want, rtol=1e-5, atol=2e-6)
            assert torch.equal(one, two)  # each row's arithmetic is the same whatever the split
            if key_bias is not None and t > 1:  # a padded key gets no weight: its values change nothing
                moved = qkv.clone()
                moved[0, -1, heads * d :] += 100.0  # its key and value
                assert torch.equal(few_row_gemm.attention(moved, heads, key_bias)[0], two[0])
    finally:
        torch.set_num_threads(before)


@needs_kernel
def test_attention_refuses_bad_shapes():
    with pytest.raises(ValueError, match=r"qkv \(1, 4, 10\).*for 2 heads"):
        few_row_gemm.attention(torch.randn(1, 4, 10), 2)
    with pytest.raises(ValueError, match=r"key_bias \(1, 3\) torch.float32, expected \(1, 4\)"):
        few_row_gemm.attention(torch.randn(1, 4, 12), 2, torch.zeros(1, 3))


@needs_kernel
@pytest.mark.parametrize("post_ln", [True, False])
def test_merged_product_equals_the_residual_merge_and_follows_the_norm(post_ln):
    torch.manual_seed(5)
    proj, norm = FastLinear(24, 40), torch.nn.LayerNorm(40, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x, residual = torch.randn(2, 9, 24), torch.randn(2, 9, 40)
    fn = few_row_gemm.cached_merge_fn(proj, proj.weight, proj.bias, norm if post_ln else None)
    summed = F.linear(x.double(), proj.weight.double(), proj.bias.double()) + residual.double()
    want = F.layer_norm(summed, (40,), norm.weight.double(), norm.bias.double(), 1e-6) if post_ln else summed
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fn(x, residual)
        torch.set_num_threads(2)
        two = fn(x, residual)
    finally:
        torch.set_num_threads(before)
    assert torch.allclose(one.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(one, two)  # rows split differently for the merge, each row's arithmetic the same
    if post_ln:  # a new LayerNorm weight is seen (the bound product is rebuilt)
        with torch.no_grad():
            norm.weight.mul_(2.0)
        fn = few_row_gemm.cached_merge_fn(proj, proj.weight, proj.bias, norm)
        assert torch.allclose(fn(x, residual).double() - norm.bias.double(), 2 * (want - norm.bias.double()),
                              rtol=1e-4, atol=1e-4)  # fmt: skip
    with pytest.raises(ValueError, match=r"residual \(2, 9, 39\)"):
        fn(x, residual[..., :39])
