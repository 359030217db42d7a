"""Sharded data parallelism (FSDP2) applied from outside the model, beside DDP's `wrap_model`.

``TrainerConfig.parallel = "fsdp"`` (``--parallel fsdp``) has the `Trainer` call `shard_model`: PyTorch's
``fully_shard`` (FSDP2) on every Transformer layer, then on the whole model. Each rank then keeps 1/N of
every parameter, of its gradient and of Adam's two moments; a layer's full weights exist only while it runs
(all-gathered before its forward and backward, gradients reduce-scattered after). The model code imports
nothing from here: a "layer" is whatever module sits in an ``nn.ModuleList`` (BERT's and GPT's blocks, the
encoder's and decoder's layers of the Transformer), the rest (embeddings, heads) belongs to the root group.

What the installed PyTorch (2.13, CPU build) does on gloo, checked with two processes: ``fully_shard``,
the gradient reduce-scatter, ``clip_grad_norm_`` over DTensor gradients, ``torch.distributed.checkpoint``
save/load and full state dicts all work, so FSDP2 is used everywhere (no fallback to the older
``FullyShardedDataParallel``). ``CPUOffloadPolicy`` works with ``pin_memory=False`` (pinning needs a
GPU); on a CPU-only run it changes nothing, the parameters already live in host memory.
``MixedPrecisionPolicy`` (bf16 parameters for compute, fp32 gradient reduction, fp32 master weights in the
optimizer) is applied on CUDA only: on the CPU, ``precision="bf16"`` stays the trainer's autocast.
Activation checkpointing is ``torch.distributed._composable.checkpoint`` on each layer: its forward keeps no
activations and runs again during backward; module names and the state dict are unchanged.

Every rank builds the whole model before it is sharded (like DDP), and rank 0's weights are broadcast
first so that the shards come from one initialisation, as DDP's constructor does.
"""

from __future__ import annotations

import copy
import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable import checkpoint as checkpoint_layer
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from .distributed import DistributedContext

# The model as it was before sharding, parameters on the meta device (no memory): `consolidated_model`
# rebuilds a plain copy from it and the gathered weights. Keyed weakly by the sharded module.
_UNSHARDED: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``model`` (its parameters are DTensor shards)."""
    return isinstance(model, FSDPModule)


def transformer_layers(model: nn.Module) -> list[list[nn.Module]]:
    """The units FSDP shards one by one: the modules held in ``nn.ModuleList``s (outermost lists only),
    one unit per layer. Lists of the same length under one parent are zipped: the encoder keeps layer i's
    attention and feed-forward sub-layers in two lists (``attention[i]``, ``feed_forward[i]``), one unit."""
    units: list[list[nn.Module]] = []
    inside: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in inside):
            continue
        lists = [(n, child) for n, child in module.named_children() if isinstance(child, nn.ModuleList)]
        by_length: dict[int, list[nn.ModuleList]] = {}
        for child_name, child in lists:
            inside.append(f"{name}.{child_name}." if name else f"{child_name}.")
            by_length.setdefault(len(child), []).append(child)
        for same_length in by_length.values():
            for layer in zip(*same_length):
                unit = [m for m in layer if any(True for _ in m.parameters())]
                if unit:
                    units.append(unit)
    return units


def _copy_with_parameters(model: nn.Module, device: str | torch.device) -> nn.Module:
    """A deep copy of ``model`` whose parameters are new, uninitialised ones on ``device`` (tied parameters
    stay tied); buffers and everything else are copied."""
    memo: dict[int, object] = {}
    for parameter in model.parameters():  # each shared parameter once
        memo[id(parameter)] = nn.Parameter(
            torch.empty_like(parameter, device=device), requires_grad=parameter.requires_grad
        )
    return copy.deepcopy(model, memo)


def _broadcast_from_rank0(model: nn.Module) -> None:
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


def shard_model(
    model: nn.Module,
    context: DistributedContext,
    device: torch.device,
    *,
    precision: str = "fp32",
    activation_checkpointing: bool = False,
    cpu_offload: bool = False,
) -> nn.Module:
    """Apply ``fully_shard`` to each Transformer layer of ``model`` and then to ``model`` itself, in place;
    returns ``model`` (its class is now also an ``FSDPModule``). A model already sharded is returned as is.

    Build the optimizer after this call: sharding replaces the parameters by DTensor shards."""
    if is_sharded(model):
        return model
    if not context.is_distributed:
        raise ValueError(
            "parallel='fsdp' shards the model over several processes, and this is one: launch with "
            "torchrun --nproc-per-node N (N >= 2; see docs/training.md), or train with parallel='ddp'"
        )
    if precision == "fp16":
        raise ValueError(
            "parallel='fsdp' with precision='fp16': the GradScaler does not handle sharded gradients here; "
            "use precision='bf16' (no loss scaling needed) or 'fp32'"
        )
    layers = transformer_layers(model)
    if not layers:
        raise ValueError(
            f"parallel='fsdp': {type(model).__name__} holds no layers in an nn.ModuleList to shard one by "
            "one; train it with parallel='ddp'"
        )
    _broadcast_from_rank0(model)
    _UNSHARDED[model] = _copy_with_parameters(model, "meta")
    options: dict[str, object] = {}
    if device.type == "cuda" and precision == "bf16":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    for unit in layers:
        if activation_checkpointing:
            for sub_layer in unit:
                checkpoint_layer(sub_layer)
        fully_shard(unit if len(unit) > 1 else unit[0], **options)
    fully_shard(model, **options)
    return model


def set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    """FSDP's ``no_sync``: off on the micro-batches before the last of a step, so that gradients are
    accumulated unsharded and reduce-scattered once per optimizer step."""
    if is_sharded(model):
        model.set_requires_gradient_sync(enabled)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on the CPU, gathered from every rank's shards (a collective call: every
    rank calls it; rank 0 receives the tensors, the others an empty dict)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def consolidated_model(model: nn.Module, context: DistributedContext) -> nn.Module | None:
    """``model`` itself when it is not sharded. Sharded: a plain, unsharded copy on the CPU with the
    gathered weights on rank 0 (what `attnlab.io.save` writes), None on the other ranks. Collective."""
    if not is_sharded(model):
        return model
    weights = full_state_dict(model)
    if not context.is_main:
        return None
    plain = _copy_with_parameters(_UNSHARDED[model], "cpu")
    plain.load_state_dict(weights, strict=True)
    return plain.eval() if not model.training else plain
