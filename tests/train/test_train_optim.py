"""AdamW parameter groups and LAMB against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.train import Lamb, TrainerConfig, build_optimizer, param_groups


class RMSNorm(nn.Module):  # a custom normalisation class, as other parts of the library may define
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)
        self.LayerNorm = nn.LayerNorm(4)
        self.rms = RMSNorm(4)
        self.attn = nn.MultiheadAttention(4, 2)  # in_proj_weight / in_proj_bias
        self.out = nn.Linear(4, 10)
        self.out.weight = self.embed.weight  # tied


def _names(model: nn.Module, params: list[nn.Parameter]) -> set[str]:
    by_id = {id(p): n for n, p in model.named_parameters()}
    return {by_id[id(p)] for p in params}


def test_param_groups_exclude_biases_and_norms_and_count_tied_once() -> None:
    model = Block()
    decay, no_decay = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert decay["lamb_adapt"] and not no_decay["lamb_adapt"]
    assert _names(model, decay["params"]) == {
        "embed.weight",
        "proj.weight",
        "attn.in_proj_weight",
        "attn.out_proj.weight",
    }
    assert _names(model, no_decay["params"]) == {
        "proj.bias",
        "LayerNorm.weight",
        "LayerNorm.bias",
        "rms.weight",
        "attn.in_proj_bias",
        "attn.out_proj.bias",
        "out.bias",
    }
    n_all = len(list(model.parameters()))  # parameters() already de-duplicates the tied weight
    assert len(decay["params"]) + len(no_decay["params"]) == n_all


def test_param_groups_skip_frozen_and_reject_empty() -> None:
    model = nn.Linear(3, 3)
    model.bias.requires_grad_(False)
    groups = param_groups(model, 0.1)
    assert len(groups) == 1 and groups[0]["params"] == [model.weight]
    model.weight.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_groups(model, 0.1)


def test_build_optimizer_adamw_decays_only_the_decay_group() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    cfg = TrainerConfig(max_steps=1, lr=0.1, weight_decay=0.5, optimizer="adamw")
    opt = build_optimizer(model, cfg)
    assert isinstance(opt, torch.optim.AdamW)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # zero gradient: only decoupled decay can move a weight
    opt.step()
    after = dict(model.named_parameters())
    torch.testing.assert_close(after["0.weight"], before["0.weight"] * (1 - 0.1 * 0.5))
    for name in ("0.bias", "1.weight", "1.bias"):
        assert torch.equal(after[name], before[name]), name


def _lamb_reference(w, g_steps, lr, b1, b2, eps, wd, max_ratio, adapt=True):
    """You et al. 2019, Algorithm 2, in float64 numpy, one tensor."""
    w = w.astype(np.float64).copy()
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(g_steps, start=1):
        g = g.astype(np.float64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        u = r + wd * w
        ratio = 1.0
        if adapt:
            wn, un = np.linalg.norm(w), np.linalg.norm(u)
            ratio = min(wn / un, max_ratio) if wn > 0 and un > 0 else 1.0
        w = w - lr * ratio * u
    return w


@pytest.mark.parametrize("adapt", [True, False])
def test_lamb_matches_hand_computation(adapt: bool) -> None:
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(5, 3)).astype(np.float32)
    grads = [rng.normal(size=(5, 3)).astype(np.float32) for _ in range(3)]
    hp = dict(lr=0.01, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_ratio=10.0)
    p = nn.Parameter(torch.from_numpy(w0.copy()))
    opt = Lamb(
        [{"params": [p], "lamb_adapt": adapt}],
        lr=hp["lr"],
        betas=(hp["b1"], hp["b2"]),
        eps=hp["eps"],
        weight_decay=hp["wd"],
        max_trust_ratio=hp["max_ratio"],
    )
    for step, g in enumerate(grads, start=1):
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        expected = _lamb_reference(w0, grads[:step], adapt=adapt, **hp)
        np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-5, atol=1e-7)


def test_lamb_first_step_by_hand() -> None:
    # w = (3, 4): ||w|| = 5. At t = 1 bias correction gives r = g / (|g| + eps) = sign(g) (eps -> 0).
    # g = (1, -1): r = (1, -1); with weight decay 0.1, u = (1.3, -0.6), ||u|| = sqrt(2.05).
    # w' = w - lr * (5 / sqrt(2.05)) * u.
    p = nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    p.grad = torch.tensor([1.0, -1.0], dtype=torch.float64)
    Lamb([p], lr=0.1, eps=1e-12, weight_decay=0.1).step()
    ratio = 5 / np.sqrt(2.05)
    np.testing.assert_allclose(p.detach().numpy(), [3 - 0.1 * ratio * 1.3, 4 + 0.1 * ratio * 0.6], rtol=1e-12)


def test_lamb_trust_ratio_is_clipped_and_zero_weights_take_ratio_one() -> None:
    big = nn.Parameter(torch.full((4,), 1e3))  # ||w|| / ||u|| = 2000 / 2 = 1000 -> clipped to 10
    big.grad = torch.ones(4)
    zero = nn.Parameter(torch.zeros(4))  # ||w|| = 0 -> ratio 1 (plain Adam step)
    zero.grad = torch.ones(4)
    opt = Lamb([big, zero], lr=0.01, eps=1e-12, max_trust_ratio=10.0)
    opt.step()
    assert opt.state[big]["trust_ratio"].item() == pytest.approx(10.0)
    torch.testing.assert_close(big.detach(), torch.full((4,), 1e3 - 0.01 * 10.0))
    torch.testing.assert_close(zero.detach(), torch.full((4,), -0.01))


def test_lamb_without_adaptation_equals_adam() -> None:
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(6, 4))
    b = nn.Parameter(a.detach().clone())
    lamb = Lamb([{"params": [a], "lamb_adapt": False}], lr=1e-2, eps=1e-8)
    adam = torch.optim.Adam([b], lr=1e-2, eps=1e-8)
    for _ in range(5):
        g = torch.randn(6, 4)
        a.grad, b.grad = g.clone(), g.clone()
        lamb.step()
        adam.step()
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_lamb_state_dict_round_trip_continues_identically() -> None:
    torch.manual_seed(0)
    grads = [torch.randn(3, 3) for _ in range(4)]
    p1 = nn.Parameter(torch.randn(3, 3))
    p2 = nn.Parameter(p1.detach().clone())
    o1 = Lamb([p1], lr=0.01, weight_decay=0.01)
    o2 = Lamb([p2], lr=0.01, weight_decay=0.01)
    for g in grads[:2]:
        p1.grad = g.clone()
        o1.step()
        p2.grad = g.clone()
        o2.step()
    o3 = Lamb([p2], lr=0.01, weight_decay=0.01)
    o3.load_state_dict(o2.state_dict())
    for g in grads[2:]:
        p1.grad = g.clone()
        o1.step()
        p2.grad = g.clone()
        o3.step()
    assert torch.equal(p1, p2)


def test_lamb_rejects_bad_hyperparameters() -> None:
    p = [nn.Parameter(torch.zeros(1))]
    with pytest.raises(ValueError, match="lr"):
        Lamb(p, lr=0)
    with pytest.raises(ValueError, match="betas"):
        Lamb(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="max_trust_ratio"):
        Lamb(p, max_trust_ratio=0)


def test_build_optimizer_lamb() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    opt = build_optimizer(model, TrainerConfig(max_steps=1, optimizer="lamb", max_trust_ratio=5.0))
    assert isinstance(opt, Lamb)
    assert [g["lamb_adapt"] for g in opt.param_groups] == [True, False]
    assert opt.param_groups[0]["max_trust_ratio"] == 5.0
