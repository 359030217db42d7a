"""The paper's training recipe (Vaswani et al. 2017, section 5) on attnlab's `Trainer`, and checkpoint
averaging.

- Optimiser (5.3): Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, no weight decay.
- Schedule (5.3, eq. 3): lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), warmup = 4000
  (``schedule="transformer"``, the optimiser's lr 1.0 multiplies it).
- Regularisation (5.4): dropout 0.1 and label smoothing 0.1 live in the model config.
- Batches (5.1): ~25000 source and 25000 target tokens (`TokenBatchLoader`).
- Averaging (6.1): "for the base models, we used a single model obtained by averaging the last 5
  checkpoints, which were written at 10-minute intervals" (big: last 20).

The run's model directory is written by `attnlab.io.save` (`attnlab.translation.family`: ``config.json``,
``model.safetensors``, ``tokenizer.json``, then ``manifest.json`` with their SHA-256 and the run id).
Averaging takes only checkpoints whose manifest carries the run's id: a stale run's checkpoints in the same
directory are never mixed in.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnlab.accel import optimize
from attnlab.atomic import write_json_atomic
from attnlab.io import save
from attnlab.manifest import MANIFEST_NAME, IntegrityError, add_to_manifest, verify_directory
from attnlab.tokenizers import Tokenizer
from attnlab.train import Trainer, TrainerConfig, list_checkpoints, set_seed
from attnlab.train.checkpoint import (
    CHECKPOINT_DIR,
    MODEL_FILE,
    checkpoint_run_id,
    latest_checkpoint,
    read_model_file,
)
from attnlab.train.distributed import barrier, broadcast_object, current_context
from attnlab.train.logging import LOG_FILE, PLOT_FILE
from attnlab.train.run_dir import prepare_run_directory
from attnlab.train.sharded import consolidated_model
from attnlab.train.sharded_checkpoint import is_sharded_checkpoint, read_sharded_weights

from .config import preset
from .data import (
    ParallelText,
    TokenBatchLoader,
    encode_pairs,
    encode_text,
    read_parallel,
    special_ids,
    train_joint_bpe,
)
from .decoding import translate_ids
from .model import Seq2Seq, build_model
from .plan import plan_for_minutes

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"


def paper_trainer_config(
    d_model: int,
    max_steps: int,
    output_dir: str | Path,
    warmup: int = 4000,
    lr_scale: float = 1.0,
    **overrides: Any,
) -> TrainerConfig:
    """`TrainerConfig` with the paper's Adam and schedule; ``lr_scale`` multiplies eq. (3) (1: the paper)."""
    settings: dict[str, Any] = dict(
        max_steps=max_steps,
        optimizer="adamw",
        weight_decay=0.0,  # plain Adam: AdamW without decay is Adam
        betas=(0.9, 0.98),
        eps=1e-9,
        lr=lr_scale,
        schedule="transformer",
        d_model=d_model,
        warmup=warmup,
        clip_norm=None,  # the paper does not clip
        output_dir=output_dir,
    )
    settings.update(overrides)
    return TrainerConfig(**settings)


# --------------------------------------------------------------------------- checkpoint averaging


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of state dicts with the same keys and shapes (accumulated in float64)."""
    if not states:
        raise ValueError("average_state_dicts: no state dicts given")
    keys = list(states[0])
    for i, s in enumerate(states[1:], start=1):
        if list(s) != keys and set(s) != set(keys):
            missing = sorted(set(keys) ^ set(s))[:5]
            raise ValueError(f"average_state_dicts: state {i} has different keys (e.g. {missing})")
    out = {}
    for k in keys:
        first = states[0][k]
        if not first.is_floating_point():
            out[k] = first.clone()
            continue
        total = torch.zeros(first.shape, dtype=torch.float64)
        for i, s in enumerate(states):
            if s[k].shape != first.shape:
                raise ValueError(
                    f"average_state_dicts: {k!r} is {tuple(s[k].shape)} in state {i}, "
                    f"not {tuple(first.shape)}"
                )
            total += s[k].double()
        out[k] = (total / len(states)).to(first.dtype)
    return out


def average_checkpoints(
    paths: Sequence[str | Path], template: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Average the weights of checkpoint directories (verified against their manifests first) or of
    ``model.safetensors`` files (verified when their directory has a manifest listing them). Sharded
    checkpoints (``parallel="fsdp"``) are read whole by this process, with ``template`` (the plain model's
    state dict) naming their tensors."""
    files: list[Path] = []
    sharded: list[dict[str, torch.Tensor]] = []
    for p in map(Path, paths):
        if p.is_dir() and is_sharded_checkpoint(p):
            if template is None:
                raise ValueError(f"{p}: a sharded checkpoint; averaging it needs the model's state dict")
            sharded.append(read_sharded_weights(p, template))
            continue
        if p.is_dir():
            manifest = verify_directory(p, [MODEL_FILE], required=True)
            if manifest is None or MODEL_FILE not in manifest.files:
                raise IntegrityError(f"{p / MANIFEST_NAME}: does not list {MODEL_FILE}")
            p = p / MODEL_FILE
        elif not p.is_file():
            raise FileNotFoundError(f"{p}: no such weights file")
        else:
            verify_directory(p.parent, [p.name])
        files.append(p)
    return average_state_dicts([*sharded, *(read_model_file(f) for f in files)])


