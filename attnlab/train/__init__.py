"""attnlab.train: the trainer shared by pre-training, fine-tuning and translation.

`Trainer` + `TrainerConfig` run the loop; `optim` holds AdamW parameter groups and LAMB, `schedules` the
learning-rate schedules, `data` the exactly resumable loader, `checkpoint` atomic checkpoints, `logging`
the JSON-lines / TensorBoard logs and `distributed` DDP applied from outside. See docs/training.md.
"""

from .checkpoint import latest_checkpoint, list_checkpoints, save_model, set_seed
from .config import TrainerConfig, resolve_warmup
from .data import ResumableLoader
from .distributed import DistributedContext, cleanup_distributed, setup_distributed, wrap_model
from .optim import Lamb, build_optimizer, param_groups
from .schedules import (
    build_schedule,
    constant_schedule,
    cosine_schedule,
    inverse_sqrt_schedule,
    linear_schedule,
    transformer_schedule,
)
from .trainer import NonFiniteLossError, Trainer, TrainResult

__all__ = [
    "DistributedContext",
    "Lamb",
    "NonFiniteLossError",
    "ResumableLoader",
    "TrainResult",
    "Trainer",
    "TrainerConfig",
    "build_optimizer",
    "build_schedule",
    "cleanup_distributed",
    "constant_schedule",
    "cosine_schedule",
    "inverse_sqrt_schedule",
    "latest_checkpoint",
    "linear_schedule",
    "list_checkpoints",
    "param_groups",
    "resolve_warmup",
    "save_model",
    "set_seed",
    "setup_distributed",
    "transformer_schedule",
    "wrap_model",
]
