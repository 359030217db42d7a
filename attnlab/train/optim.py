"""Optimisers: AdamW with BERT's decay exclusions, and LAMB (You et al. 2019).

BERT (Devlin et al. 2019, appendix A.2) trains with Adam, L2 weight decay 0.01, and the reference code
excludes biases and LayerNorm parameters from the decay. `param_groups` reproduces that split for any
model; `build_optimizer` turns a `TrainerConfig` into `torch.optim.AdamW` or `Lamb`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from .config import TrainerConfig

# Normalisation layers whose weights (gains) are never decayed. Custom classes written elsewhere in the
# library (an RMSNorm, a LayerNorm with a different epsilon handling) are caught by the class-name rule.
_NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._BatchNorm,
) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())


def is_no_decay(module: nn.Module, param_name: str) -> bool:
    """True for biases (``bias``, ``*_bias``) and every parameter of a normalisation layer."""
    if param_name == "bias" or param_name.endswith("_bias"):
        return True
    return isinstance(module, _NORM_TYPES) or type(module).__name__.endswith("Norm")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Split the trainable parameters into a decayed group and an undecayed one.

    Returns ``[{"params": decay, "weight_decay": weight_decay, "lamb_adapt": True},
    {"params": no_decay, "weight_decay": 0.0, "lamb_adapt": False}]``; empty groups are dropped.
    A parameter shared between modules (tied embeddings) appears once. ``lamb_adapt`` tells `Lamb`
    whether to apply the layer-wise trust ratio; AdamW ignores the key.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            (no_decay if is_no_decay(module, name) else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lamb_adapt": True},
        {"params": no_decay, "weight_decay": 0.0, "lamb_adapt": False},
    ]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    return groups


class Lamb(torch.optim.Optimizer):
    """LAMB: Adam's update rescaled per parameter tensor by a trust ratio (You et al. 2019, Algorithm 2).

    For each parameter tensor w with gradient g at step t::

        m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
        r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
        u = r + weight_decay * w
        ratio = clip(||w|| / ||u||, 0, max_trust_ratio), and 1 when either norm is 0
        w = w - lr * ratio * u

    The paper's scaling function phi(z) = min(max(z, gamma_l), gamma_u) is applied to the ratio here
    (``max_trust_ratio`` = gamma_u, gamma_l = 0), as in the public implementations: the paper leaves
    the bounds open and an unbounded ratio blows up on layers whose update norm is tiny.
    Groups with ``lamb_adapt=False`` (biases, LayerNorm: see `param_groups`) take the plain Adam step
    with ratio 1, as BERT's LAMB excludes them from layer adaptation.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        max_trust_ratio: float = 10.0,
        bias_correction: bool = True,
    ) -> None:
        if not lr > 0:
            raise ValueError(f"Lamb: lr must be positive, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lamb: betas must be in [0, 1), got {betas}")
        if not eps > 0:
            raise ValueError(f"Lamb: eps must be positive, got {eps}")
        if not max_trust_ratio > 0:
            raise ValueError(f"Lamb: max_trust_ratio must be positive, got {max_trust_ratio}")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            max_trust_ratio=max_trust_ratio,
            bias_correction=bias_correction,
            lamb_adapt=True,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                # Moments and update in float32 for half-precision weights, else in the weights' dtype.
                dtype = torch.float32 if p.dtype in (torch.float16, torch.bfloat16) else p.dtype
                grad = p.grad.to(dtype)
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(
                        p, dtype=dtype, memory_format=torch.preserve_format
                    )
                state["step"] += 1
                t = state["step"].item()
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat = exp_avg / (1 - beta1**t)
                    v_hat = exp_avg_sq / (1 - beta2**t)
                else:
                    m_hat, v_hat = exp_avg, exp_avg_sq
                w = p.to(dtype)
                update = m_hat / (v_hat.sqrt() + group["eps"])  # r in the paper
                if group["weight_decay"] != 0:
                    update.add_(w, alpha=group["weight_decay"])
                if group["lamb_adapt"]:
                    # Tensor ops rather than .item(): no host synchronisation per parameter on a GPU.
                    w_norm = w.norm(2)
                    u_norm = update.norm(2)
                    ratio = torch.where(
                        (w_norm > 0) & (u_norm > 0),
                        (w_norm / u_norm).clamp(max=group["max_trust_ratio"]),
                        torch.ones_like(w_norm),
                    )
                    state["trust_ratio"] = ratio  # kept for inspection and logging
                    update.mul_(ratio)
                p.add_((update * -group["lr"]).to(p.dtype))
        return loss


def build_optimizer(model: nn.Module, config: TrainerConfig) -> torch.optim.Optimizer:
    """The optimizer named by ``config.optimizer`` over `param_groups(model, config.weight_decay)`."""
    groups = param_groups(model, config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps)
    if config.optimizer == "lamb":
        return Lamb(
            groups, lr=config.lr, betas=config.betas, eps=config.eps, max_trust_ratio=config.max_trust_ratio
        )
    raise ValueError(f"TrainerConfig.optimizer: {config.optimizer!r} is not one of 'adamw', 'lamb'")
