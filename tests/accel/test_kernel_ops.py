"""The kernels' custom ops (torch.ops.attnlab.*): torch.library.opcheck on each (schema, fake implementation,
autograd registration, dispatch), and torch.compile (fullgraph) and torch.export over a module that calls
them trace them as ops, without a graph break."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.accel import few_row_gemm, int8_gemm

pytestmark = pytest.mark.skipif(
    not (few_row_gemm.available() and int8_gemm.available()),
    reason=f"not available: {few_row_gemm.unavailable_reason() or int8_gemm.unavailable_reason()}",
)


def product_args(rows=3, n=20, k=12, bias=True, gen=None):
    gen = gen or torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen)
    b = torch.randn(n, generator=gen) if bias else None
    return torch.randn(2, rows, k, generator=gen), few_row_gemm._pack(w), b, n


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", [0, few_row_gemm.GELU])
def test_opcheck_few_row_gemm(bias, act):
    x, p, b, n = product_args(bias=bias)
    torch.library.opcheck(torch.ops.attnlab.few_row_gemm.default, (x, p, b, n, act))


@pytest.mark.parametrize("norm", [True, False])
def test_opcheck_product_add_norm(norm):
    x, p, b, n = product_args()
    residual = torch.randn(*x.shape[:-1], n)
    gamma, beta = (torch.randn(n), torch.randn(n)) if norm else (None, None)
    torch.library.opcheck(torch.ops.attnlab.product_add_norm.default, (x, p, b, residual, gamma, beta, 1e-5))


@pytest.mark.parametrize("padded", [True, False])
def test_opcheck_attention(padded):
    qkv = torch.randn(2, 5, 3 * 2 * 4)
    key_bias = torch.zeros(2, 5)
    key_bias[0, 3:] = torch.finfo(torch.float32).min
    torch.library.opcheck(torch.ops.attnlab.attention.default, (qkv, 2, key_bias if padded else None))


@pytest.mark.parametrize("bias", [True, False])
def test_opcheck_int8_gemm(bias):
    w = int8_gemm.pack(torch.randn(20, 13), torch.randn(20) if bias else None)
    x = torch.randn(2, 3, 13)
    args = (x, w.panels, w.colsum, w.scale, w.bias, w.out_features, 0)
    torch.library.opcheck(int8_gemm._kernel().op, args)  # int8_gemm_vnni where the CPU has VNNI


def test_the_ops_refuse_tensors_they_would_read_outside_of():
    x, p, b, n = product_args()
    with pytest.raises(RuntimeError, match="panels"):
        torch.ops.attnlab.few_row_gemm(x[..., :5], p, b, n, 0)
    with pytest.raises(RuntimeError, match=r"expected \(20,\)"):
        torch.ops.attnlab.few_row_gemm(x, p, b[:7], n, 0)
    with pytest.raises(RuntimeError, match="Double"):
        torch.ops.attnlab.few_row_gemm(x.double(), p, b, n, 0)
    w = int8_gemm.pack(torch.randn(20, 13))
    with pytest.raises(RuntimeError, match="panels"):
        int8_gemm._kernel().op(torch.randn(2, 17), w.panels, w.colsum, w.scale, None, 20, 0)


class KernelBlock(nn.Module):
    """A module that calls each op: a product, the attention, the merged product, an int8 product."""

    def __init__(self, width: int = 24, heads: int = 2) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.width, self.heads = width, heads
        self.register_buffer("qkv_panels", few_row_gemm._pack(torch.randn(3 * width, width, generator=gen)))
        self.register_buffer("out_panels", few_row_gemm._pack(torch.randn(width, width, generator=gen)))
        self.register_buffer("norm_weight", torch.ones(width))
        self.register_buffer("norm_bias", torch.zeros(width))
        self.int8 = int8_gemm.pack(
            torch.randn(width, width, generator=gen), torch.randn(width, generator=gen)
        )
        self.int8_op = int8_gemm._kernel().op  # int8_gemm_vnni where the CPU has VNNI

    def forward(self, x):
        ops = torch.ops.attnlab
        qkv = ops.few_row_gemm(x, self.qkv_panels, None, 3 * self.width, 0)
        heads = ops.attention(qkv, self.heads, None)
        h = ops.product_add_norm(heads, self.out_panels, None, x, self.norm_weight, self.norm_bias, 1e-5)
        w = self.int8
        return self.int8_op(h, w.panels, w.colsum, w.scale, w.bias, w.out_features, few_row_gemm.GELU)


def test_torch_compile_traces_the_ops_without_a_graph_break():
    torch._dynamo.reset()
    block, x = KernelBlock().eval(), torch.randn(2, 5, 24)
    want = block(x)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")  # fake tensors: the fake kernels
    with torch.no_grad():
        got = compiled(x)
    assert torch.equal(got, want)
    torch._dynamo.reset()


def test_torch_export_records_the_ops():
    block, x = KernelBlock().eval(), torch.randn(2, 5, 24)
    exported = torch.export.export(block, (x,))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    names = {"few_row_gemm", "attention", "product_add_norm"}
    wanted = {f"attnlab.{name}.default" for name in names} | {str(int8_gemm._kernel().op)}
    assert wanted <= targets, targets
    assert torch.equal(exported.module()(x), block(x))
