"""`Trainer`: the loop shared by pre-training, fine-tuning and translation.

The contract with a model is one call: ``output = model(**batch)``, where ``output.loss`` (attribute or
dict key) is a scalar tensor, mean over the batch, and ``output.metrics`` optionally holds a dict of scalar
tensors to log. The trainer knows nothing else about the model.

One optimizer step (a "step" everywhere in this package) is ``grad_accum_steps`` micro-batches::

    for each micro-batch:  loss = model(**batch).loss;  backward(loss / grad_accum_steps)
                           (under DDP, gradients are all-reduced only on the last micro-batch: no_sync)
    check the loss is finite (averaged over micro-batches and ranks) -> else stop, nothing written
    unscale (fp16), clip the global gradient norm, optimizer.step(), scheduler.step()

At step boundaries it logs (JSON lines, TensorBoard, progress bar), evaluates, saves checkpoints and
honours SIGINT / SIGTERM (save, then return). Exact resume on CPU is tested bit for bit.

A module may also carry state from one step to the next that is not a weight and belongs to its process
(Transformer-XL's memory of the previous segment, `attnlab.pretraining.transfo_xl`): if it has
``carried_state()`` and ``load_carried_state(state)``, every rank's state is saved in the checkpoint beside
its RNG state and given back to the same rank on resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from attnlab.manifest import new_run_id

from .checkpoint import (
    CHECKPOINT_DIR,
    CheckpointContents,
    checkpoint_name,
    checkpoint_run_id,
    latest_checkpoint,
    list_checkpoints,
    remove_stale_temporaries,
    rng_state,
    set_rng_state,
    set_seed,
    unwrap_model,
)
from .config import TrainerConfig, resolve_warmup
from .data import ResumableLoader, as_loader, count_examples, count_tokens, move_to
from .distributed import (
    DistributedContext,
    all_gather_object,
    all_reduce_sum,
    barrier,
    current_context,
    resolve_device,
    wrap_model,
)
from .evaluation import evaluate_model
from .logging import LOG_FILE, PLOT_FILE, RunLogger, plot_loss_curve
from .optim import build_optimizer
from .schedules import build_schedule
from .sharded import is_sharded, set_gradient_sync, shard_model
from .sharded_checkpoint import (
    loader_state_for,
    newest_readable_checkpoint,
    restore_checkpoint,
    training_layout,
    write_checkpoint,
)

MetricFn = Callable[[list[Any], list[Any]], Mapping[str, float]]
StepCallback = Callable[["Trainer", dict[str, Any]], None]


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or Inf; the run stopped before updating the weights with it."""


@dataclass
class TrainResult:
    step: int  # optimizer steps done (including those before a resume)
    interrupted: bool  # stopped by SIGINT / SIGTERM before max_steps
    last_checkpoint: Path | None
    eval_metrics: dict[str, float] = field(default_factory=dict)  # the last evaluation, if any


