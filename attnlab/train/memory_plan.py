"""What one process needs in memory to train a model: parameters, gradients, optimizer state, activations.

`plan_memory` counts a model's parameters (build it on the meta device: nothing is allocated) and
estimates per rank, in fp32 with AdamW (two moments per parameter):

- ``parallel="ddp"``: every rank holds the whole model, its gradients and both moments;
- ``parallel="fsdp"``: each rank holds 1/N of them, plus the largest layer unsharded while it runs
  (its parameters all-gathered and its gradients before the reduce-scatter);
- activations of one rank's batch: Korthikanti et al. (2022)'s count for a Transformer layer,
  ``T * B * H * (34 + 5 * A * T / H)`` bytes in 16-bit, doubled for fp32; with activation checkpointing
  each layer keeps only its input (``4 * B * T * H`` bytes) and one layer's activations are live at a time.

It is an estimate for choosing machines, not a measurement (benchmarks/sharded_training.py measures); one
process (``world_size=1``) is what `attnlab.train.footprint` prices before a run's first step.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from attnlab.atomic import format_bytes

from .sharded import transformer_layers

FP32 = 4


def transformer_activation_bytes(layers: int, hidden: int, heads: int, batch: int, length: int) -> int:
    """Bytes a float32 Transformer stack keeps for its backward pass (Korthikanti et al. 2022, eq. 1, x2)."""
    per_layer_16bit = length * batch * hidden * (34 + 5 * heads * length / hidden)
    return int(2 * layers * per_layer_16bit)


@dataclass(frozen=True)
class MemoryPlan:
    parameters: int  # bytes per rank
    gradients: int
    optimizer: int
    activations: int
    world_size: int
    parallel: str
    parameter_count: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def lines(self) -> list[str]:
        """The table `attnlab pretrain --dry-run` prints."""
        rows = [("parameters", self.parameters), ("gradients", self.gradients),
                ("optimizer state (AdamW)", self.optimizer), ("activations", self.activations),
                ("total", self.total)]  # fmt: skip
        head = (
            f"{self.parameter_count:,} parameters, {self.parallel} over {self.world_size} process(es): "
            "memory per process (fp32, estimated)"
        )
        return [head, *(f"  {name:<24} {format_bytes(value):>10}" for name, value in rows)]


def plan_memory(
    model: nn.Module,
    *,
    world_size: int = 1,
    parallel: str = "ddp",
    batch_size: int,
    length: int,
    hidden: int | None = None,
    heads: int | None = None,
    layers: int | None = None,
    activation_checkpointing: bool = False,
) -> MemoryPlan:
    """The per-rank memory of training ``model`` (see the module docstring); ``batch_size`` is per rank.
    ``hidden``, ``heads`` and ``layers`` (the layers run, shared ones counted each time: ALBERT's 12) default
    to the model's ``config``; a model without them (ELMo's LSTMs) is priced by its weights alone."""
    if world_size < 1:
        raise ValueError(f"world_size: expected >= 1, got {world_size}")
    config = getattr(model, "config", None)
    hidden = hidden or getattr(config, "hidden_size", 0)
    heads = heads or getattr(config, "num_heads", 0)
    count = sum(p.numel() for p in model.parameters())
    units = transformer_layers(model)
    layers = layers or getattr(config, "num_layers", 0) or len(units)
    largest = max((sum(p.numel() for m in unit for p in m.parameters()) for unit in units), default=0)
    if parallel == "fsdp":
        shard = -(-count // world_size)  # ceil: the last rank's shard is padded
        parameters, gradients = (shard + largest) * FP32, (shard + largest) * FP32
        optimizer = 2 * shard * FP32
    else:
        parameters = gradients = count * FP32
        optimizer = 2 * count * FP32
    activations = 0
    if hidden and heads:
        per_layer = transformer_activation_bytes(1, hidden, heads, batch_size, length)
        if activation_checkpointing:
            activations = layers * FP32 * batch_size * length * hidden + per_layer
        else:
            activations = layers * per_layer
    return MemoryPlan(parameters, gradients, optimizer, int(activations), world_size, parallel, count)