def last_checkpoints(run_dir: str | Path, n: int, run_id: str | None = None) -> list[Path]:
    """The newest ``n`` checkpoints under ``run_dir/checkpoints`` (or ``run_dir`` itself), oldest first;
    with ``run_id``, only checkpoints of that run (the id in their manifest)."""
    run_dir = Path(run_dir)
    found = list_checkpoints(run_dir / CHECKPOINT_DIR) or list_checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(f"{run_dir}: no checkpoints (step-* directories) found")
    if n < 1:
        raise ValueError(f"number of checkpoints to average must be >= 1, got {n}")
    if run_id is not None:
        ours = [p for p in found if checkpoint_run_id(p) == run_id]
        if not ours:
            raise FileNotFoundError(
                f"{run_dir}: none of its checkpoints ({', '.join(p.name for p in found)}) belongs to "
                f"run {run_id}"
            )
        found = ours
    return found[-n:]


def load_averaged(model: Seq2Seq, paths: Sequence[str | Path]) -> None:
    """Load the average of checkpoints ``paths`` into ``model`` (ties preserved)."""
    state = model.state_dict()
    averaged = average_checkpoints(paths, template=state)
    missing = [k for k in state if k not in averaged]
    # Tied weights (shared embeddings) are saved under one name: fill the aliases from their source.
    for key in missing:
        tensor = state[key]
        source = next(
            (k for k, v in state.items() if k in averaged and v.data_ptr() == tensor.data_ptr()), None
        )
        if source is None:
            raise KeyError(f"averaged checkpoints have no {key!r}")
        averaged[key] = averaged[source]
    model.load_state_dict(averaged)


# --------------------------------------------------------------------------- the training entry


@dataclass
class TranslationRun:
    model_dir: Path
    steps: int
    report: dict[str, Any]


