"""Transformer-XL: relative shift, memory (cache vs no cache), no gradient into the memory, HF parity."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnlab.models.transfo_xl import TransfoXLConfig, build_transfo_xl
from attnlab.nn.relative_attention import relative_shift

ROOT = Path(__file__).resolve().parents[2]
XL_SITE = ROOT / ".venv-xl" / "site"


def tiny(**overrides) -> TransfoXLConfig:
    base = dict(vocab_size=31, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=24, mem_len=8)
    return TransfoXLConfig(**{**base, **overrides})


def test_relative_shift_moves_each_distance_under_its_key():
    t, k = 3, 7  # 4 memory positions
    raw = torch.randn(2, t, k)  # column p: distance k - 1 - p
    shifted = relative_shift(raw)
    for i in range(t):
        for j in range(k - t + i + 1):  # the keys query i may see
            assert shifted[:, i, j].equal(raw[:, i, t - 1 - i + j])


@pytest.mark.parametrize("norm_first", [False, True])
def test_memory_continues_the_sequence_exactly(norm_first):
    """Relative positions: segment 2 with segment 1 as memory = the last positions of one pass over both."""
    torch.manual_seed(0)
    model = build_transfo_xl(tiny(mem_len=5, norm_first=norm_first)).eval()
    ids = torch.randint(0, 31, (2, 9))
    with torch.no_grad():
        whole = model(ids).logits
        first = model(ids[:, :5])
        second = model(ids[:, 5:], memory=first.memory)
    torch.testing.assert_close(second.logits, whole[:, 5:], atol=1e-5, rtol=0)
    assert [m.shape for m in first.memory] == [(2, 5, 16)] * 2


def test_memory_length_at_evaluation_and_truncation():
    torch.manual_seed(0)
    model = build_transfo_xl(tiny(mem_len=3)).eval()
    ids = torch.randint(0, 31, (1, 12))
    with torch.no_grad():
        memory = None
        for s in range(0, 12, 4):
            out = model(ids[:, s : s + 4], memory=memory, mem_len=8)
            memory = out.memory
        whole = model(ids).logits  # memory 8 >= all 8 earlier positions: the last segment sees everything
    torch.testing.assert_close(out.logits, whole[:, 8:], atol=1e-5, rtol=0)
    assert memory[0].shape == (1, 8, 16)
    with torch.no_grad():
        short = model(ids[:, 4:8], memory=model(ids[:, :4]).memory)  # config mem_len 3: only 3 kept
    assert short.memory[0].shape == (1, 3, 16)
    assert not torch.allclose(short.logits, whole[:, 4:8], atol=1e-4)


def test_no_gradient_flows_into_the_memory():
    torch.manual_seed(0)
    model = build_transfo_xl(tiny())
    ids = torch.randint(0, 31, (2, 6))
    first = model(ids)
    assert all(not m.requires_grad for m in first.memory)
    model.zero_grad()
    out = model(ids, targets=ids, memory=first.memory)
    out.loss.backward()
    with_memory = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert all(torch.isfinite(g).all() for g in with_memory.values())
    # the gradient equals the one with the memory given as constant leaf tensors
    model.zero_grad()
    model(ids, targets=ids, memory=[m.clone() for m in first.memory]).loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, with_memory[n])


def test_same_length_mask_bounds_every_query_to_the_same_span():
    model = build_transfo_xl(tiny(same_length=True, mem_len=4))
    allowed = model.attention_mask(3, 4, 4, torch.device("cpu"))[0, 0]  # T=3, M=4: 7 keys
    assert allowed.sum(-1).tolist() == [4, 4, 4]
    assert allowed[0].tolist() == [False] + [True] * 4 + [False] * 2  # keys 1..4: the last mem_len


def test_config_rejects_bad_fields():
    with pytest.raises(ValueError, match="mem_len"):
        TransfoXLConfig(mem_len=-1)
    with pytest.raises(ValueError, match="divisible"):
        TransfoXLConfig(hidden_size=30, num_heads=4)


HF_PARITY = textwrap.dedent(
    """
    import torch
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel
    from attnlab.io.hf_transfo_xl import empty_memory, transfo_xl_from_hf_state

    # transformers 4.4x's TransfoXLModel.forward calls ``x.type_as(dtype=...)`` (its known bug): accept it
    _type_as = torch.Tensor.type_as
    def type_as(self, other=None, dtype=None):
        return self.to(dtype) if other is None else _type_as(self, other)
    torch.Tensor.type_as = type_as
    torch.manual_seed(0)
    worst = 0.0
    for untie, same_length in ((True, False), (False, True)):
        cfg = TransfoXLConfig(vocab_size=50, cutoffs=[], d_model=32, d_embed=32, n_head=4, d_head=8,
                              d_inner=64, div_val=1, n_layer=3, mem_len=7, untie_r=untie,
                              same_length=same_length,
                              dropout=0.0, dropatt=0.0)
        hf = TransfoXLLMHeadModel(cfg).eval()
        with torch.no_grad():
            for name, p in hf.named_parameters():
                p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.2)
        ours = transfo_xl_from_hf_state(cfg.to_dict(), hf.state_dict())
        seg1, seg2 = torch.randint(0, 50, (3, 5)), torch.randint(0, 50, (3, 6))
        with torch.no_grad():
            h1, o1 = hf(seg1, mems=empty_memory(ours.config, 3)), ours(seg1)
            h2, o2 = hf(seg2, mems=h1.mems), ours(seg2, memory=o1.memory)  # memory across 2 segments
        for h, o in ((h1, o1), (h2, o2)):
            worst = max(worst, (h.prediction_scores - o.logits.log_softmax(-1)).abs().max().item())
        for a, b in zip(h2.mems, o2.memory):
            worst = max(worst, (a.transpose(0, 1) - b).abs().max().item())
    print("WORST", worst)
    """
)


def _hf_transfo_xl_path() -> str | None:
    """PYTHONPATH entry with a transformers that has TransfoXLLMHeadModel (4.x), or None."""
    probe = "from transformers import TransfoXLLMHeadModel"
    env = {**os.environ, "PYTHONPATH": f"{XL_SITE}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    if (
        XL_SITE.is_dir()
        and subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    ):
        return env["PYTHONPATH"]
    return None


def test_logits_and_memory_equal_hf_transfo_xl_across_two_segments():
    path = _hf_transfo_xl_path()
    if path is None:
        pytest.skip(
            "transformers 4.x with TransfoXLLMHeadModel not in .venv-xl/site "
            "(`make .venv-xl/site/.installed`)"
        )
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", HF_PARITY], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    worst = float(run.stdout.split("WORST")[-1])
    assert worst < 1e-5, worst


def test_set_evaluation_changes_clamp_and_same_length_only() -> None:
    """``set_evaluation`` = a model built with those settings (same weights), and weights are untouched."""
    torch.manual_seed(0)
    cfg = TransfoXLConfig(vocab_size=20, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                          segment_length=6, mem_len=6)  # fmt: skip
    model = build_transfo_xl(cfg).eval()
    built = build_transfo_xl(dataclasses.replace(cfg, clamp_len=5, same_length=True)).eval()
    built.load_state_dict(model.state_dict())
    ids = torch.randint(0, 20, (2, 6))
    memory = model(ids).memory
    before = model(ids, memory=memory, mem_len=12).logits
    model.set_evaluation(clamp_len=5, same_length=True)
    assert model.config.clamp_len == 5 and model.config.same_length
    after = model(ids, memory=memory, mem_len=12).logits
    assert torch.equal(after, built(ids, memory=memory, mem_len=12).logits)
    assert not torch.allclose(before, after)  # distances up to 11 exist: the clamp at 5 matters
    with pytest.raises(ValueError, match="clamp_len"):
        model.set_evaluation(clamp_len=-1)
