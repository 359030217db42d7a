"""Adaptive computation time (Graves 2016, "Adaptive Computation Time for Recurrent Neural Networks"),
per position, as the Universal Transformer uses it over depth (Dehghani et al. 2019, section 2.2).

Shapes: B batch, T positions, H hidden, S steps taken (<= max_steps).

At step n a halting unit gives each position a probability ``h_n = sigmoid(w . s_n + b)``. A position halts at
the first step N where the running sum would pass ``threshold = 1 - eps`` (Graves eq. 6; or at ``max_steps``).
Its weights are ``p_n = h_n`` for n < N and the remainder ``R = 1 - sum_{n<N} h_n`` at N, 0 after (eq. 7-9),
so they sum to 1; the output is ``sum_n p_n s_n`` (eq. 10: the mean-field state) and the ponder cost
``rho = N + R`` (eq. 11) is added to the loss with a small weight tau (eq. 12). By default halted positions
keep being transformed (other positions still attend to them), as in tensor2tensor's Universal Transformer,
but no longer contribute to the output. With ``copy_halted`` a halted position's state is copied to every
later step instead, as the paper's text has it (section 2.2: "once the per-symbol recurrent block halts, its
state is simply copied to the next step until all blocks halt"): the other positions then read a state that
no longer changes. Padding (``active`` False) takes no steps.

Deliberate difference from tensor2tensor's code: its output is ``s * p_n + previous * (1 - p_n)`` per step,
which is not eq. 10's weighted sum; here the output is eq. 10 exactly, so the weights are testable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import Linear


@dataclass
class HaltingState:
    """Per-position bookkeeping between steps (all (B, T))."""

    cumulative: Tensor  # sum of the weights given so far (1 once halted)
    running: Tensor  # bool: not halted yet
    remainder: Tensor  # R, set at the halting step
    steps: Tensor  # N: steps the position took (its halting step included)

    @classmethod
    def start(cls, like: Tensor, active: Tensor | None = None) -> HaltingState:
        """Nothing halted; ``like`` (B, T) gives shape, dtype and device. Positions where ``active`` (B, T)
        is False (padding) start halted with no steps: weight, steps and ponder cost 0."""
        zeros = torch.zeros_like(like)
        running = torch.ones_like(like, dtype=torch.bool) if active is None else active.bool()
        return cls(zeros, running, zeros, zeros)

    @property
    def ponder_cost(self) -> Tensor:
        """rho = N + R (B, T) (Graves eq. 11)."""
        return self.steps + self.remainder


def halting_step(h: Tensor, state: HaltingState, threshold: float, last: bool) -> tuple[Tensor, HaltingState]:
    """One step's weights from its halting probabilities ``h`` (B, T).

    Returns ``(weights (B, T), new state)``: ``h`` where the position runs on, the remainder where it halts
    now (its sum would pass ``threshold``, or ``last``), 0 where it had halted before.
    """
    halts = state.running & ((state.cumulative + h > threshold) | last)
    continues = state.running & ~halts
    remainder = torch.where(halts, 1.0 - state.cumulative, torch.zeros_like(h))
    weights = torch.where(continues, h, remainder)
    return weights, HaltingState(
        cumulative=state.cumulative + weights,
        running=continues,
        remainder=state.remainder + remainder,
        steps=state.steps + state.running.to(h.dtype),
    )


@dataclass
class ACTOutput:
    output: Tensor  # (B, T, H): sum_n p_n s_n
    ponder_cost: Tensor  # (B, T): N + R per position
    steps: Tensor  # (B, T): N per position
    weights: Tensor  # (S, B, T): p_n of every step taken (sums to 1 over S; 0 at padding)


class AdaptiveComputationTime(nn.Module):
    """The halting unit (H -> 1, sigmoid) and the loop that runs a step function until every position halts.

    ``bias_init``: the halting unit's initial bias; tensor2tensor starts at 1.0 (sigmoid(1) = 0.73, so
    positions halt after two steps at first and learn to ponder longer where it pays). ``copy_halted``: a
    halted position keeps the state of its halting step (the paper's text) instead of being transformed on.
    """

    def __init__(
        self, dim: int, max_steps: int, threshold: float = 0.99, bias_init: float = 1.0,
        copy_halted: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if max_steps < 1 or not 0.0 < threshold <= 1.0:
            raise ValueError(f"ACT: want max_steps >= 1, threshold in (0, 1]; got {max_steps}, {threshold}")
        self.halting = Linear(dim, 1)
        nn.init.constant_(self.halting.bias, bias_init)
        self.max_steps = max_steps
        self.threshold = threshold
        self.bias_init = bias_init
        self.copy_halted = copy_halted

    def forward(
        self, state: Tensor, step: Callable[[Tensor, int], Tensor], active: Tensor | None = None
    ) -> ACTOutput:
        """Run ``step(state (B, T, H), n) -> (B, T, H)`` for n = 0, 1, ... until all halt or max_steps.

        The halting probability of step n is read from the state step n produces. ``active`` (B, T) bool:
        the real positions; padding takes no steps (weights 0, output 0) and does not keep the loop going.
        """
        output = torch.zeros_like(state)
        halting = HaltingState.start(state[..., 0], active)
        weights = []
        for n in range(self.max_steps):
            new = step(state, n)  # (B, T, H)
            state = torch.where(halting.running[..., None], new, state) if self.copy_halted else new
            h = torch.sigmoid(self.halting(state)).squeeze(-1)  # (B, T)
            w, halting = halting_step(h, halting, self.threshold, last=n == self.max_steps - 1)
            output = output + w.unsqueeze(-1) * state
            weights.append(w)
            if not bool(halting.running.any()):
                break
        return ACTOutput(output, halting.ponder_cost, halting.steps, torch.stack(weights))

    def extra_repr(self) -> str:
        copy = ", copy_halted=True" if self.copy_halted else ""
        return f"max_steps={self.max_steps}, threshold={self.threshold}, bias_init={self.bias_init}{copy}"