def train_translation(
    src_train: str | Path,
    tgt_train: str | Path,
    output_dir: str | Path,
    config_overrides: dict[str, Any] | None = None,
    preset_name: str = "transformer-base",
    vocab_size: int = 8000,
    max_length: int = 256,
    max_tokens: int = 4096,
    max_steps: int = 100_000,
    minutes: float | None = None,
    warmup: int = 4000,
    lr_scale: float = 1.0,
    average_last: int = 5,
    save_every: int = 1000,
    seed: int = 0,
    src_valid: str | Path | None = None,
    tgt_valid: str | Path | None = None,
    trainer_overrides: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    auto_steps: bool = False,
    warmup_share: float | None = None,
    log: Callable[[str], None] = print,
) -> TranslationRun:
    """Learn a joint BPE, train a Transformer with the paper's recipe, average the last checkpoints and write
    the model directory ``output_dir/model``. Returns its path, the steps done and a data report.

    ``output_dir`` holding an earlier run is an error unless ``resume`` (continue from its newest checkpoint
    that verifies, with its tokenizer) or ``overwrite`` (its outputs are removed first, the tokenizer is
    learned again). Only this run's checkpoints are averaged.

    With ``auto_steps`` and ``minutes``, ``max_steps`` and ``warmup`` are planned to fit the budget
    (`attnlab.translation.plan`; ``warmup_share``: ``warmup`` is a default, at most that share of the
    plan); the plan is kept in ``output_dir/plan.json`` so a resume rebuilds the
    same schedule."""
    started = time.monotonic()
    output_dir = Path(output_dir)
    data = encode_run_data(
        src_train, tgt_train, src_valid, tgt_valid, output_dir, vocab_size, max_length, resume, overwrite, log
    )
    model = build_run_model(data.tokenizer, preset_name, config_overrides, max_length, seed, log)
    ids, start_id, ctx = special_ids(data.tokenizer), model.config.start_token_id, current_context()
    loader = TokenBatchLoader(
        data.train.examples, max_tokens, ids["pad"], start_id, seed=seed, rank=ctx.rank,
        world_size=ctx.world_size,
    )  # fmt: skip
    eval_batches = None
    if data.valid is not None:
        valid = TokenBatchLoader(data.valid.examples, max_tokens, ids["pad"], start_id, shuffle=False)
        eval_batches = list(valid)
    trainer_settings = dict(  # at least 2 checkpoints kept: one to fall back to if the newest is damaged
        save_every=save_every, keep_last=max(average_last, 2), seed=seed, log_every=10, eval_every=0
    )
    if minutes is not None:
        trainer_settings["max_minutes"] = minutes  # ends normally at the first step after the budget
    trainer_settings.update(trainer_overrides or {})
    tconfig = paper_trainer_config(
        model.config.d_model, max_steps, output_dir, warmup, lr_scale, **trainer_settings
    )
    tconfig, callbacks = plan_schedule(
        model, loader, tconfig, output_dir, data.run_dir.resuming, minutes if auto_steps else None, warmup,
        started, warmup_share, log,
    )  # fmt: skip
    optimize(model, "training")  # oneDNN's products where they are faster (attnlab.accel)
    trainer = Trainer(
        model, tconfig, loader, eval_data=eval_batches, run_id=data.run_dir.run_id, callbacks=callbacks
    )
    if data.run_dir.resuming and latest_checkpoint(trainer.checkpoint_root) is not None:
        path = trainer.resume("latest", log=log)
        log(f"resumed from {path} (step {trainer.step})")
    result = trainer.train()
    if callbacks and ctx.is_main:  # a re-plan moved the end: a resume continues to where this run was heading
        replanned = {"max_steps": trainer.total_steps, "warmup": tconfig.warmup}
        write_json_atomic(replanned, output_dir / PLAN_FILE)
    return finish_run(model, trainer, result, data, loader, output_dir, average_last, log)


@dataclass
class RunData:
    """What `encode_run_data` read and encoded, with the claimed run directory and its tokenizer."""

    pairs: Any  # the training text (read_parallel)
    train: Any  # its encoded pairs
    valid: Any  # the encoded held-out pairs, or None
    tokenizer: Tokenizer
    run_dir: Any  # attnlab.train.run_dir.prepare_run_directory's answer


def encode_run_data(
    src_train: str | Path,
    tgt_train: str | Path,
    src_valid: str | Path | None,
    tgt_valid: str | Path | None,
    output_dir: Path,
    vocab_size: int,
    max_length: int,
    resume: bool,
    overwrite: bool,
    log: Callable[[str], None],
) -> RunData:
    """Read the parallel text, learn the joint BPE (a resumed run: its own tokenizer), claim the output
    directory and encode the pairs up to ``max_length`` tokens."""
    train = read_parallel(src_train, tgt_train)
    log(train.report())
    valid = read_parallel(src_valid, tgt_valid) if src_valid is not None and tgt_valid is not None else None
    learned = None
    if not (resume and (output_dir / TOKENIZER_FILE).is_file()):
        # the BPE is learned and applied before the output directory is claimed: a bad vocab_size, or
        # training or held-out data none of whose pairs fit max_length, fails before anything is written
        # and before --overwrite removes an earlier run
        learned = train_joint_bpe([*train.source, *train.target], vocab_size)
        encoded = encode_pairs(learned, train, max_length)
        valid_enc = encode_pairs(learned, valid, max_length) if valid is not None else None
    ctx = current_context()  # under torchrun: rank 0 claims the directory and writes the tokenizer
    run_dir = tokenizer = None
    if ctx.is_main:
        run_dir = prepare_run_directory(
            output_dir, "translate-train", RUN_OUTPUTS, resume=resume, overwrite=overwrite, log=log
        )
        tokenizer = _run_tokenizer(output_dir, learned, log)
    barrier(ctx)
    run_dir = broadcast_object(run_dir, ctx)
    if tokenizer is None:  # the other ranks: the same BPE, learned here or read back when resuming
        tokenizer = learned or Tokenizer.from_file(str(output_dir / TOKENIZER_FILE))
    if learned is None:  # resuming: the run's own tokenizer
        encoded = encode_pairs(tokenizer, train, max_length)
        valid_enc = encode_pairs(tokenizer, valid, max_length) if valid is not None else None
    log(f"{len(encoded)} training pairs, {encoded.too_long} filtered for more than {max_length} tokens")
    return RunData(train, encoded, valid_enc, tokenizer, run_dir)


