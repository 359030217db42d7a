"""attnlab.accel.onednn_linear and FastLinear: the oneDNN float32 CPU path computes F.linear's function and
gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.accel import linear as lin_mod
from attnlab.accel import onednn_linear
from attnlab.accel.linear import FastLinear
from attnlab.accel.onednn_linear import MIN_MACS, cpu_gemm, linear, set_cpu_gemm

needs_onednn = pytest.mark.skipif(onednn_linear._OP is None, reason="this PyTorch build has no oneDNN linear")


@pytest.fixture(autouse=True)
def _restore_gemm():
    before = cpu_gemm()
    yield
    set_cpu_gemm(before)


def _grads(fn, x, w, b, g):
    for t in (x, w, b):
        if t is not None:
            t.grad = None
    out = fn(x, w, b)
    (out * g).sum().backward()
    return out.detach(), [None if t is None else t.grad.clone() for t in (x, w, b)]


@needs_onednn
@pytest.mark.parametrize(
    "shape, bias, transposed_grad",
    [((32, 24, 256), True, True), ((300, 512), False, False), ((4, 7, 300), True, False)],
)
def test_onednn_path_matches_f_linear_forward_and_backward(shape, bias, transposed_grad) -> None:
    set_cpu_gemm("onednn")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g).requires_grad_()
    w = torch.randn(640, shape[-1], generator=g).requires_grad_()
    b = torch.randn(640, generator=g).requires_grad_() if bias else None
    assert onednn_linear._use_onednn(x, w)
    up = torch.randn(*shape[:-1], 640, generator=g)
    if transposed_grad:  # a non-contiguous upstream gradient, as after a transpose
        up = up.transpose(0, 1).contiguous().transpose(0, 1)
    out, grads = _grads(linear, x, w, b, up)
    assert out.grad_fn is None  # detached copy; the graph node is checked below
    assert type(linear(x, w, b).grad_fn).__name__ == "_OneDNNLinearBackward"
    ref_out, ref_grads = _grads(F.linear, x, w, b, up)
    scale = ref_out.abs().max()
    assert (out - ref_out).abs().max() <= 1e-5 * scale
    for got, ref in zip(grads, ref_grads):
        if ref is not None:
            assert (got - ref).abs().max() <= 1e-5 * ref.abs().max()


@needs_onednn
def test_gradient_only_for_what_requires_it() -> None:
    set_cpu_gemm("onednn")
    x = torch.randn(64, 128)
    w = torch.randn(256, 128, requires_grad=True)
    linear(x, w).sum().backward()
    assert torch.allclose(w.grad, torch.ones(64, 256).t() @ x, rtol=1e-5, atol=1e-4)
    x2 = torch.randn(64, 128, requires_grad=True)
    frozen = torch.randn(256, 128)
    linear(x2, frozen).sum().backward()
    assert torch.allclose(x2.grad, torch.ones(64, 256) @ frozen, rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_path_selection() -> None:
    big_x, big_w = torch.randn(64, 512), torch.randn(512, 512)
    assert big_x.numel() * big_w.shape[0] >= MIN_MACS
    set_cpu_gemm("default")
    assert cpu_gemm() == "default" and not onednn_linear._use_onednn(big_x, big_w)
    set_cpu_gemm("onednn")
    if onednn_linear._OP is None:
        assert cpu_gemm() == "default"
        return
    assert onednn_linear._use_onednn(big_x, big_w)
    assert not onednn_linear._use_onednn(torch.randn(4, 32), torch.randn(32, 32))  # too small to pay off
    assert not onednn_linear._use_onednn(big_x.double(), big_w.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not onednn_linear._use_onednn(big_x, big_w)
        assert linear(big_x, big_w).dtype == torch.bfloat16  # autocast still applies
    traced = torch.jit.trace(FastLinear(512, 512), big_x)  # a traced graph keeps the portable aten::linear
    assert "mkldnn" not in str(traced.graph) and "linear" in str(traced.graph)
    with pytest.raises(ValueError, match="'auto', 'onednn' or 'default'"):
        set_cpu_gemm("mkl")


def test_auto_picks_onednn_only_with_avx512_off_intel() -> None:
    assert onednn_linear.auto_cpu_gemm("AVX512", "AuthenticAMD") == "onednn"
    assert onednn_linear.auto_cpu_gemm("AVX512", "") == "onednn"  # vendor unknown: by the instruction set
    assert onednn_linear.auto_cpu_gemm("AVX512", "GenuineIntel") == "default"  # MKL's own CPUs
    assert onednn_linear.auto_cpu_gemm("AMX", "GenuineIntel") == "default"
    assert onednn_linear.auto_cpu_gemm("AVX2", "AuthenticAMD") == "default"
    assert onednn_linear.auto_cpu_gemm("DEFAULT", "AuthenticAMD") == "default"
    set_cpu_gemm("auto")
    expected = onednn_linear.auto_cpu_gemm() if onednn_linear._OP is not None else "default"
    assert cpu_gemm() == expected


def test_linear_module_is_an_nn_linear_with_the_same_state_dict() -> None:
    torch.manual_seed(0)
    ours = FastLinear(16, 8)
    torch.manual_seed(0)
    plain = nn.Linear(16, 8)
    assert isinstance(ours, nn.Linear)
    assert ours.state_dict().keys() == plain.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), plain.state_dict().values()))
    x = torch.randn(3, 16)
    assert torch.equal(ours(x), plain(x))  # small: F.linear itself


def test_a_wrong_environment_value_is_named() -> None:
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "import attnlab.accel"], capture_output=True, text=True,
        env={**os.environ, "ATTNLAB_CPU_GEMM": "mkl"},
    )  # fmt: skip
    assert proc.returncode != 0
    assert "ATTNLAB_CPU_GEMM must be 'auto', 'onednn' or 'default', got 'mkl'" in proc.stderr


def test_the_command_reports_a_wrong_environment_value_in_one_line() -> None:
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "attnlab", "predict", "--help"], capture_output=True, text=True,
        env={**os.environ, "ATTNLAB_CPU_GEMM": "mkl"},
    )  # fmt: skip
    assert proc.returncode == 2
    want = "environment variable ATTNLAB_CPU_GEMM must be 'auto', 'onednn' or 'default', got 'mkl'"
    assert proc.stderr.strip() == f"attnlab: error: {want}"


def _packed_here() -> bool:
    with torch.no_grad():
        return lin_mod.packed_rows(torch.zeros(9, 8), torch.zeros(8, 8))


@pytest.mark.skipif(not _packed_here(), reason="attnlab's kernel does not take these products here")
def test_inference_products_of_up_to_packed_rows_run_on_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnlab.accel import few_row_gemm

    calls = []
    real = few_row_gemm._call  # what every bound product calls
    monkeypatch.setattr(few_row_gemm, "_call", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    torch.manual_seed(0)
    layer = FastLinear(40, 24)
    x = torch.randn(4, 25, 40)  # 100 rows
    with torch.no_grad():
        got = layer(x)
    assert len(calls) == 1
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # in-place changes of the weight, then of the bias: the kept product follows
        layer.weight.mul_(2.0)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
        layer.bias.add_(1.0)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    calls.clear()
    x.requires_grad_(True)
    layer(x).sum().backward()  # training: PyTorch's product, with its gradient
    assert not calls and x.grad is not None
    with torch.no_grad():
        monkeypatch.setattr(lin_mod, "PACKED_ROWS", 99)
        layer(x)  # 100 rows: more than PACKED_ROWS
        monkeypatch.setattr(lin_mod, "PACKED_ROWS", 100)
        monkeypatch.setattr(lin_mod, "INTEL_MKL", True)  # MKL's own path on Intel CPUs
        layer(x)
        monkeypatch.setattr(lin_mod, "INTEL_MKL", False)
        layer(x)
    assert len(calls) == 1
    with torch.inference_mode():  # a weight with no version counter: no kept panels, MKL's product
        made_here = FastLinear(40, 24)
        torch.testing.assert_close(made_here(x), F.linear(x, made_here.weight, made_here.bias))
    assert len(calls) == 1
