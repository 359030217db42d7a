"""Reversible residual layers (Gomez et al. 2017, RevNet; Kitaev et al. 2020, Reformer section 3).

Shapes: B batch, T positions, H model size; the stack carries two streams (B, T, H) each.

A layer is a pair of pre-LN `Residual` blocks (attention F, feed-forward G) run as

    y1 = x1 + F.branch(x2)          x2 = y2 - G.branch(y1)
    y2 = x2 + G.branch(y1)          x1 = y1 - F.branch(x2)

so each layer's inputs can be recomputed from its outputs. `ReversibleStack` is an execution order over the
same
blocks: with ``reversible=True`` a custom autograd Function keeps only the last layer's outputs and, in the
backward pass, walks the layers from the top, recomputing each layer's inputs and its branch activations and
back-propagating through them one layer at a time (activation memory independent of depth); with
``reversible=False`` the same arithmetic runs under ordinary autograd (every activation stored), the reference
the tests compare gradients with.

Randomness: each branch's RNG state is recorded before it runs and restored when it is recomputed, so dropout
masks and LSH random rotations (attnlab.nn.lsh_attention, drawn from the global generator when unseeded) are
the same in the backward pass as in the forward pass.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab.nn.residual import Residual


class _RngBranch:
    """Calls ``block.branch(x)``; remembers the CPU (and current CUDA) RNG state from before the first call
    and replays it on recomputation."""

    def __init__(self, block: Residual) -> None:
        self.block = block
        self.state: tuple[Tensor, Tensor | None] | None = None

    def __call__(self, x: Tensor, replay: bool = False) -> Tensor:
        if not replay:
            cuda = torch.cuda.get_rng_state() if x.is_cuda else None
            self.state = (torch.get_rng_state(), cuda)
            return self.block.branch(x)
        devices = [x.device] if x.is_cuda else []
        with torch.random.fork_rng(devices=devices):
            cpu, cuda = self.state
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state(cuda)
            return self.block.branch(x)


class _Reversible(torch.autograd.Function):
    """Forward without storing activations; backward recomputes them layer by layer from the outputs."""

    @staticmethod
    def forward(ctx: Any, x1: Tensor, x2: Tensor, layers: list, *params: Tensor) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            for f, g in layers:
                x1 = x1 + f(x2)
                x2 = x2 + g(x1)
        ctx.layers, ctx.params = layers, params
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx: Any, dy1: Tensor, dy2: Tensor) -> tuple:
        y1, y2 = ctx.saved_tensors
        param_grads: dict[int, Tensor] = {}  # summed over layers (a parameter may be shared)

        def step(branch: _RngBranch, x: Tensor, grad_out: Tensor) -> tuple[Tensor, Tensor]:
            """Recompute ``branch(x)``: (its output, the gradient at x); collects the parameter grads."""
            with torch.enable_grad():
                x = x.detach().requires_grad_(True)
                out = branch(x, replay=True)
                own = [p for p in branch.block.parameters() if p.requires_grad]
                grads = torch.autograd.grad(out, [x, *own], grad_out, allow_unused=True)
            for p, g in zip(own, grads[1:]):
                if g is not None:
                    param_grads[id(p)] = g if id(p) not in param_grads else param_grads[id(p)] + g
            return out.detach(), grads[0]

        for f, g in reversed(ctx.layers):
            g_out, g_grad = step(g, y1, dy2)  # y2 = x2 + G(y1)
            x2 = y2 - g_out
            dx1 = dy1 + g_grad
            f_out, f_grad = step(f, x2, dx1)  # y1 = x1 + F(x2)
            x1 = y1 - f_out
            dx2 = dy2 + f_grad
            y1, y2, dy1, dy2 = x1, x2, dx1, dx2
        return (dy1, dy2, None, *(param_grads.get(id(p)) for p in ctx.params))


class ReversibleStack(nn.Module):
    """``(x1, x2) -> (y1, y2)`` through layers of (attention, feed-forward) pre-LN `Residual` blocks.

    ``reversible=False`` runs the same layers under ordinary autograd (the comparison in the tests, and the
    choice when memory is not the limit: no recomputation). Extra arguments of the branches are not supported:
    attention masks of a reversible model are fixed at construction (e.g. causal).
    """

    def __init__(self, layers: list[tuple[Residual, Residual]], reversible: bool = True) -> None:
        super().__init__()
        self.attention = nn.ModuleList(f for f, _ in layers)
        self.feed_forward = nn.ModuleList(g for _, g in layers)
        self.reversible = reversible

    def forward(self, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
        """x1, x2 (B, T, H) -> y1, y2 (B, T, H)."""
        if not self.reversible or not torch.is_grad_enabled():
            for f, g in zip(self.attention, self.feed_forward):
                x1 = x1 + f.branch(x2)
                x2 = x2 + g.branch(x1)
            return x1, x2
        layers = [(_RngBranch(f), _RngBranch(g)) for f, g in zip(self.attention, self.feed_forward)]
        # the parameters are inputs of the Function: their gradients are its outputs (computed by
        # recomputation)
        params = [p for p in self.parameters() if p.requires_grad]
        return _Reversible.apply(x1, x2, layers, *params)
