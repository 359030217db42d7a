"""`TrainerConfig`: every knob of a training run, validated where it is set.

One dataclass serves pre-training (BERT: AdamW or LAMB, 1e-4, warm-up then linear decay, weight decay 0.01),
fine-tuning (2-4 epochs, lr in {5e-5, 3e-5, 2e-5}) and translation (Adam with beta2 = 0.98 and the
Transformer's inverse-square-root schedule with 4000 warm-up steps).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "inverse_sqrt", "transformer", "constant")
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLEL_MODES = ("ddp", "fsdp")  # attnlab.train.distributed (DDP), attnlab.train.sharded (FSDP2)


@dataclass
class TrainerConfig:
    # --- length of the run: exactly one of max_steps / epochs. A step is one optimizer update.
    max_steps: int | None = None
    epochs: float | None = None  # converted to optimizer steps with len(train loader) / grad_accum_steps
    # Wall-clock budget of this invocation: the run ends at the first step boundary after it, as it would
    # at max_steps (final evaluation and checkpoint), on every rank together. The schedule still decays
    # over max_steps/epochs, so pick those to fit the budget when the schedule's end matters.
    max_minutes: float | None = None

    # --- batches. Effective batch = batch_size * grad_accum_steps * world_size examples per update.
    batch_size: int = 32  # per device (per process), used when the trainer builds the loader itself
    grad_accum_steps: int = 1  # micro-batches summed before each update (DDP syncs only on the last one)

    # --- optimizer (BERT: AdamW, lr 1e-4, betas (0.9, 0.999), eps 1e-6, weight decay 0.01)
    optimizer: str = (
        "adamw"  # "adamw" (torch.optim.AdamW) or "lamb" (You et al. 2019, layer-wise trust ratio)
    )
    lr: float = 1e-4  # peak learning rate; for schedule="transformer" a multiplier of the paper's formula
    betas: tuple[float, float] = (0.9, 0.999)  # the Transformer used (0.9, 0.98)
    eps: float = 1e-6  # BERT's value; the Transformer used 1e-9
    weight_decay: float = 0.01  # decoupled; never applied to biases and normalisation weights
    max_trust_ratio: float = 10.0  # LAMB only: upper clip of ||w|| / ||update||

    # --- schedule. warmup: an int is a number of steps, a float in [0, 1) a fraction of max_steps.
    # "linear" (BERT), "cosine" (Transformer-XL), "inverse_sqrt", "transformer" (Vaswani 5.3), "constant"
    schedule: str = "linear"
    warmup: int | float = 0
    d_model: int | None = None  # schedule="transformer" only: the model width in d_model^-0.5

    # --- numerics
    clip_norm: float | None = 1.0  # global L2 norm of the gradients; None disables clipping
    precision: str = "fp32"  # "fp32", "bf16" (autocast) or "fp16" (autocast + GradScaler)
    compile: bool = False  # wrap the model in torch.compile
    device: str = "auto"  # "auto": cuda:LOCAL_RANK when CUDA is available, else cpu
    # DDP only: set when some parameters get no gradient in a step (a head a batch does not use)
    find_unused_parameters: bool = False
    # --- several processes (torchrun): "ddp" keeps a whole copy of the model per rank; "fsdp" shards
    # parameters, gradients and optimizer state (attnlab.train.sharded; checkpoints then sharded too)
    parallel: str = "ddp"
    activation_checkpointing: bool = False  # fsdp: each layer's forward runs again in backward
    cpu_offload: bool = False  # fsdp: parameter shards and optimizer step in host memory

    # --- bookkeeping (steps are optimizer steps; 0 disables)
    log_every: int = 10
    eval_every: int = 0
    save_every: int = 0
    keep_last: int | None = 2  # checkpoints kept (one to fall back to if the newest is damaged); None: all
    output_dir: str | Path = "runs/default"
    seed: int = 0
    tensorboard: bool = True  # also write TensorBoard events next to the JSON-lines log
    progress_bar: bool = True
    plot: bool = True  # write loss_curve.png at the end of train()
    lm_perplexity: bool = False  # evaluation also reports exp(eval_loss) (for per-token LM losses)
    num_workers: int = 0  # loader worker processes when the trainer builds the loader itself
    drop_last: bool = True  # when the trainer builds the loader itself
    # Batches of similar lengths (HF's group_by_length; attnlab.train.data): less padding, the same examples
    # each epoch. When the trainer builds the loader itself, from the dataset's ``lengths``.
    group_by_length: bool = False

    extra: dict = field(default_factory=dict)  # free-form user values copied into trainer_state.json

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)
        self.betas = tuple(float(b) for b in self.betas)  # YAML gives lists
        if (self.max_steps is None) == (self.epochs is None):
            raise ValueError(
                f"TrainerConfig: give exactly one of max_steps and epochs (got max_steps={self.max_steps}, "
                f"epochs={self.epochs})"
            )
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"TrainerConfig.max_steps: expected a positive int, got {self.max_steps!r}")
        if self.epochs is not None and not (self.epochs > 0):
            raise ValueError(f"TrainerConfig.epochs: expected a positive number, got {self.epochs!r}")
        if self.max_minutes is not None and not (
            isinstance(self.max_minutes, (int, float)) and self.max_minutes > 0
        ):
            raise ValueError(
                f"TrainerConfig.max_minutes: expected a positive number of minutes or None, "
                f"got {self.max_minutes!r}"
            )
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("schedule", self.schedule, SCHEDULES)
        _choice("precision", self.precision, PRECISIONS)
        _choice("parallel", self.parallel, PARALLEL_MODES)
        if self.parallel != "fsdp" and (self.activation_checkpointing or self.cpu_offload):
            raise ValueError(
                "TrainerConfig: activation_checkpointing and cpu_offload are options of parallel='fsdp', "
                f"not of parallel={self.parallel!r}"
            )
        for name in ("batch_size", "grad_accum_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainerConfig.{name}: expected a positive int, got {value!r}")
        for name in ("log_every", "eval_every", "save_every", "num_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainerConfig.{name}: expected an int >= 0 (0 disables), got {value!r}")
        if self.keep_last is not None and (not isinstance(self.keep_last, int) or self.keep_last < 1):
            raise ValueError(f"TrainerConfig.keep_last: expected an int >= 1 or None, got {self.keep_last!r}")
        if not (self.lr > 0):
            raise ValueError(f"TrainerConfig.lr: expected a positive number, got {self.lr!r}")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"TrainerConfig.betas: expected two numbers in [0, 1), got {self.betas!r}")
        if not (self.eps > 0):
            raise ValueError(f"TrainerConfig.eps: expected a positive number, got {self.eps!r}")
        if self.weight_decay < 0:
            raise ValueError(f"TrainerConfig.weight_decay: expected >= 0, got {self.weight_decay!r}")
        if self.clip_norm is not None and not (self.clip_norm > 0):
            raise ValueError(
                f"TrainerConfig.clip_norm: expected a positive number or None, got {self.clip_norm!r}"
            )
        if self.schedule == "transformer" and (not isinstance(self.d_model, int) or self.d_model < 1):
            raise ValueError(
                f"TrainerConfig.d_model: schedule='transformer' needs the model width as a positive int, "
                f"got {self.d_model!r}"
            )
        if self.max_steps is not None:
            resolve_warmup(self.warmup, self.max_steps)  # validates now rather than at the first step

    def to_dict(self) -> dict:
        """A JSON-serialisable copy (Path as str, tuples as lists)."""
        out = dataclasses.asdict(self)
        out["output_dir"] = str(self.output_dir)
        out["betas"] = list(self.betas)
        return out


def resolve_warmup(warmup: int | float, total_steps: int) -> int:
    """Warm-up as a number of steps: an int is taken as is, a float in [0, 1) as a fraction of `total_steps`.

    >>> resolve_warmup(0.1, 1000), resolve_warmup(400, 1000)
    (100, 400)
    """
    if isinstance(warmup, bool):
        raise ValueError(f"warmup: expected an int (steps) or a float in [0, 1) (fraction), got {warmup!r}")
    if isinstance(warmup, int):
        steps = warmup
    elif isinstance(warmup, float) and 0.0 <= warmup < 1.0:
        steps = int(math.floor(warmup * total_steps + 0.5))
    elif isinstance(warmup, float) and warmup >= 1.0 and warmup.is_integer():
        steps = int(warmup)  # 4000.0 from a YAML file means 4000 steps
    else:
        raise ValueError(f"warmup: expected an int (steps) or a float in [0, 1) (fraction), got {warmup!r}")
    if steps < 0:
        raise ValueError(f"warmup: expected >= 0 steps, got {steps}")
    return steps


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"TrainerConfig.{name}: {value!r} is not one of {', '.join(map(repr, valid))}")