def build_run_model(
    tokenizer: Tokenizer,
    preset_name: str,
    config_overrides: dict[str, Any] | None,
    max_length: int,
    seed: int,
    log: Callable[[str], None],
) -> Seq2Seq:
    """The preset with the tokenizer's vocabulary and special ids, and room for a maximal source and its
    output."""
    ids = special_ids(tokenizer)
    overrides = dict(config_overrides or {})
    overrides.update(
        vocab_size=tokenizer.vocab_size, pad_token_id=ids["pad"], bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
    )  # fmt: skip
    config = preset(preset_name, **overrides)
    if config.max_positions < max_length + 51:  # room for a maximal source and its output (source + 50)
        config = preset(preset_name, **{**overrides, "max_positions": max_length + 51})
    set_seed(seed)
    model = build_model(config)
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, {config.summary()}")
    return model


def plan_schedule(
    model: Seq2Seq,
    loader: TokenBatchLoader,
    tconfig: TrainerConfig,
    output_dir: Path,
    resuming: bool,
    minutes: float | None,
    warmup: int,
    started: float,
    warmup_share: float | None,
    log: Callable[[str], None],
) -> tuple[TrainerConfig, list[Callable[[Trainer, dict[str, Any]], None]]]:
    """A resumed run's recorded schedule (plan.json); with ``minutes`` (time-planned) the steps and warm-up
    that fit (`attnlab.translation.plan`), recorded for a resume, and the callbacks that keep the end on the
    clock; otherwise ``tconfig`` as it is."""
    plan_path = output_dir / PLAN_FILE
    if resuming and plan_path.is_file():  # the schedule the run was planned with
        saved = json.loads(plan_path.read_text())
        log(f"resuming the planned schedule: {saved['max_steps']} steps, warm-up {saved['warmup']}")
        planned = dataclasses.replace(tconfig, max_steps=int(saved["max_steps"]), warmup=int(saved["warmup"]))
        return planned, []
    if minutes is None or resuming:
        return tconfig, []
    plan = plan_for_minutes(
        model, loader, tconfig, minutes, warmup, started=started, log=log, warmup_share=warmup_share
    )
    write_json_atomic({"max_steps": plan.max_steps, "warmup": plan.warmup}, plan_path)
    return dataclasses.replace(tconfig, max_steps=plan.max_steps, warmup=plan.warmup), plan.callbacks


def finish_run(
    model: Seq2Seq,
    trainer: Trainer,
    result: Any,
    data: RunData,
    loader: TokenBatchLoader,
    output_dir: Path,
    average_last: int,
    log: Callable[[str], None],
) -> TranslationRun:
    """Average this run's last checkpoints into ``model``, save ``output_dir/model`` and the data report.
    Under torchrun rank 0 alone does it (a sharded model is gathered onto it first; the others return
    the paths without a report)."""
    ctx = trainer.context
    final = consolidated_model(model, ctx)  # sharded (FSDP): gathered once, onto rank 0; else model
    if final is None or not ctx.is_main:
        barrier(ctx)
        return TranslationRun(output_dir / "model", result.step, {})
    checkpoints = last_checkpoints(output_dir, average_last, run_id=trainer.run_id)
    if len(checkpoints) > 1:
        log(f"averaging {len(checkpoints)} checkpoints: {', '.join(p.name for p in checkpoints)}")
        load_averaged(final, checkpoints)
    model_dir = save(final.cpu(), output_dir / "model", run_id=trainer.run_id, tokenizer=data.tokenizer)
    report = {
        "lines": data.pairs.lines,
        "pairs": len(data.pairs),
        "skipped_empty": data.pairs.skipped_empty,
        "too_long": data.train.too_long,
        "batches_per_epoch": len(loader),
        "steps": result.step,
        "averaged": [p.name for p in checkpoints],
        "eval": result.eval_metrics,
    }
    write_json_atomic(report, output_dir / "data_report.json")
    barrier(ctx)
    return TranslationRun(model_dir, result.step, report)


