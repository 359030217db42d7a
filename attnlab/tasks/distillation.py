"""Task-specific distillation: fine-tuning a student with soft targets from a fine-tuned teacher.

DistilBERT (Sanh et al. 2019, section 4.2, "distillation during the adaptation phase") fine-tunes the student
with a teacher fine-tuned on the same task; the released ``run_squad_w_distillation.py`` adds the
soft-target loss at temperature 2 to the task loss, weighted 0.5 / 0.5. `TaskDistiller` does that for
every task head of `attnlab.models.task_heads`:

    loss = (1 - alpha) * task loss + alpha * soft-target loss

the soft-target loss being `attnlab.nn.distillation.soft_target_loss` (T^2-scaled KL) over the class logits
(classification, multiple choice), over each labelled token (token classification), over start and end
logits averaged (QA), and the squared difference from the teacher's prediction for a one-output
regression head (STS-B). ``attnlab finetune --teacher DIR`` wraps the student in it; only the student is
trained, saved and checkpointed (the teacher is frozen and not a registered sub-module). A fine-tuning run
takes the teacher as an extra loss (`SoftTargets`, `attnlab.tasks.finetune_run.ExtraLoss`).

Shapes: B batch, T sequence, C classes, K choices.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io import load
from attnlab.nn.distillation import regression_distillation_loss, soft_target_loss
from attnlab.tasks.registry import TaskSpec, model_labels
from attnlab.tokenizers import load_tokenizer
from attnlab.tokenizers.vocab_diff import check_same_vocabulary

LABEL_KEYS = ("labels", "start_positions", "end_positions")  # what the teacher is not given


def soft_loss(student_out: Any, teacher_out: Any, batch: dict[str, Tensor], temperature: float) -> Tensor:
    """The soft-target loss between two task outputs of one kind (see the module docstring)."""
    if hasattr(student_out, "start_logits"):  # QA: (B, T) start and end
        return 0.5 * (
            soft_target_loss(student_out.start_logits, teacher_out.start_logits, temperature)
            + soft_target_loss(student_out.end_logits, teacher_out.end_logits, temperature)
        )
    s, t = student_out.logits, teacher_out.logits
    if s.dim() == 3:  # token classification (B, T, C): the labelled tokens, else the real ones
        labels = batch.get("labels")
        if labels is not None:
            keep = labels != -100  # (B, T)
        else:
            keep = batch.get("attention_mask", torch.ones(s.shape[:2], device=s.device)) != 0
        return soft_target_loss(s[keep], t[keep], temperature)
    if s.size(-1) == 1:  # regression (B, 1)
        return regression_distillation_loss(s, t)
    return soft_target_loss(s, t, temperature)  # (B, C) classes or (B, K) choices


class TaskDistiller(nn.Module):
    """``model`` (the student task model: trained, saved) fine-tuned with a frozen ``teacher``'s soft
    targets; in eval mode it is the student alone."""

    def __init__(self, student: nn.Module, teacher: nn.Module, temperature: float = 2.0, alpha: float = 0.5):
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature: expected > 0, got {temperature}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha: expected a weight in [0, 1], got {alpha}")
        if type(student) is not type(teacher):
            raise ValueError(
                f"the teacher is a {type(teacher).__name__} and the student a {type(student).__name__}: "
                "a teacher fine-tuned on the same task is needed"
            )
        self.model = student
        self.config = student.config
        self.temperature, self.alpha = float(temperature), float(alpha)
        teacher.eval().requires_grad_(False)
        self._teacher = (teacher,)  # not a sub-module: not saved, optimised or wrapped by DDP

    @property
    def teacher(self) -> nn.Module:
        return self._teacher[0]

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> TaskDistiller:
        self.teacher._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True) -> TaskDistiller:
        super().train(mode)
        self.teacher.eval()
        return self

    @staticmethod
    def _inputs_for(model: nn.Module, batch: dict[str, Tensor], labels: bool) -> dict[str, Tensor]:
        out = {k: v for k, v in batch.items() if labels or k not in LABEL_KEYS}
        if model.config.type_vocab_size == 0:  # DistilBERT: no segment embeddings
            out.pop("token_type_ids", None)
        return out

    def forward(self, **batch: Tensor) -> Any:
        out = self.model(**self._inputs_for(self.model, batch, labels=True))
        if not self.training or out.loss is None or self.alpha == 0:
            return out
        with torch.no_grad():
            teacher_out = self.teacher(**self._inputs_for(self.teacher, batch, labels=False))
        soft = soft_loss(out, teacher_out, batch, self.temperature)
        return dataclasses.replace(out, loss=(1.0 - self.alpha) * out.loss + self.alpha * soft)


def load_task_teacher(
    directory: str | os.PathLike,
    architecture: str,
    labels: Sequence[str] | None,
    num_labels: int | None,
    tokenizer: Any,
) -> nn.Module:
    """A fine-tuned teacher (attnlab or HF task directory) for a student of ``architecture`` with
    ``labels``; its vocabulary and labels must be the student's (errors say which differs)."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: --teacher expects a fine-tuned model directory")
    teacher = load(d)
    if type(teacher).__name__ != architecture:
        raise ValueError(
            f"{d}: the teacher is a {type(teacher).__name__}; this task fine-tunes a {architecture} (give a "
            "teacher fine-tuned on the same task, e.g. RUN/best of attnlab finetune)"
        )
    check_same_vocabulary(load_tokenizer(d), tokenizer, str(d), "the student's tokenizer")
    options = getattr(teacher, "options", {})
    if num_labels is not None and options.get("num_labels") != num_labels:
        raise ValueError(
            f"{d}: the teacher has {options.get('num_labels')} outputs, the student {num_labels}"
        )
    if labels is not None and options.get("labels") is not None and list(options["labels"]) != list(labels):
        raise ValueError(
            f"{d}: the teacher's labels {options['labels']} differ from the task's {list(labels)}"
        )
    return teacher.eval().requires_grad_(False)


@dataclass
class SoftTargets:
    """A fine-tuning run's extra loss (`attnlab.tasks.finetune_run.ExtraLoss`): ``teacher``'s soft targets at
    ``temperature``, weighted ``alpha`` against the task loss's 1 - alpha."""

    teacher: nn.Module
    temperature: float = 2.0
    alpha: float = 0.5

    def wrap(self, model: nn.Module) -> nn.Module:
        return TaskDistiller(model, self.teacher, self.temperature, self.alpha)

    def fit_inputs(self, max_length: int, with_token_types: bool) -> tuple[int, bool]:
        """The features both models can read: no longer than the teacher's positions, with token types when
        either has them (a student without them, DistilBERT, drops them)."""
        config = self.teacher.config
        return min(max_length, config.max_sequence_length), with_token_types or config.type_vocab_size > 0


def soft_targets_for_task(
    directory: str | os.PathLike,
    spec: TaskSpec,
    labels: Sequence[str] | None,
    tokenizer: Any,
    regression: bool = False,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> SoftTargets:
    """The teacher in ``directory`` (fine-tuned on ``spec`` with ``labels``) as a run's extra loss."""
    n = 1 if regression or spec.kind == "regression" else len(labels or ())
    named = None
    if n > 1 and spec.kind in ("classification", "token"):
        named = model_labels(spec, labels or ())
    counted = spec.kind in ("classification", "regression", "token")
    teacher = load_task_teacher(directory, spec.architecture, named, n if counted else None, tokenizer)
    return SoftTargets(teacher, temperature, alpha)
