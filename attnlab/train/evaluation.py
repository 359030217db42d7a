"""The trainer's held-out pass: a model's mean loss over evaluation batches and the extra metrics of a
``metric_fn``, without changing the training run (RNG state and train/eval mode restored)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .checkpoint import rng_state, set_rng_state
from .data import ResumableLoader, count_examples, move_to


def evaluate_model(
    model: nn.Module,
    data: Any,
    device: torch.device,
    metric_fn: Any = None,
    *,
    lm_perplexity: bool = False,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """One pass of ``model`` (eval mode) over ``data``: the mean loss and ``metric_fn``'s scores (see
    `Trainer.evaluate`), each forward under ``autocast()``. The global RNG state and the model's
    train/eval mode are restored afterwards."""
    saved_rng = rng_state()
    was_training = model.training
    model.eval()
    streaming = hasattr(metric_fn, "update") and hasattr(metric_fn, "compute")
    if streaming and hasattr(metric_fn, "reset"):
        metric_fn.reset()
    outputs: list[Any] = []
    batches: list[Any] = []
    loss_sum = examples = token_loss_sum = token_count = 0.0
    has_loss = False
    try:
        iterator = data.iter_epoch(0) if isinstance(data, ResumableLoader) else iter(data)
        for batch in iterator:
            batch = move_to(batch, device)
            with autocast():
                output = model(**batch)
            loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
            n = count_examples(batch)
            if loss is not None:
                has_loss = True
                value = float(loss.float())
                loss_sum += value * n
                labels = batch.get("labels")
                weight = int((labels != -100).sum()) if isinstance(labels, torch.Tensor) else n
                token_loss_sum += value * weight
                token_count += weight
            examples += n
            if streaming:
                metric_fn.update(output, batch)
            elif metric_fn is not None:
                outputs.append(move_to(_detach(output), torch.device("cpu")))
                batches.append(move_to(batch, torch.device("cpu")))
    finally:
        model.train(was_training)
        set_rng_state(saved_rng)
    if examples == 0:
        raise ValueError("Trainer.evaluate: the evaluation data yielded no batch")
    results: dict[str, float] = {}
    if has_loss:
        results["eval_loss"] = loss_sum / examples
        if lm_perplexity and token_count > 0:
            results["eval_perplexity"] = math.exp(min(token_loss_sum / token_count, 700.0))
    if streaming:
        extra = metric_fn.compute()
    elif metric_fn is not None:
        extra = metric_fn(outputs, batches)
    else:
        extra = {}
    for key, value in dict(extra).items():
        results[key if key.startswith("eval_") else f"eval_{key}"] = float(value)
    return results


def _detach(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.detach()
    if isinstance(output, Mapping):
        return {k: _detach(v) for k, v in output.items()}
    if hasattr(output, "__dataclass_fields__"):
        return {k: _detach(getattr(output, k)) for k in output.__dataclass_fields__}
    return output