# What a translate-train run writes in its output directory (`prepare_run_directory` guards them).
PLAN_FILE = "plan.json"  # a --minutes run's planned max_steps and warm-up, read back on resume
RUN_OUTPUTS = (CHECKPOINT_DIR, "model", TOKENIZER_FILE, MANIFEST_NAME, "data_report.json", PLAN_FILE)
RUN_OUTPUTS += (LOG_FILE, PLOT_FILE, "tensorboard")  # the Trainer's logs


def _run_tokenizer(output_dir: Path, learned: Tokenizer | None, log: Callable[[str], None]) -> Tokenizer:
    """The run's joint BPE: ``learned`` kept in ``output_dir/tokenizer.json`` (in the directory's manifest),
    or, when resuming (``learned`` None), read back from there after verifying it, so a resumed run keeps
    its ids."""
    path = output_dir / TOKENIZER_FILE
    if learned is None:
        verify_directory(output_dir, [TOKENIZER_FILE])
        log(f"resuming with the run's tokenizer {path}")
        return Tokenizer.from_file(str(path))
    learned.save(str(path))
    add_to_manifest(output_dir, [TOKENIZER_FILE])
    return learned


def translate_texts(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    beam_size: int = 4,
    alpha: float = 0.6,
    max_length_offset: int = 50,
    batch_size: int = 64,
) -> list[str]:
    """Translate sentences to detokenised text (``beam_size=1``: greedy). Empty inputs give empty outputs."""
    keep = [i for i, t in enumerate(texts) if t.strip()]
    sources = encode_text(tokenizer, [texts[i].strip() for i in keep])
    limit = model.config.max_positions
    for i, s in zip(keep, sources):
        if len(s) > limit:
            raise ValueError(f"input sentence {i + 1} has {len(s)} tokens, more than max_positions={limit}")
    hyps = translate_ids(model, sources, beam_size, alpha, max_length_offset, batch_size=batch_size)
    out = [""] * len(texts)
    for i, ids in zip(keep, hyps):
        out[i] = tokenizer.decode(ids)
    return out


@torch.no_grad()
def heldout_perplexity(
    model: Seq2Seq,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    max_tokens: int = 4096,
) -> float:
    """Teacher-forced perplexity per target subword (EOS included) of aligned sentences: ``exp`` of the plain
    negative log-likelihood, label smoothing left out (the paper's dev PPL is per wordpiece, as here)."""
    if len(sources) != len(targets):
        raise ValueError(
            f"heldout_perplexity: {len(sources)} source sentences but {len(targets)} targets; "
            "they must be aligned one to one"
        )
    kept = [(s.strip(), t.strip()) for s, t in zip(sources, targets) if s.strip() and t.strip()]
    text = ParallelText([s for s, _ in kept], [t for _, t in kept])
    pairs = encode_pairs(tokenizer, text, model.config.max_positions)  # longer pairs are left out
    ids = special_ids(tokenizer)
    loader = TokenBatchLoader(
        pairs.examples, max_tokens, ids["pad"], model.config.start_token_id, shuffle=False
    )
    device = next(model.parameters()).device
    was_training, nll_sum, tokens = model.training, 0.0, 0.0
    model.eval()
    try:
        for batch in loader.iter_epoch():
            metrics = model(**{k: v.to(device) for k, v in batch.items()}).metrics
            nll_sum += float(metrics["nll_loss"]) * float(metrics["target_tokens"])
            tokens += float(metrics["target_tokens"])
    finally:
        model.train(was_training)
    return math.exp(nll_sum / tokens)
