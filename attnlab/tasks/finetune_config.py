"""What a fine-tuning run is given: BERT's hyper-parameters (`FinetuneConfig`) and where its model starts
(`ModelSource`: a checkpoint directory, or a preset's config for random initialisation).

BERT (Devlin et al. 2019, section 4 and appendix A.3): AdamW (weight decay 0.01, never on biases and
LayerNorm), 10% linear warm-up then linear decay, batch 32, dropout 0.1, 2 to 4 epochs, a learning rate
among 5e-5, 3e-5, 2e-5 chosen on dev.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from attnlab.io.checkpoint import read_checkpoint_config
from attnlab.io.hf import is_hf_directory
from attnlab.io.hf_encoders import describe_hf
from attnlab.models import ARCHITECTURES
from attnlab.nn.pooling import POOLINGS
from attnlab.tasks.registry import TaskSpec, model_labels
from attnlab.tasks.task_model import load_task_model
from attnlab.tokenizers import load_tokenizer

logger = logging.getLogger(__name__)

LEARNING_RATES = (5e-5, 3e-5, 2e-5)  # BERT appendix A.3 (Adam lr for fine-tuning)
# Narrower than BERT-base: the grid google-research/bert used for its 24 smaller BERTs (Turc et al. 2019,
# "Well-Read Students Learn Better"; 4 epochs). BERT-base's 3e-5 barely moves a 4-layer, 256-wide model in a
# CPU budget (experiments/pretrain_then_finetune.py: SST-2 72.6 from books pre-training against 73.7 from
# random initialisation at 3e-5).
SMALL_MODEL_LEARNING_RATES = (3e-4, 1e-4, 5e-5, 3e-5)
SMALL_MODEL_WIDTH = 768  # hidden sizes below BERT-base's take the small grid and its default
ENCODER_DROPOUT = 0.1  # BERT: "a dropout probability of 0.1 on all layers", kept for fine-tuning


def default_learning_rates(config: Any, sweep: bool = False) -> tuple[float, ...]:
    """The learning rate(s) for a model of ``config`` (an encoder config with ``hidden_size``): BERT's 3e-5
    (sweep: 5e-5, 3e-5, 2e-5) from BERT-base's width up; below it 1e-4 (sweep: the small BERTs' grid)."""
    small = getattr(config, "hidden_size", SMALL_MODEL_WIDTH) < SMALL_MODEL_WIDTH
    if sweep:
        return SMALL_MODEL_LEARNING_RATES if small else LEARNING_RATES
    return (1e-4,) if small else (3e-5,)


@dataclass
class FinetuneConfig:
    """BERT's fine-tuning hyper-parameters, plus limits for small machines."""

    learning_rates: tuple[float, ...] = (3e-5,)  # several = a sweep; BERT's set is LEARNING_RATES
    seeds: tuple[int, ...] = (0,)  # several = the median over seeds is reported (and decides the sweep)
    epochs: float = 3.0  # BERT: 2 to 4
    batch_size: int = 32
    warmup: float = 0.1  # fraction of the steps
    weight_decay: float = 0.01
    dropout: float = 0.1  # on the classifier
    # Dropout of the encoder's layers (hidden and attention) while fine-tuning; None keeps the checkpoint's.
    # BERT fine-tunes with 0.1 on all layers; a model pre-trained without dropout (the budget recipes, as in
    # Geiping & Goldstein 2023's cramming) gets it back here.
    encoder_dropout: float | None = ENCODER_DROPOUT
    # Sentence vector of classification and regression tasks: "cls", BERT's pooled [CLS]; "mean", the mean of
    # the tokens' final states (no pooler; EncoderForSequenceClassification's pooling option).
    pooling: str = "cls"
    max_length: int | None = None  # tokens per sequence; None: 384 for QA (BERT's SQuAD setting), else 128
    # Batches of similar lengths (HF's group_by_length; attnlab.train.data): the same examples each epoch in
    # an order still drawn from the seed, with less padding, so fewer seconds a step. Off: BERT's order.
    group_by_length: bool = False
    stride: int = 128  # QA: overlap of consecutive passage windows, in tokens
    max_query_length: int = 64  # QA: longer questions are cut (and counted)
    max_train_examples: int | None = None  # the first N training examples only
    max_eval_examples: int | None = None  # the first N dev examples only
    # Hold out this many training examples (a fixed random draw, SELECTION_SEED) to choose the learning rate
    # and each run's best evaluation on; dev then scores the chosen models once, so the reported figure was
    # never used to choose anything. 0: dev chooses, as BERT did ("we selected the best fine-tuning
    # learning rate on the Dev set").
    selection_examples: int = 0
    minutes: float | None = None  # wall-clock budget per run; training stops (and is evaluated) after it
    precision: str = "fp32"
    device: str = "auto"
    # Under torchrun: "ddp" (a whole model per process) or "fsdp" (sharded, `attnlab.train.sharded`), with
    # FSDP's per-layer activation checkpointing and CPU offload of parameters; the trainer's fields.
    parallel: str = "ddp"
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    eval_batch_size: int = 64
    output_dir: str | os.PathLike = "runs/finetune"
    keep_best: bool = True  # write the best epoch's model to <run>/best
    progress_bar: bool = False
    tensorboard: bool = False
    resume: bool = False  # continue the run in output_dir: each (lr, seed) from its newest good checkpoint
    overwrite: bool = False  # remove an earlier run's outputs in output_dir first (else they are an error)
    # Optimizer steps between evaluations (each keeps the best so far); 0: at each epoch's end, BERT's. The
    # last step is always evaluated, so a value above the run's steps evaluates once, at the end.
    eval_every: int = 0
    save_every: int = 0  # optimizer steps between checkpoints; 0: at every evaluation (each epoch's end)
    keep_last: int = 2  # checkpoints kept per (lr, seed) run: one to fall back to if the newest is damaged
    # A feature builder in place of BERT's (attnlab.tasks.feature_builder), e.g. K-BERT's KnowledgeInjector
    # (attnlab.knowledge.features, --kg); None: BERT's features.
    knowledge: Any = None
    # Task-specific distillation (attnlab.tasks.distillation): a teacher fine-tuned on the same task adds its
    # soft targets at ``distill_temperature``, weighted ``distill_alpha`` against the task loss's 1 - alpha.
    teacher: str | os.PathLike | None = None
    distill_temperature: float = 2.0
    distill_alpha: float = 0.5

    def __post_init__(self) -> None:
        if not (self.distill_temperature > 0 and 0.0 <= self.distill_alpha <= 1.0):
            raise ValueError(
                "FinetuneConfig: distill_temperature > 0 and distill_alpha in [0, 1] expected, got "
                f"{self.distill_temperature!r} and {self.distill_alpha!r}"
            )
        if self.resume and self.overwrite:
            raise ValueError("FinetuneConfig: resume and overwrite exclude each other")
        for name in ("save_every", "eval_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"FinetuneConfig.{name}: an int >= 0, got {getattr(self, name)!r}")
        if not isinstance(self.keep_last, int) or self.keep_last < 1:
            raise ValueError(f"FinetuneConfig.keep_last: an int >= 1, got {self.keep_last!r}")
        if not self.learning_rates or any(not (lr > 0) for lr in self.learning_rates):
            raise ValueError(f"FinetuneConfig.learning_rates: positive numbers, got {self.learning_rates!r}")
        if not self.seeds:
            raise ValueError("FinetuneConfig.seeds: at least one seed")
        if not (self.epochs > 0):
            raise ValueError(f"FinetuneConfig.epochs: a positive number, got {self.epochs!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"FinetuneConfig.batch_size: a positive int, got {self.batch_size!r}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"FinetuneConfig.warmup: a fraction in [0, 1), got {self.warmup!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"FinetuneConfig.dropout: a probability in [0, 1), got {self.dropout!r}")
        if self.encoder_dropout is not None and not 0.0 <= self.encoder_dropout < 1.0:
            raise ValueError(
                "FinetuneConfig.encoder_dropout: a probability in [0, 1) or None, got "
                f"{self.encoder_dropout!r}"
            )
        if self.pooling not in POOLINGS:
            raise ValueError(f"FinetuneConfig.pooling: one of {POOLINGS}, got {self.pooling!r}")
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"FinetuneConfig.{name}: a positive int or None, got {value!r}")
        if self.minutes is not None and not (self.minutes > 0):
            raise ValueError(f"FinetuneConfig.minutes: a positive number or None, got {self.minutes!r}")
        if self.teacher is not None and self.parallel == "fsdp":
            raise ValueError(
                "FinetuneConfig: a teacher (--teacher) with parallel 'fsdp': the teacher's soft targets wrap "
                "the model FSDP would shard; distil with --parallel ddp"
            )


@dataclass
class ModelSource:
    """Where a run's model starts: a checkpoint directory (attnlab or HF), or a preset's config (random
    initialisation). The tokenizer comes from the directory unless given."""

    directory: str | os.PathLike | None = None
    config: Any = None  # an EncoderConfig for random initialisation
    tokenizer: Any = None
    name: str = ""
    # inside `once_per_sweep`: the loading warnings already logged, each said once (not per run)
    _said: set[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.directory is None) == (self.config is None):
            raise ValueError("ModelSource: give exactly one of directory and config")
        if self.tokenizer is None:
            if self.directory is None:
                raise ValueError("ModelSource: random initialisation needs a tokenizer")
            self.tokenizer = load_tokenizer(self.directory)
        if not self.name:
            self.name = str(self.directory) if self.directory is not None else "random init"

    def build(
        self,
        spec: TaskSpec,
        labels: Sequence[str] | None,
        dropout: float,
        regression: bool,
        encoder_dropout: float | None = None,
        pooling: str = "cls",
    ) -> nn.Module:
        """The task model, in train mode; ``encoder_dropout`` (None: the config's) on the encoder's layers;
        ``pooling`` the sentence vector of a classification or regression head (`FinetuneConfig.pooling`)."""
        changes = {} if encoder_dropout is None else {
            "hidden_dropout": encoder_dropout, "attention_dropout": encoder_dropout
        }  # fmt: skip

        options: dict[str, Any] = {}
        if spec.kind in ("classification", "regression", "token"):
            n = 1 if regression or spec.kind == "regression" else len(labels or ())
            options = {"num_labels": n, "labels": None if n == 1 else model_labels(spec, labels or ())}
        if spec.kind != "qa":
            options["classifier_dropout"] = dropout
        if pooling != "cls":
            if spec.architecture != "EncoderForSequenceClassification":
                raise ValueError(
                    f"pooling {pooling!r}: only sequence classification and regression choose their sentence "
                    f"vector; task {spec.name} ({spec.kind}) has no such head"
                )
            options["pooling"] = pooling
        if self.directory is not None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = load_task_model(self.directory, spec.architecture, config_changes=changes, **options)
            for w in caught:
                message = str(w.message)
                if self._said is None or message not in self._said:
                    logger.warning("%s", message)
                if self._said is not None:
                    self._said.add(message)
            return model
        config = dataclasses.replace(self.config, **changes)
        return ARCHITECTURES[spec.architecture].from_config(config, **options).train()

    @contextmanager
    def once_per_sweep(self) -> Iterator[None]:
        """Within: a loading warning (the head "newly initialised", ...) is logged by the first run that
        meets it, not again by each of a sweep's learning rates and seeds, which build the same model."""
        self._said = set()
        try:
            yield
        finally:
            self._said = None

    @property
    def model_config(self) -> Any:
        if self.config is not None:
            return self.config
        if is_hf_directory(self.directory):
            return describe_hf(self.directory)[2]
        return read_checkpoint_config(self.directory)[2]


__all__ = [
    "ENCODER_DROPOUT",
    "LEARNING_RATES",
    "SMALL_MODEL_LEARNING_RATES",
    "SMALL_MODEL_WIDTH",
    "FinetuneConfig",
    "ModelSource",
    "default_learning_rates",
]