def get_loss(output: Any) -> torch.Tensor:
    """``output.loss`` or ``output["loss"]``, checked to be a scalar tensor."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if loss is None:
        raise ValueError(
            f"model(**batch) returned {type(output).__name__} without a loss: the batch must hold the labels "
            "the model needs to compute it"
        )
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"model(**batch).loss must be a scalar tensor, got {shape}")
    return loss


def get_metrics(output: Any) -> Mapping[str, torch.Tensor]:
    metrics = output.get("metrics") if isinstance(output, Mapping) else getattr(output, "metrics", None)
    return metrics or {}


class Trainer:
    """Train `model` on `train_data` following `config`.

    Args:
        model: any module with ``model(**batch).loss``; written for one device (the trainer moves it and
            wraps it in DistributedDataParallel when the job has several processes).
        config: the run's `TrainerConfig`.
        train_data: a `ResumableLoader` (exact resume); a `torch.utils.data.Dataset` (the trainer builds a
            `ResumableLoader` with ``config.batch_size``, ``collate_fn``, ``config.seed`` and this rank's
            shard); or any re-iterable of batches (a list, a DataLoader): on resume its consumed batches of
            the current epoch are read again and skipped, and the order is only reproduced if it is
            deterministic. Under DDP a plain iterable must already be sharded by rank.
        eval_data: batches for `evaluate` (same forms; a Dataset is read in order, unsharded).
        metric_fn: extra evaluation metrics. Either a callable ``metric_fn(outputs, batches) -> dict``
            receiving every evaluation output (dataclass outputs as dicts) and batch, tensors moved to the
            CPU; or an object with ``update(output, batch)`` and ``compute() -> dict`` (and optionally
            ``reset()``) that streams. Keys come back prefixed ``eval_``.
        collate_fn: list of examples -> batch, when the trainer builds loaders from datasets.
        optimizer, scheduler: override the ones built from the config.
        callbacks: ``callback(trainer, record)`` after every optimizer step (record: step, loss, lr).
        context: the distributed context (default: the process group already joined, if any).
        run_id: the run's id, written into every checkpoint's manifest (default: a fresh random one; a
            `resume` takes the checkpoint's). `train` refuses to write beside checkpoints of another run.

    Constructing a Trainer seeds python, numpy and torch with ``config.seed + rank`` (dropout masks then
    differ across ranks); seed the model's initialisation yourself before building it (`set_seed`).
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainerConfig,
        train_data: Any,
        *,
        eval_data: Any = None,
        metric_fn: MetricFn | Any | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        callbacks: Iterable[StepCallback] = (),
        context: DistributedContext | None = None,
        run_id: str | None = None,
    ) -> None:
        if not isinstance(config, TrainerConfig):
            raise TypeError(f"Trainer: config must be a TrainerConfig, got {type(config).__name__}")
        self.config = config
        self.context = context or current_context()
        self.device = resolve_device(config.device, self.context)
        set_seed(config.seed + self.context.rank)

        self.model = model.to(self.device)  # the user's module: saved, loaded and evaluated
        if config.parallel == "fsdp":  # in place, before the optimizer sees the parameters
            if optimizer is not None and not is_sharded(self.model):
                raise ValueError(
                    "Trainer: parallel='fsdp' replaces the parameters by shards; let the trainer build the "
                    "optimizer (or pass one built on the already sharded model)"
                )
            shard_model(
                self.model, self.context, self.device, precision=config.precision,
                activation_checkpointing=config.activation_checkpointing, cpu_offload=config.cpu_offload,
            )  # fmt: skip
        self.train_loader = self._as_loader(train_data, collate_fn, train=True)
        self.eval_data = None if eval_data is None else self._as_loader(eval_data, collate_fn, train=False)
        self.metric_fn = metric_fn
        self.callbacks = list(callbacks)
        self.total_steps = self._total_steps()

        self.optimizer = optimizer or build_optimizer(self.model, config)
        self.scheduler = scheduler or build_schedule(self.optimizer, config, self.total_steps)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.precision == "fp16")

        wrapped = (
            self.model
            if is_sharded(self.model)
            else wrap_model(self.model, self.context, self.device, config.find_unused_parameters)
        )
        self._ddp = wrapped if isinstance(wrapped, DistributedDataParallel) else None
        self._train_model = torch.compile(wrapped) if config.compile else wrapped  # used for training steps

        self.output_dir = Path(config.output_dir)
        self.checkpoint_root = self.output_dir / CHECKPOINT_DIR
        self.step = 0
        self.examples_seen = 0
        self.tokens_seen = 0
        self.last_checkpoint: Path | None = None
        self.run_id = run_id or new_run_id()  # every rank: only rank 0 writes it, a resume replaces it
        self._resumed = False
        self.resume_notes: list[str] = []  # why `resume` passed over newer checkpoints, if it did
        self.last_eval: dict[str, float] = {}
        self._plain_epoch = 0  # epoch / position for plain iterables (a ResumableLoader keeps its own)
        self._plain_position = 0
        self._stop_signal: int | str | None = None  # a signal number (handler) or a reason (request_stop)
        self._stop_now = False  # decided once per step from the all-reduced flag
        self._deadline: float | None = None  # time.monotonic() at which max_minutes is spent
        self._budget_spent = False  # decided once per step from the all-reduced flag, like _stop_now
        self._logger: RunLogger | None = None
        self._progress: tqdm | None = None  # the bar of a running `train`
        self._clock: tuple[float, float] | None = None  # see `train_seconds`

    # ------------------------------------------------------------------ set-up helpers

    def _as_loader(self, data: Any, collate_fn: Callable | None, train: bool) -> Any:
        return as_loader(data, collate_fn, self.config, self.context, train=train)

    def _batches_per_epoch(self) -> int | None:
        try:
            return len(self.train_loader)
        except TypeError:
            return None

    def _total_steps(self) -> int:
        cfg = self.config
        if cfg.max_steps is not None:
            return cfg.max_steps
        per_epoch = self._batches_per_epoch()
        if per_epoch is None:
            raise ValueError("TrainerConfig.epochs: the training data has no len(); give max_steps instead")
        return max(1, math.ceil(cfg.epochs * per_epoch / cfg.grad_accum_steps))

    def set_total_steps(self, total_steps: int, stop_at: int | None = None) -> None:
        """Change the run's length from the current step on, e.g. once a time-budgeted run has measured its
        own step time (`attnlab.pretraining.run` does). The learning-rate schedule is rebuilt for the new
        length with its warm-up kept in absolute steps and continues from the current step, so from here on
        it is the schedule a run planned with ``total_steps`` from the start would follow. ``stop_at`` (<=
        ``total_steps``): this trainer stops there, as one length stage of a longer schedule does (default:
        at ``total_steps``). Under DDP every rank must call it with the same values at the same step."""
        stop = total_steps if stop_at is None else stop_at
        if stop < max(1, self.step):
            raise ValueError(f"set_total_steps: {stop} is below the {self.step} steps already done")
        if stop > total_steps:
            raise ValueError(f"set_total_steps: stop_at ({stop}) is beyond total_steps ({total_steps})")
        length = self.config.max_steps if self.config.max_steps is not None else self.total_steps
        warmup = resolve_warmup(self.config.warmup, length)
        self.config = dataclasses.replace(self.config, max_steps=total_steps, warmup=warmup)
        self.total_steps = stop
        scheduler = build_schedule(self.optimizer, self.config, total_steps)
        with warnings.catch_warnings():  # get_lr() outside step() warns; it is what is wanted here
            warnings.simplefilter("ignore")
            scheduler.last_epoch = self.step  # as if step() had been called once per optimizer step
            lrs = scheduler.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        scheduler._last_lr = list(lrs)
        self.scheduler = scheduler
        if self._progress is not None:
            self._progress.total = stop
            self._progress.refresh()

    def _autocast(self) -> contextlib.AbstractContextManager:
        precision = self.config.precision
        if precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    @property
    def epoch(self) -> float:
        """Epochs done, fractional."""
        loader = self.train_loader
        if isinstance(loader, ResumableLoader):
            return loader.epoch + loader.position / len(loader)
        per_epoch = self._batches_per_epoch()
        return self._plain_epoch + (self._plain_position / per_epoch if per_epoch else 0.0)

    # ------------------------------------------------------------------ data stream

    def _batch_stream(self) -> Iterator[Any]:
        """Batches forever, epoch after epoch, continuing from the loader's (or plain counters') state."""
        loader = self.train_loader
        while True:
            seen_any = False
            if hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict"):
                for batch in loader:
                    seen_any = True
                    yield batch
            else:
                skip = self._plain_position
                for batch in loader:
                    seen_any = True
                    if skip > 0:  # fast-forward after a resume: read again, do not train on it
                        skip -= 1
                        continue
                    self._plain_position += 1
                    yield batch
                self._plain_epoch, self._plain_position = self._plain_epoch + 1, 0
            if not seen_any:
                raise ValueError("Trainer: the training data yielded no batch in a whole epoch")

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_signal is not None:  # a second signal: stop now, without saving
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self._stop_signal = signum

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop at the next step boundary as on SIGTERM: save a checkpoint and return from `train`.

        Safe under DDP when called on any subset of ranks: the request travels with the step's all-reduce,
        so every rank stops after the same step (lowering ``total_steps`` on one rank only would hang).
        """
        if self._stop_signal is None:
            self._stop_signal = reason

    def _stop_name(self) -> str | None:
        if isinstance(self._stop_signal, int):
            return signal.Signals(self._stop_signal).name
        return self._stop_signal

    @contextlib.contextmanager
    def _signals_caught(self) -> Iterator[None]:
        """SIGINT / SIGTERM set a flag; the loop saves at the next step boundary and returns."""
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be installed from the main thread
            return
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    # ------------------------------------------------------------------ one optimizer step

    def _train_step(self, stream: Iterator[Any]) -> dict[str, Any]:
        cfg = self.config
        accum = cfg.grad_accum_steps
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        examples = tokens = 0
        metric_sums: dict[str, float] = {}
        for micro in range(accum):
            batch = next(stream)
            if not isinstance(batch, Mapping):
                raise TypeError(
                    f"Trainer: a batch must be a mapping for model(**batch), got {type(batch).__name__}"
                )
            examples += count_examples(batch)  # counted before the move: no device synchronisation
            tokens += count_tokens(batch) or 0
            batch = move_to(batch, self.device)
            last = micro == accum - 1
            # Gradients are all-reduced once per step, on the last micro-batch (DDP's no_sync elsewhere).
            sync = self._ddp.no_sync() if self._ddp is not None and not last else contextlib.nullcontext()
            set_gradient_sync(self.model, last)  # FSDP's counterpart (nothing for other models)
            with sync:
                with self._autocast():
                    output = self._train_model(**batch)
                loss = get_loss(output)
                self.scaler.scale(loss.float() / accum).backward()
            loss_sum += loss.detach().double()
            for key, value in get_metrics(output).items():
                metric_sums[key] = metric_sums.get(key, 0.0) + float(value.detach())

        # One all-reduce per step carries the loss (for logging and the NaN check, identical on all
        # ranks so that they stop together), the counts and the stop flag of a signal seen by any rank.
        stop = 1.0 if self._stop_signal is not None else 0.0
        # The time budget travels the same way: ranks' clocks differ, the decision must not.
        spent = 1.0 if self._deadline is not None and time.monotonic() >= self._deadline else 0.0
        totals = torch.stack(
            [
                loss_sum,
                loss_sum.new_tensor(float(examples)),
                loss_sum.new_tensor(float(tokens)),
                loss_sum.new_tensor(stop),
                loss_sum.new_tensor(spent),
            ]
        )
        totals = all_reduce_sum(totals, self.context).tolist()
        loss_value = totals[0] / (accum * self.context.world_size)
        if not math.isfinite(loss_value):
            where = self.last_checkpoint or latest_checkpoint(self.checkpoint_root)
            raise NonFiniteLossError(
                f"loss is {loss_value} at step {self.step + 1} (of {self.total_steps}); "
                f"stopped before the update. Last good checkpoint: {where if where else 'none saved yet'}"
            )

        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm = None
        if cfg.clip_norm is not None:
            self.scaler.unscale_(self.optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        with warnings.catch_warnings():
            # fp16: a step skipped by the GradScaler makes LambdaLR warn about the call order; harmless.
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)`")
            self.scheduler.step()
        self.step += 1
        self.examples_seen += int(totals[1])
        self.tokens_seen += int(totals[2])
        # Under DDP, stop only on the flag every rank saw in this all-reduce: a signal that lands on one
        # rank after its contribution is acted on one step later by all ranks together (else the others
        # would hang in the next collective). One process stops at the boundary that follows the signal.
        self._stop_now = totals[3] > 0
        self._budget_spent = totals[4] > 0
        if self._stop_now and self._stop_signal is None:
            self._stop_signal = "stop on another rank"
        record: dict[str, Any] = {"step": self.step, "loss": loss_value, "lr": lr, "examples": int(totals[1])}
        record["tokens"] = int(totals[2])
        if grad_norm is not None:
            record["grad_norm"] = grad_norm
        if self.scaler.is_enabled():
            record["loss_scale"] = float(self.scaler.get_scale())
        for key, value in metric_sums.items():
            record[key] = value / accum  # this rank's mean over micro-batches
        return record

    # ------------------------------------------------------------------ the loop

    def train(self) -> TrainResult:
        """Run until ``total_steps`` optimizer steps (counting those before a resume), the time budget
        ``config.max_minutes`` of this invocation, or a signal."""
        cfg, ctx = self.config, self.context
        self._refuse_foreign_checkpoints()  # every rank: all stop alike, none waits in a collective
        if ctx.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.checkpoint_root)
            self._logger = RunLogger(self.output_dir, tensorboard=cfg.tensorboard)
        progress = self._progress = tqdm(
            total=self.total_steps,
            initial=self.step,
            desc="train",
            disable=not (ctx.is_main and cfg.progress_bar),
            dynamic_ncols=True,
        )
        self._stop_signal, self._stop_now, self._budget_spent = None, False, False
        self._deadline = time.monotonic() + 60.0 * cfg.max_minutes if cfg.max_minutes is not None else None
        self._train_model.train()
        self._clock = (time.perf_counter(), 0.0)  # (start of this train(), seconds spent evaluating since)
        stream = self._batch_stream()
        window: list[dict[str, Any]] = []
        window_start = time.perf_counter()
        interrupted = False
        saved_at = -1
        try:
            with self._signals_caught():
                while self.step < self.total_steps:
                    record = self._train_step(stream)
                    if cfg.log_every:
                        window.append(record)
                    progress.update(1)
                    for callback in self.callbacks:
                        callback(self, record)
                    stopping = self._stop_now or (not ctx.is_distributed and self._stop_signal is not None)
                    at_end = self.step == self.total_steps or self._budget_spent
                    if cfg.log_every and (self.step % cfg.log_every == 0 or stopping or at_end):
                        self._log_window(window, time.perf_counter() - window_start, progress)
                        window, window_start = [], time.perf_counter()
                    if self.eval_data is not None and cfg.eval_every and self.step % cfg.eval_every == 0:
                        self.evaluate()
                    if stopping or (cfg.save_every and self.step % cfg.save_every == 0):
                        self.save_checkpoint()
                        saved_at = self.step
                    if stopping:
                        interrupted = True
                        if ctx.is_main:
                            name = self._stop_name()
                            progress.write(
                                f"{name}: saved {self.last_checkpoint} at step {self.step}; stopping"
                            )
                        break
                    if self._budget_spent:  # a normal end: evaluated and saved below, as at total_steps
                        if ctx.is_main:
                            progress.write(f"time budget {cfg.max_minutes:g} min spent at step {self.step}")
                        break
            if not interrupted:
                if self.eval_data is not None and not (cfg.eval_every and self.step % cfg.eval_every == 0):
                    self.evaluate()
                if saved_at != self.step:
                    self.save_checkpoint()
        finally:
            progress.close()
            self._progress = None
            if self._logger is not None:
                self._logger.close()
                self._logger = None
                if cfg.plot:
                    plot_loss_curve(self.output_dir / LOG_FILE, self.output_dir / PLOT_FILE)
        return TrainResult(self.step, interrupted, self.last_checkpoint, dict(self.last_eval))

    def _log_window(self, window: list[dict[str, Any]], seconds: float, progress: tqdm) -> None:
        if not window:
            return
        record: dict[str, Any] = {"step": self.step, "epoch": round(self.epoch, 4)}
        keys = [k for k in window[-1] if k not in ("step", "examples", "tokens", "lr")]
        for key in keys:
            values = [r[key] for r in window if key in r]
            record[key] = sum(values) / len(values)
        record["lr"] = window[-1]["lr"]
        tokens = sum(r["tokens"] for r in window)
        record["examples_per_s"] = sum(r["examples"] for r in window) / max(seconds, 1e-9)
        if tokens:
            record["tokens_per_s"] = tokens / max(seconds, 1e-9)
        record["tokens_seen"] = self.tokens_seen
        record["train_seconds"] = self.train_seconds
        if self._logger is not None:
            self._logger.log(record, kind="train")
        postfix = {"loss": f"{record['loss']:.4f}", "lr": f"{record['lr']:.2e}"}
        if tokens:
            postfix["tok/s"] = f"{record['tokens_per_s']:.0f}"
        progress.set_postfix(postfix, refresh=False)

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Held-out evaluation on rank 0 (other ranks wait): a collective call under DDP.

        Returns ``eval_loss`` (mean of the batch losses weighted by examples per batch), with
        ``config.lm_perplexity`` also ``eval_perplexity`` = exp(loss weighted by predicted tokens: labels
        != -100 when the batch has labels, else examples), and whatever `metric_fn` returns. The global
        RNG state is restored afterwards, so evaluating does not change the training run.
        """
        data = self.eval_data if data is None else self._as_loader(data, None, train=False)
        if data is None:
            raise ValueError("Trainer.evaluate: no eval_data given")
        results: dict[str, float] = {}
        t0 = time.perf_counter()
        if self.context.is_main or is_sharded(self.model):  # FSDP's forward is collective: every rank
            results = evaluate_model(
                self.model, data, self.device, self.metric_fn, lm_perplexity=self.config.lm_perplexity,
                autocast=self._autocast,
            )  # fmt: skip
        if self.context.is_main:
            self.last_eval = results
            if self._logger is not None:
                self._logger.log({"step": self.step, "train_seconds": self.train_seconds, **results}, "eval")
        barrier(self.context)
        if self._clock is not None:
            self._clock = (self._clock[0], self._clock[1] + time.perf_counter() - t0)
        return results if self.context.is_main else {}

    @property
    def train_seconds(self) -> float:
        """Wall time of the current `train` call so far, less the time spent in `evaluate`: what a learning
        curve against time is drawn over (0.0 outside `train`)."""
        if self._clock is None:
            return 0.0
        return time.perf_counter() - self._clock[0] - self._clock[1]

    # ------------------------------------------------------------------ checkpoints

    def _training_state(self) -> dict[str, Any]:
        loader = self.train_loader
        if hasattr(loader, "state_dict"):
            loader_state = loader.state_dict()
        else:
            loader_state = {"epoch": self._plain_epoch, "position": self._plain_position}
        return {
            "step": self.step,
            "examples_seen": self.examples_seen,
            "tokens_seen": self.tokens_seen,
            "world_size": self.context.world_size,
            "layout": training_layout(self.model, self.context, getattr(loader, "batch_size", None)),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "loader": loader_state,
            "plain_loader": not hasattr(loader, "state_dict"),
        }

    def save_checkpoint(self) -> Path:
        """Save ``checkpoints/step-NNNNNN`` and prune old ones (collective under DDP and FSDP): rank 0
        writes the model and the state; a sharded model's shards are written by every rank
        (`attnlab.train.sharded_checkpoint.write_checkpoint`)."""
        rngs = all_gather_object(rng_state(), self.context)  # every rank's generators, in rank order
        module = unwrap_model(self.model)
        carried = None
        if hasattr(module, "carried_state"):  # every rank's own (see the module docstring), in rank order
            carried = all_gather_object(module.carried_state(), self.context)
        state = trainer_state = None
        if self.context.is_main:
            state = {**self._training_state(), "rng": rngs}
            if carried is not None:
                state["carried"] = carried
            trainer_state = self._trainer_state()
        path = self.checkpoint_root / checkpoint_name(self.step)
        write_checkpoint(
            path, self.model, self.optimizer, state, trainer_state, self.context, run_id=self.run_id,
            keep_last=self.config.keep_last,
        )  # fmt: skip
        self.last_checkpoint = path
        return path

    def _trainer_state(self) -> dict[str, Any]:
        """``trainer_state.json``: the counters and the config, for people and tools."""
        return {
            "step": self.step,
            "total_steps": self.total_steps,
            "epoch": self.epoch,
            "examples_seen": self.examples_seen,
            "tokens_seen": self.tokens_seen,
            "world_size": self.context.world_size,
            "interrupted_by": self._stop_name(),
            "last_eval": self.last_eval,
            "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_id": self.run_id,
            "config": self.config.to_dict(),
        }

    def _refuse_foreign_checkpoints(self) -> None:
        """A run that did not resume must not write beside another run's checkpoints: pruning would keep
        the stale ones (higher steps) and a later resume or average would pick them up."""
        if self._resumed:
            return
        foreign = [p for p in list_checkpoints(self.checkpoint_root) if checkpoint_run_id(p) != self.run_id]
        if foreign:
            names = ", ".join(p.name for p in foreign[-3:])
            raise ValueError(
                f"{self.checkpoint_root} holds checkpoints of another run ({names}, run id "
                f"{checkpoint_run_id(foreign[-1])}); resume it (--resume), remove them (--overwrite) or "
                "use another output directory"
            )

    def resume(self, checkpoint: str | Path = "latest", log: Callable[[str], None] | None = None) -> Path:
        """Restore weights, optimizer, scheduler, scaler, RNG, data position, counters and the run id.

        `checkpoint` is a checkpoint directory or ``"latest"``: the newest checkpoint under
        ``<output_dir>/checkpoints`` whose files verify against its manifest. A newer one that does not
        (damaged, truncated) is passed over; `log` (default: standard error, rank 0) says which checkpoint
        was taken and why, and `resume_notes` keeps the reasons. A named checkpoint that does not verify
        is an `IntegrityError`. Call before `train`; every rank calls it under DDP.
        """
        contents, failures = newest_readable_checkpoint(self.checkpoint_root, checkpoint)
        path = contents.path
        if failures:
            self.resume_notes = failures
            say = log or (lambda m: print(m, file=sys.stderr))
            if self.context.is_main:
                say(
                    f"resuming from {path.name}, the newest checkpoint that verifies; passed over "
                    f"{len(failures)} newer one(s):\n  " + "\n  ".join(failures)
                )
        self._apply_checkpoint(contents)
        return path

    def _apply_checkpoint(self, contents: CheckpointContents) -> None:
        path = contents.path
        state = restore_checkpoint(contents, self.model, self.optimizer, self.context)
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler.is_enabled():
            if not state["scaler"]:
                raise ValueError(f"{path}: precision='fp16' but the checkpoint holds no GradScaler state")
            self.scaler.load_state_dict(state["scaler"])
        loader = self.train_loader
        if hasattr(loader, "load_state_dict") and not state["plain_loader"]:
            loader.load_state_dict(loader_state_for(path, state, loader))
        else:
            self._plain_epoch = int(state["loader"]["epoch"])
            self._plain_position = int(state["loader"]["position"])
        rngs = state["rng"]
        if len(rngs) != self.context.world_size:
            warnings.warn(
                f"{path}: saved by {len(rngs)} process(es), resumed by {self.context.world_size}: RNG "
                "streams "
                "are restarted from rank 0's; the run will not replay exactly",
                stacklevel=3,
            )
        set_rng_state(rngs[self.context.rank] if self.context.rank < len(rngs) else rngs[0])
        module = unwrap_model(self.model)
        if hasattr(module, "load_carried_state") and "carried" in state:
            if len(state["carried"]) == self.context.world_size:
                module.load_carried_state(state["carried"][self.context.rank])
            else:  # another process's state does not fit this rank's data
                warnings.warn(
                    f"{path}: saved by {len(state['carried'])} process(es), resumed by "
                    f"{self.context.world_size}: the state carried between steps ({type(module).__name__}) "
                    "starts afresh; the run will not replay exactly",
                    stacklevel=3,
                )
        self.step = int(state["step"])
        self.examples_seen = int(state["examples_seen"])
        self.tokens_seen = int(state["tokens_seen"])
        self.last_checkpoint = path
        if contents.run_id is not None:
            self.run_id = contents.run_id
        self._resumed = True
