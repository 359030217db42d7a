"""A pre-training run end to end, composed from the library's pieces.

    corpus ─► tokenizer (given, or trained: attnlab.tokenizers.train_tokenizer)
           ─► shards (attnlab.data.prepare_shards; train and held-out documents apart, cached in the output)
           ─► PretrainingInstances ─► MaskedDataset ─► PretrainingCollator ─► ResumableLoader
           ─► model (EncoderForPreTraining / SpanBertForPreTraining / ElectraPreTrainer)
    (a causal LM, objective "clm": shards ─► TokenBlocks ─► BlockCollator ─► GPT; pretraining.causal_lm)
    (with segment recurrence, Transformer-XL: shards ─► StreamSegments ─► SegmentCollator, read in order
     ─► SegmentRecurrence(TransfoXL), the memory carried between steps; pretraining.transfo_xl)
           ─► attnlab.train.Trainer, once per length stage (BERT's 128 -> 512)
           ─► OUTPUT/model (attnlab checkpoint + tokenizer files), OUTPUT/hf (HF transformers layout)

Output directory::

    tokenizer/            the tokenizer (trained here unless given)
    data/train, data/heldout   prepared shards (reused when the corpus and tokenizer are unchanged)
    train/ (train/stage-N with several length stages)   the Trainer's checkpoints, log.jsonl,
                          TensorBoard events and loss_curve.png
    model/                the final model (ELECTRA: the discriminator; GPT: a causal-LM directory for
                          `attnlab generate`; Transformer-XL: attnlab.io.families.transfo_xl's directory for
                          `attnlab perplexity`) and tokenizer files
    generator/            ELECTRA only: the generator, a masked LM usable by fill-mask
    hf/                   the same model in HF transformers' layout, where it can be exported
    run.json              recipe, model config, steps, held-out metrics

Held-out evaluation: every ``heldout_every``-th document is set aside before preparation; the held-out
instances are masked once (static, seeded) and scored for MLM accuracy and perplexity over masked tokens
(a causal LM: next-token loss, perplexity and accuracy over the held-out blocks; Transformer-XL: over the
held-out stream read in order, segment after segment with the memory carried, every token scored once).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab.accel import optimize
from attnlab.atomic import write_json_atomic
from attnlab.data import (
    MaskedDataset,
    Masker,
    PretrainingCollator,
    PretrainingInstances,
    ShardedCorpus,
    SpecialIds,
    prepare_shards,
    read_documents,
)
from attnlab.data.blocks import BlockCollator, TokenBlocks
from attnlab.data.streams import SegmentCollator, StreamSegments
from attnlab.manifest import new_run_id, write_manifest
from attnlab.models import (
    EncoderConfig,
    EncoderForPreTraining,
    ReplacedTokenDetection,
    count_parameters,
    get_preset,
)
from attnlab.models.gpt import GPT, GPTConfig, build_gpt
from attnlab.models.transfo_xl import TransfoXLConfig, build_transfo_xl
from attnlab.nn.embeddings import Embeddings
from attnlab.pretraining.baselines import unigram_baseline, unigram_counts
from attnlab.pretraining.causal_lm import (
    CausalLMMetric,
    eos_id_of,
    gpt_config,
    save_causal_lm_run,
    train_causal_tokenizer,
)
from attnlab.pretraining.distillation import DistillationPreTrainer
from attnlab.pretraining.electra import ElectraPreTrainer, generator_config
from attnlab.pretraining.masked_lm import MaskedLMPreTrainer
from attnlab.pretraining.recipes import Recipe
from attnlab.pretraining.span_boundary import SpanBertForPreTraining
from attnlab.pretraining.transfo_xl import SegmentRecurrence, save_transfo_xl_run, transfo_xl_config
from attnlab.train import ResumableLoader, Trainer, TrainerConfig, latest_checkpoint, set_seed
from attnlab.train.config import resolve_warmup
from attnlab.train.distributed import all_gather_object, barrier, current_context
from attnlab.train.run_dir import RUN_FILE, read_run_file

# Held-out MLM accuracy and perplexity are measured with BERT's 15% of the tokens masked (Devlin et al.
# 2019, 3.1), whatever the recipe trains with.
EVAL_MASK_RATE = 0.15

DocumentSource = Callable[[], Iterable[list[str]]]  # a fresh stream of documents per call


# ----------------------------------------------------------------------------------------- models


ModelConfig = EncoderConfig | GPTConfig | TransfoXLConfig


def model_config(recipe: Recipe, preset: str | ModelConfig, tokenizer: Any, **overrides: Any) -> ModelConfig:
    """The encoder config: the preset with the tokenizer's vocabulary and padding id, the recipe's dropout,
    a pooler only for NSP/SOP, room for the longest stage, the recipe's architecture (ALBERT's sharing and
    factorised embeddings at any size), then ``overrides`` (EncoderConfig fields). A causal LM (objective
    "clm"): the GPT preset's config (`attnlab.pretraining.causal_lm.gpt_config`); with segment recurrence the
    Transformer-XL preset's (`attnlab.pretraining.transfo_xl.transfo_xl_config`)."""
    from attnlab.data.protocol import vocab_size_of

    if recipe.segment_recurrence:
        segment = max(s.max_length for s in recipe.stages)
        return transfo_xl_config(preset, tokenizer, segment, recipe.dropout, **overrides)  # type: ignore[arg-type]
    if recipe.objective == "clm":
        longest = max(s.max_length for s in recipe.stages)
        return gpt_config(preset, tokenizer, longest, recipe.dropout, **overrides)  # type: ignore[arg-type]

    config = get_preset(preset) if isinstance(preset, str) else preset
    special = SpecialIds.from_tokenizer(tokenizer)
    longest = max(s.max_length for s in recipe.stages)
    offset = special.pad + 1 if config.position_offset > 0 else 0  # RoBERTa numbers positions after <pad>
    config = dataclasses.replace(
        config,
        vocab_size=vocab_size_of(tokenizer),
        pad_token_id=special.pad,
        position_offset=offset,
        max_position_embeddings=max(config.max_position_embeddings - config.position_offset, longest)
        + offset,
        hidden_dropout=recipe.dropout,
        attention_dropout=recipe.dropout,
        add_pooler=recipe.has_pair_head,
    )
    if recipe.sharing is not None:
        config = dataclasses.replace(config, sharing=recipe.sharing)
    if recipe.embedding_size is not None:
        config = dataclasses.replace(
            config, embedding_size=min(recipe.embedding_size, config.hidden_size // 2)
        )
    if overrides:
        known = {f.name for f in dataclasses.fields(EncoderConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"model: unknown EncoderConfig field(s) {', '.join(unknown)}")
        config = dataclasses.replace(config, **overrides)
    return config


def build_pretraining_model(recipe: Recipe, config: ModelConfig) -> nn.Module:
    """The module the Trainer runs for ``recipe.objective`` (BERT-initialised, GPT-2-initialised for a causal
    LM; seed before calling)."""
    if isinstance(config, TransfoXLConfig):  # the memory between steps lives around the model
        return SegmentRecurrence(build_transfo_xl(config))
    if isinstance(config, GPTConfig):  # objective "clm": GPT's own forward takes labels and returns the loss
        return build_gpt(config)
    if recipe.objective == "electra":
        generator = EncoderForPreTraining.from_config(generator_config(config, recipe.generator_fraction))
        discriminator = ReplacedTokenDetection.from_config(config)
        return ElectraPreTrainer(generator, discriminator, rtd_weight=recipe.rtd_weight)
    if recipe.objective == "sbo":
        return SpanBertForPreTraining.from_config(config, max_positions=recipe.sbo_max_positions)
    return MaskedLMPreTrainer(EncoderForPreTraining.from_config(config, pair_head=recipe.has_pair_head))


def final_model(model: nn.Module) -> nn.Module:
    """What is kept after pre-training: the masked LM (without SBO head) or ELECTRA's discriminator."""
    if isinstance(model, ElectraPreTrainer):
        return model.discriminator_only()
    if isinstance(model, SpanBertForPreTraining):
        return model.mlm_only()
    if isinstance(model, (MaskedLMPreTrainer, DistillationPreTrainer, SegmentRecurrence)):
        return model.model  # distillation: the student (the teacher is not kept); Transformer-XL: no memory
    return model


def masked_lm_of(model: nn.Module) -> EncoderForPreTraining:
    """The masked LM inside a pre-training model (ELECTRA: the generator)."""
    if isinstance(model, ElectraPreTrainer):
        return model.generator
    if isinstance(model, (SpanBertForPreTraining, MaskedLMPreTrainer, DistillationPreTrainer)):
        return final_model(model)
    if isinstance(model, EncoderForPreTraining):
        return model
    raise TypeError(f"{type(model).__name__} holds no masked LM")


# ----------------------------------------------------------------------------------------- metrics


class MaskedLMMetric:
    """Streaming held-out MLM accuracy and perplexity over the masked tokens (``labels != -100``).

    Reads ``output.mlm_logits`` (B, T, V) with ``batch["labels"]``, or logits gathered at the predicted
    positions (M, V) with ``output.mlm_labels`` (M,) (`MaskedLMPreTrainer`, SpanBERT, ELECTRA).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.correct = self.count = 0
        self.nll = 0.0

    def update(self, output: Any, batch: dict[str, torch.Tensor]) -> None:
        logits = output.mlm_logits
        if logits.dim() == 3:
            labels = batch["labels"]
            keep = labels != -100
            logits, labels = logits[keep], labels[keep]  # (M, V), (M,)
        else:
            labels = output.mlm_labels
        if labels.numel() == 0:
            return
        logits = logits.float()
        self.nll += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        self.correct += int((logits.argmax(-1) == labels).sum())
        self.count += int(labels.numel())

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            return {}
        return {
            "mlm_accuracy": self.correct / self.count,
            "mlm_perplexity": math.exp(min(self.nll / self.count, 700.0)),
            "mlm_tokens": float(self.count),
        }


# ----------------------------------------------------------------------------------------- data


class BatchFilter:
    """The collator, then drop the fields the model does not take (picklable, for loader workers)."""

    def __init__(self, collator: PretrainingCollator, drop: Sequence[str] = ()) -> None:
        self.collator, self.drop = collator, tuple(drop)

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collator(items)
        for key in self.drop:
            batch.pop(key, None)
        return batch


def corpus_documents(paths: Sequence[str | os.PathLike], fmt: str = "sentences") -> DocumentSource:
    """A document source over files (see `attnlab.data.read_documents`; sentences are split by the
    preparation workers)."""
    paths = [str(p) for p in paths]
    return lambda: read_documents(paths, fmt, split=False)


def _every(source: DocumentSource, keep: Callable[[int], bool]) -> Iterator[list[str]]:
    for i, doc in enumerate(source()):
        if keep(i):
            yield doc


def split_rule(n_documents: int, heldout_every: int, min_heldout: int = 2) -> int:
    """The k such that documents i with i % k == k - 1 are held out: ``heldout_every``, lowered so that at
    least ``min_heldout`` documents are held out while as many stay for training."""
    if n_documents < 2 * min_heldout:
        raise ValueError(
            f"the corpus has {n_documents} documents; at least {2 * min_heldout} are needed to hold out "
            f"{min_heldout} for evaluation (NSP also needs 2 documents on each side)"
        )
    return max(2, min(heldout_every, n_documents // min_heldout))


def _fingerprint(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def prepare_corpus(
    source: DocumentSource,
    tokenizer: Any,
    out_dir: str | os.PathLike,
    *,
    source_key: Any,
    heldout_every: int = 20,
    workers: int | None = None,
    log: Callable[[str], None] = print,
) -> tuple[ShardedCorpus, ShardedCorpus]:
    """Prepare (or reuse) ``out_dir/train`` and ``out_dir/heldout``. ``source_key`` identifies the corpus
    (e.g. its files, sizes and modification times): shards are reused when it and the tokenizer match."""
    from attnlab.data.protocol import tokenizer_fingerprint

    out = Path(out_dir)
    manifest_path = out / "manifest.json"
    key = {
        "source": source_key,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "heldout_every": heldout_every,
    }
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            manifest = {}  # a damaged cache record: prepare again (the shards are rewritten)
            log(f"{manifest_path}: not valid JSON; preparing the shards again")
        if manifest.get("key") == _fingerprint(key):
            log(f"reusing prepared shards in {out} ({manifest['train_tokens']:,} training tokens)")
            return ShardedCorpus(out / "train", tokenizer), ShardedCorpus(out / "heldout", tokenizer)
    n_docs = sum(1 for _ in source())
    k = split_rule(n_docs, heldout_every)
    t0 = time.perf_counter()
    reports = {}
    for name, keep in (("train", lambda i: i % k != k - 1), ("heldout", lambda i: i % k == k - 1)):
        reports[name] = prepare_shards(
            _every(source, keep), tokenizer, out / name, workers=workers, overwrite=True
        )
    train, heldout = reports["train"], reports["heldout"]
    log(
        f"prepared {train.tokens:,} training tokens ({train.documents} documents) and {heldout.tokens:,} "
        f"held-out tokens ({heldout.documents} documents) in {time.perf_counter() - t0:.1f}s "
        f"({train.tokens_per_second:,.0f} tokens/s)"
    )
    manifest = {
        "key": _fingerprint(key),
        "documents": n_docs,
        "heldout_every": k,
        "train_tokens": train.tokens,
        "heldout_tokens": heldout.tokens,
        "tokens_per_second": train.tokens_per_second,
    }
    write_json_atomic(manifest, manifest_path, indent=1)
    return ShardedCorpus(out / "train", tokenizer), ShardedCorpus(out / "heldout", tokenizer)


def masked_dataset(
    recipe: Recipe,
    corpus: ShardedCorpus,
    tokenizer: Any,
    stage: int,
    *,
    seed: int,
    heldout: bool = False,
    copies: int = 1,
) -> MaskedDataset:
    """Instances of ``recipe`` at length stage ``stage``, masked as the recipe says (held-out data: masked
    once, statically, with no duplicates, at `EVAL_MASK_RATE` whatever rate the recipe trains with, so that
    held-out accuracies of recipes that mask more, e.g. 30-40% in Wettig et al. 2023, stay comparable;
    ``copies`` differently masked copies of a small held-out set make the figure less noisy)."""
    from attnlab.data.protocol import vocab_size_of

    special = SpecialIds.from_tokenizer(tokenizer)
    s = recipe.stages[stage]
    static = recipe.static_masking or heldout
    instances = PretrainingInstances(
        corpus,
        special,
        recipe.instance_format,
        max_length=s.max_length,
        short_seq_prob=recipe.short_seq_prob,
        seed=seed,
        dupe_factor=copies if heldout else recipe.dupe_factor,
        static=static,
        template=recipe.template,
    )
    masking = dataclasses.replace(recipe.masking, max_predictions=s.max_predictions)
    if heldout:
        masking = dataclasses.replace(masking, rate=EVAL_MASK_RATE)
    masker = Masker(masking, special.mask, vocab_size_of(tokenizer), special.all)
    return MaskedDataset(instances, masker, seed=seed, static=static)


def heldout_segments(
    corpus: ShardedCorpus, tokenizer: Any, segment_length: int, streams: int, examples: int
) -> torch.utils.data.Subset:
    """Transformer-XL's held-out set: the held-out stream cut into at most ``streams`` parallel streams (as
    many as hold a segment, at most ``examples``), their first segments up to ``examples`` in all, in
    reading order (a loader of ``num_streams`` per batch reads segment k of every stream at batch k). Every
    token after each stream's first is scored once, the memory carried from segment to segment."""
    from attnlab.data.blocks import TokenStream

    tokens = TokenStream(corpus, eos_id_of(tokenizer))
    fit = max(1, (len(tokens) - 1) // (segment_length + 1))  # streams that hold a segment each
    data = StreamSegments(tokens, min(streams, fit, examples), segment_length)
    n = data.num_streams
    return torch.utils.data.Subset(data, range(min(examples, len(data)) // n * n))


def heldout_set(
    recipe: Recipe, corpus: ShardedCorpus, tokenizer: Any, examples: int, *, seed: int
) -> torch.utils.data.Dataset:
    """The held-out evaluation set of a run: up to ``examples`` sequences of the held-out documents at the
    last stage's length, masked once (static, seed + 1); a held-out set smaller than ``examples`` is masked
    in several differently masked copies (at most 10), so that the accuracy is measured on more tokens."""
    last = len(recipe.stages) - 1
    data = masked_dataset(recipe, corpus, tokenizer, last, seed=seed + 1, heldout=True)
    if len(data) < examples:
        copies = min(10, -(-examples // max(1, len(data))))
        data = masked_dataset(recipe, corpus, tokenizer, last, seed=seed + 1, heldout=True, copies=copies)
    return torch.utils.data.Subset(data, range(min(examples, len(data))))


# ----------------------------------------------------------------------------------------- the run


MIN_USEFUL_STEPS = 200  # fewer leave a masked LM on the unigram plateau (measured: ~300 steps to leave it)


def size_warnings(train_tokens: int, vocab_size: int, parameters: int) -> list[str]:
    """What is wrong with a corpus too small for its vocabulary or model, with the numbers."""
    out = []
    if train_tokens < 50 * vocab_size:
        out.append(
            f"the corpus has {train_tokens:,} training tokens for a vocabulary of {vocab_size:,}: each token "
            f"is seen {train_tokens / vocab_size:.0f} times on average, too few to learn it; a vocabulary of "
            f"at most {max(100, train_tokens // 50):,} (--vocab-size) or a larger corpus fits"
        )
    # Several epochs of a small corpus are fine (the main job: 0.75M parameters, 0.4M tokens, 20 epochs in
    # 4 minutes, 43% held-out accuracy); ten times more parameters than tokens is not.
    if parameters > 10 * train_tokens:
        out.append(
            f"the model has {parameters:,} parameters for {train_tokens:,} training tokens: it can memorise "
            "the corpus rather than learn the language; a smaller model (--preset) or a larger corpus fits"
        )
    return out


@dataclass
class PretrainResult:
    output_dir: Path
    model_dir: Path
    steps: int
    seconds: float
    eval_metrics: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    model: nn.Module | None = None  # the pre-training module (all heads), in memory
    tokenizer: Any = None


TIME_LIMIT = "time limit"
REPLAN_AT = (0.1, 0.3, 0.5, 0.7, 0.85)  # fractions of a time-budgeted run's first plan where it re-plans


def _silent(message: str) -> None:
    pass


def time_limit(deadline: float) -> Callable[[Trainer, dict[str, Any]], None]:
    """A Trainer callback ending the run at the first step boundary after ``deadline`` (time.monotonic):
    the trainer saves a checkpoint there and returns (`Trainer.request_stop`, safe under DDP)."""

    def callback(trainer: Trainer, record: dict[str, Any]) -> None:
        if time.monotonic() >= deadline:
            trainer.request_stop(TIME_LIMIT)

    return callback


def start_stage_positions(model: nn.Module, recipe: Recipe, k: int, log: Callable[[str], None]) -> None:
    """Before length stage ``k``: with ``recipe.stage_positions == "copy"``, the learned positions beyond the
    longest earlier stage start as copies of those it trained (`Embeddings.tile_positions`), in every
    embedding table of ``model`` (ELECTRA has two)."""
    trained = max(s.max_length for s in recipe.stages[:k])
    length = recipe.stages[k].max_length
    if recipe.stage_positions == "keep" or length <= trained:
        return
    tiled = [m.tile_positions(trained, length) for m in model.modules() if isinstance(m, Embeddings)]
    if any(tiled):
        log(f"positions {trained}-{length - 1} start as copies of positions 0-{trained - 1}")


@dataclass(frozen=True)
class StagePlan:
    """A schedule in length stages, for `replan_steps`: stage k takes ``fractions[k]`` of the steps at
    ``costs[k]`` seconds a step (measured before training; only their ratios are used), and
    ``ends(n)`` gives each stage's last step when the run has n steps (`Recipe.stage_ends`)."""

    fractions: tuple[float, ...]
    costs: tuple[float, ...]
    ends: Callable[[int], list[int]]

    def stage_of(self, step: int, total: int) -> int:
        """The stage that step ``step`` (1-based) belongs to in a run of ``total`` steps."""
        ends = self.ends(total)
        return next((k for k, end in enumerate(ends) if step <= end), len(ends) - 1)

    def steps_that_fit(self, stage: int, step: int, seconds: float, per_step: float) -> int:
        """Total steps N such that the rest of ``stage`` (from ``step``, at ``per_step`` seconds) and the
        later stages (at ``per_step`` times their cost ratio) take ``seconds``: N (C + sum_j>k f_j r_j) =
        step + seconds / per_step, C the stages' fractions up to ``stage``."""
        done = sum(self.fractions[: stage + 1])
        later = sum(
            f * c / self.costs[stage]
            for f, c in zip(self.fractions[stage + 1 :], self.costs[stage + 1 :])
        )
        return int((step + seconds / per_step) / (done + later))


def replan_steps(
    deadline: float,
    at_step: int | Sequence[int],
    on_change: Callable[[Trainer], None] = lambda trainer: None,
    log: Callable[[str], None] = print,
    reserve: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    stages: StagePlan | None = None,
) -> Callable[[Trainer, dict[str, Any]], None]:
    """A Trainer callback that re-plans the run's length at step ``at_step`` (or at each of several steps)
    from its own measured step time, so that the learning-rate schedule ends when ``deadline``
    (time.monotonic) comes.

    `estimate_steps` times a few steps of a copy of the model before training; on the books it overstated
    the step time by 15-25% (the first steps of a process are slower), and 30-minute runs ended 6 minutes
    early with the learning rate already at zero. The step time also changes during a run when other work
    shares the cores: a single re-plan at 10% left 4-minute runs on a loaded machine stopped by the clock at
    85% of their schedule, the learning rate still high. So at each re-plan step the time per step is
    measured over the steps since the previous one (the first window starts at the end of the first step),
    ``reserve`` of the time left is kept for the final evaluation and save, and `Trainer.set_total_steps`
    moves the end. Every rank takes the smallest plan (one all-gather per re-plan step, where all ranks
    are). ``on_change(trainer)`` is called after a change (to record it); ``clock`` is the time source
    (``deadline`` is on its scale).

    With ``stages`` (a schedule in length stages, e.g. BERT's 90% at 128 / 10% at 512 tokens) the measured
    step time is the current stage's; the later stages' are scaled by their cost ratios measured before
    training, the whole schedule's length moves, and the current trainer stops at its stage's new end. A
    window that spans two stages is not used (its steps cost two prices); the next one starts afresh."""
    points = sorted({at_step} if isinstance(at_step, int) else set(at_step))
    state: dict[str, float] = {}

    def callback(trainer: Trainer, record: dict[str, Any]) -> None:
        if "t0" not in state:
            state["t0"], state["s0"] = clock(), trainer.step
            return
        if trainer.step not in points:
            return
        now = clock()
        per_step = (now - state["t0"]) / max(1, trainer.step - state["s0"])
        first = int(state["s0"]) + 1  # the window's first step
        state["t0"], state["s0"] = now, trainer.step  # the next window starts here
        seconds = (1.0 - reserve) * (deadline - now)
        total = trainer.config.max_steps or trainer.total_steps  # the schedule's length
        if stages is None:
            steps = trainer.step + max(0, int(seconds / per_step))
        else:
            stage = stages.stage_of(trainer.step, total)
            if stages.stage_of(first, total) != stage:
                return
            fit = stages.steps_that_fit(stage, trainer.step, max(0.0, seconds), per_step)
            steps = max(trainer.step, fit)
        steps = min(all_gather_object(steps, trainer.context))
        if abs(steps - total) <= 0.02 * total:
            return
        stop = None  # a single stage stops at the schedule's end; a stage of several at its own new end
        if stages is not None:
            stop = max(trainer.step, stages.ends(steps)[stages.stage_of(trainer.step, total)])
        log(
            f"re-planned at step {trainer.step}: {per_step:.3f} s a step here, so {steps} steps fit "
            f"(planned {total})"
        )
        trainer.set_total_steps(steps, stop)
        on_change(trainer)

    return callback


def _time_steps(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list, accum: int) -> float:
    """Median seconds of one optimizer step over ``batches`` (after one untimed step)."""
    times = []
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        for _ in range(accum):
            model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] if times else 1.0


def estimate_step_time(
    model: nn.Module,
    loader: ResumableLoader,
    tconfig: TrainerConfig,
    probe_steps: int = 6,  # 5 timed steps; with 3, 30-minute book runs ended about a third early
    log: Callable[[str], None] = print,
    choose_threads: bool = True,
) -> float:
    """Seconds of one optimizer step: times ``probe_steps`` steps of a copy of the model (after one warm-up
    step) on the first batches of ``loader``, with the run's optimizer settings.

    On CPU (with ``choose_threads``) it also times one thread against torch's default and keeps the faster,
    for the rest of the process: on a machine whose cores are busy with other work, torch's threads wait on
    each other at every operation (measured 20x slower with 2 threads than with 1 on a loaded 2-core
    machine), while on an idle one more threads win.
    """
    from attnlab.train import build_optimizer

    probe = copy.deepcopy(model)
    probe.train()
    optimizer = build_optimizer(probe, tconfig)
    batches = []
    for batch in loader.iter_epoch(0):
        batches.append(batch)
        if len(batches) > probe_steps:
            break
    threads = torch.get_num_threads()
    per_step = _time_steps(probe, optimizer, batches, tconfig.grad_accum_steps)
    on_cpu = next(model.parameters()).device.type == "cpu" and tconfig.device in ("auto", "cpu")
    if choose_threads and on_cpu and threads > 1 and not torch.cuda.is_available():
        torch.set_num_threads(1)
        single = _time_steps(probe, optimizer, batches, tconfig.grad_accum_steps)
        if single < per_step:
            log(f"one thread is faster here than {threads} ({single:.2f}s against {per_step:.2f}s a step)")
            per_step = single
        else:
            torch.set_num_threads(threads)
    return per_step


def estimate_steps(
    model: nn.Module,
    loader: ResumableLoader,
    tconfig: TrainerConfig,
    seconds: float,
    probe_steps: int = 6,
    log: Callable[[str], None] = print,
) -> int:
    """How many optimizer steps fit in ``seconds`` (`estimate_step_time` on ``loader``'s batches); keeps
    10% in reserve."""
    per_step = estimate_step_time(model, loader, tconfig, probe_steps, log)
    return max(1, int(0.9 * seconds / per_step))


def estimate_stage_steps(
    model: nn.Module,
    loaders: Sequence[ResumableLoader],
    fractions: Sequence[float],
    tconfig: TrainerConfig,
    seconds: float,
    probe_steps: int = 6,
    log: Callable[[str], None] = print,
) -> tuple[int, list[float]]:
    """Total optimizer steps N of a schedule in length stages (stage k: ``fractions[k]`` of the steps on
    ``loaders[k]``'s sequences) that fit in ``seconds``: each stage's step time t_k is measured on its own
    batches, and N = 0.9 x seconds / sum_k(fractions[k] x t_k).

    Timing the first stage alone planned BERT's 90% at 128 / 10% at 512 tokens as if every step were a short
    one: the long steps cost several times more, so the clock stopped such a run before its schedule's end,
    with the learning rate still high and the long stage cut short. The thread count is chosen on the
    first stage and kept for the others, which are timed on 2 steps (BERT-base's 512-token steps cost
    seconds each on a CPU). Returns N and the stages' seconds a step."""
    times = [  # the later (longer) stages are timed on 2 steps: their steps are few and cost the most
        estimate_step_time(model, loader, tconfig, probe_steps if k == 0 else 2, log, choose_threads=k == 0)
        for k, loader in enumerate(loaders)
    ]
    per_step = sum(f * t for f, t in zip(fractions, times))
    if len(times) > 1:
        shown = ", ".join(f"{t:.3f}" for t in times)
        log(f"seconds a step by length stage: {shown}; {per_step:.3f} on average over the schedule")
    return max(1, int(0.9 * seconds / per_step)), times


def _save_tokenizer(tokenizer: Any, directory: Path, recipe: Recipe, max_length: int) -> None:
    from attnlab.io.format import read_json
    from attnlab.io.hf_tokenizer import hf_tokenizer_config
    from attnlab.tokenizers.files import save_vocab_files

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(directory)
    try:
        save_vocab_files(tokenizer, directory)
    except (ValueError, TypeError, AttributeError):
        pass  # a Unigram tokenizer has no vocab.txt / merges.txt form; tokenizer.json holds it
    # the class HF rebuilds this exact tokenizer with (AlbertTokenizerFast for Unigram, ...), its options;
    # the WordPiece class follows the HF family the model directory took (attnlab.io.hf_layout), if any
    model_config = directory / "config.json"
    family = read_json(model_config).get("hf_family") if model_config.is_file() else None
    config = hf_tokenizer_config(tokenizer, family, model_max_length=max_length)
    write_json_atomic(config, directory / "tokenizer_config.json", indent=1)


def pretrain(
    recipe: Recipe,
    tokenizer: Any,
    train_corpus: ShardedCorpus,
    heldout_corpus: ShardedCorpus,
    output_dir: str | os.PathLike,
    *,
    preset: str | EncoderConfig | None = None,
    model_overrides: dict[str, Any] | None = None,
    trainer_overrides: dict[str, Any] | None = None,
    minutes: float | None = None,
    auto_steps: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    eval_examples: int = 1024,
    seed: int = 0,
    run_id: str | None = None,
    log: Callable[[str], None] = print,
    model: nn.Module | None = None,
) -> PretrainResult:
    """Train ``recipe`` on prepared shards and save the final model; see the module docstring.

    ``minutes`` stops at the first step boundary after that much training time (the model is still
    evaluated and saved); with ``auto_steps`` the run's ``max_steps`` is first set to what fits in it, so
    that the learning-rate schedule ends when time does. ``resume`` continues from the newest checkpoints;
    without it, checkpoints of an earlier run in ``output_dir`` are an error unless ``overwrite`` (then they
    are deleted). ``run_id`` (default: the resumed run's, or a new one) goes into run.json, every
    checkpoint's manifest and the saved model's (`attnlab.manifest`), so that no other run's files are taken
    for this one's. ``model``: a pre-training module built by the caller instead of the recipe's (its
    ``config`` is the saved model's; `attnlab.pretraining.distillation.DistillationPreTrainer`).
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = current_context()
    old_checkpoints = sorted((out / "train").glob("**/checkpoints/step-*"))
    if old_checkpoints and not resume and not overwrite:
        raise ValueError(
            f"{out / 'train'} holds checkpoints of an earlier run ({old_checkpoints[-1].name}); "
            "resume it (--resume) or start again (--overwrite, or another --output)"
        )
    t_start = time.monotonic()
    deadline = t_start + 60.0 * minutes if minutes is not None else None
    trainer_overrides = dict(trainer_overrides or {})
    run_path = out / RUN_FILE
    info = read_run_file(out) or {}  # the earlier run's plan, or what the CLI's claim wrote
    previous = info if resume else {}
    run_id = run_id or (info.get("run_id") if resume else None) or new_run_id()
    if info.get("run_id") != run_id:
        info = {}  # an earlier run's record, not this run's

    if model is None:
        config = model_config(recipe, preset or recipe.preset, tokenizer, **(model_overrides or {}))
        set_seed(seed)
        model = build_pretraining_model(recipe, config)
    else:  # built by the caller (attnlab distill: the student around its frozen teacher)
        config = model.config
    for warning in size_warnings(train_corpus.n_tokens, config.vocab_size, count_parameters(model)):
        log(f"warning: {warning}")
    causal = recipe.objective == "clm"  # GPT: blocks of the token stream, next-token loss
    recurrent = recipe.segment_recurrence  # Transformer-XL: the stream's segments in order, memory carried
    longest = max(s.max_length for s in recipe.stages)
    if recurrent:
        collate: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]] = SegmentCollator()
    elif causal:
        collate = BlockCollator()
    else:
        drop = [] if config.type_vocab_size > 0 else ["token_type_ids"]
        collate = BatchFilter(PretrainingCollator(SpecialIds.from_tokenizer(tokenizer).pad), drop)
    base = recipe.trainer_config(output_dir=out / "train", seed=seed, **trainer_overrides)

    def loader(stage: int) -> ResumableLoader:
        if recurrent:  # in order: batch k is segment k of this rank's streams (attnlab.data.streams)
            streams = base.batch_size * ctx.world_size
            length = recipe.stages[stage].max_length
            segments = StreamSegments(train_corpus, streams, length, eos_id_of(tokenizer))
            return ResumableLoader(
                segments, base.batch_size, collate, seed=seed, shuffle=False, drop_last=True,
                rank=ctx.rank, world_size=ctx.world_size, num_workers=base.num_workers,
            )  # fmt: skip
        if causal:
            length = recipe.stages[stage].max_length
            data: Any = TokenBlocks(train_corpus, length, eos_id_of(tokenizer), seed=seed)
        else:
            data = masked_dataset(recipe, train_corpus, tokenizer, stage, seed=seed)
        return ResumableLoader(
            data, base.batch_size, collate, seed=seed, shuffle=True, drop_last=True,
            rank=ctx.rank, world_size=ctx.world_size, num_workers=base.num_workers,
        )  # fmt: skip

    replan = False
    prepared: dict[int, ResumableLoader] = {}  # stage loaders built to time the steps, reused by the stages
    stage_costs: list[float] = []  # their measured seconds a step
    if "max_steps" in previous:
        recipe = dataclasses.replace(recipe, max_steps=int(previous["max_steps"]))
    elif auto_steps and minutes is not None:
        fractions = [stage.fraction for stage in recipe.stages]
        prepared = {k: loader(k) for k in range(len(fractions))}
        seconds = 60.0 * minutes - (time.monotonic() - t_start)
        steps, stage_costs = estimate_stage_steps(
            model, list(prepared.values()), fractions, base, seconds, log=log
        )
        steps = min(all_gather_object(steps, ctx))  # every rank must run the same schedule
        log(f"{steps} steps of {base.batch_size} sequences fit in {minutes:g} minutes here")
        if steps < MIN_USEFUL_STEPS:
            log(
                f"warning: {steps} steps are too few to learn anything: a masked LM needs a few hundred "
                f"before it predicts more than the most frequent tokens; give it more time than {minutes:g} "
                "minutes (--minutes) or a smaller model (--preset)"
            )
        recipe = dataclasses.replace(recipe, max_steps=steps)
        replan = True
    # The schedule's plan, kept in run.json so that a resumed run rebuilds the same schedule. The warm-up is
    # in absolute steps: a re-plan (replan_steps) moves max_steps, not the warm-up.
    warmup = previous.get("warmup_steps", resolve_warmup(base.warmup, recipe.max_steps))
    if warmup > recipe.max_steps and base.schedule in ("linear", "cosine"):  # they decay after the warm-up
        where = f"in {minutes:g} minutes here" if minutes is not None and auto_steps else "planned"
        raise ValueError(
            f"warm-up: the recipe's {warmup} warm-up steps do not fit in the {recipe.max_steps} steps "
            f"{where}; give more time (--minutes) or steps (--max-steps), or a shorter warm-up "
            "(--set warmup=0.05 for 5% of the steps)"
        )
    if old_checkpoints and not resume:  # --overwrite, once the model and the schedule are known to be good
        if ctx.is_main:
            shutil.rmtree(out / "train")
        barrier(ctx)
    plan = {"max_steps": recipe.max_steps, "warmup_steps": int(warmup)}
    base = dataclasses.replace(base, max_steps=recipe.max_steps, warmup=plan["warmup_steps"])
    if not ctx.is_main:
        log = _silent

    def write_plan(**extra: Any) -> None:
        if ctx.is_main:
            config_dict = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
            info.update(run_id=run_id, recipe=recipe.to_dict(), model_config=config_dict)
            info.update(**plan, **extra)
            write_json_atomic(json.loads(json.dumps(info, default=str)), run_path, indent=1)

    write_plan()

    # eval data: held-out documents, masked once (a causal LM: their first blocks, cut at offset 0;
    # Transformer-XL: the first segments of the held-out stream's parallel streams, in order)
    if recurrent:
        eval_set: Any = heldout_segments(heldout_corpus, tokenizer, longest, base.batch_size, eval_examples)
        eval_batch = eval_set.dataset.num_streams
    elif causal:
        blocks = TokenBlocks(heldout_corpus, longest, eos_id_of(tokenizer), shift=False)
        eval_set = torch.utils.data.Subset(blocks, range(min(eval_examples, len(blocks))))
    else:
        eval_set = heldout_set(recipe, heldout_corpus, tokenizer, eval_examples, seed=seed)
    if not recurrent:
        eval_batch = base.batch_size
    eval_loader = ResumableLoader(eval_set, eval_batch, collate, shuffle=False)
    metric: Any = CausalLMMetric() if causal else MaskedLMMetric()
    callbacks = [time_limit(deadline)] if deadline is not None else []
    if replan and deadline is not None and recipe.max_steps >= 40:

        def record_plan(trainer: Trainer) -> None:
            plan["max_steps"] = trainer.config.max_steps  # the schedule's length (a stage may stop before)
            write_plan()

        stage_plan = None
        if len(recipe.stages) > 1:
            stage_plan = StagePlan(
                tuple(s.fraction for s in recipe.stages), tuple(stage_costs), recipe.stage_ends
            )
        points = [max(10, int(f * recipe.max_steps)) for f in REPLAN_AT]
        callbacks.append(replan_steps(deadline, points, record_plan, log, stages=stage_plan))

    multi = len(recipe.stages) > 1
    trainer: Trainer | None = None
    end = 0
    interrupted = False
    evaluated = False  # Trainer.train evaluates at its end, unless stopped early
    for k in range(len(recipe.stages)):
        # the stage ends of the current plan: a re-plan in an earlier stage moved them
        end = recipe.stage_ends(plan["max_steps"])[k]
        stage_dir = out / "train" / f"stage-{k + 1}" if multi else out / "train"
        cfg = dataclasses.replace(base, output_dir=stage_dir, max_steps=plan["max_steps"])
        previous_trainer = trainer
        optimize(model, "training")  # oneDNN's products where they are faster (attnlab.accel)
        trainer = Trainer(
            model, cfg, prepared.pop(k) if k in prepared else loader(k), eval_data=eval_loader,
            metric_fn=metric, callbacks=callbacks,
            run_id=run_id,
            optimizer=previous_trainer.optimizer if previous_trainer else None,
            scheduler=previous_trainer.scheduler if previous_trainer else None,
        )  # fmt: skip
        trainer.total_steps = end  # the schedule spans all stages; this stage stops at its end
        if previous_trainer is not None:  # continue the step count, optimizer and schedule of the last stage
            trainer.step = previous_trainer.step
            trainer.examples_seen, trainer.tokens_seen = (
                previous_trainer.examples_seen,
                previous_trainer.tokens_seen,
            )
        resumed = resume and latest_checkpoint(trainer.checkpoint_root) is not None
        if resumed:
            path = trainer.resume()
            log(f"resumed from {path} (step {trainer.step})")
        if trainer.step >= end:
            evaluated = False
            continue  # this stage finished in an earlier run
        if previous_trainer is not None and not resumed:  # the stage starts here (a resumed one started)
            start_stage_positions(model, recipe, k, log)
        if multi:
            log(f"stage {k + 1}/{len(recipe.stages)}: length {recipe.stages[k].max_length}, steps to {end}")
        result = trainer.train()
        evaluated = not result.interrupted
        if result.interrupted:  # a signal or the time limit: the checkpoint is saved, the rest skipped
            interrupted = True
            break
    assert trainer is not None
    # decided alike on every rank (only rank 0 holds last_eval): evaluate is a collective call under DDP
    eval_metrics = dict(trainer.last_eval) if evaluated else trainer.evaluate()
    if ctx.is_main and eval_metrics:  # what the model must beat, on the same masked (or predicted) tokens
        if causal:  # every token is predicted (end-of-text too), from the second of each block on
            counts = unigram_counts(train_corpus, config.vocab_size)
            batches: Iterable[dict[str, Any]] = (
                {"labels": b["targets"] if recurrent else b["labels"][:, 1:]}
                for b in eval_loader.iter_epoch(0)
            )
        else:
            counts = unigram_counts(train_corpus, config.vocab_size, SpecialIds.from_tokenizer(tokenizer).all)
            batches = eval_loader.iter_epoch(0)
        baseline = unigram_baseline(counts, batches)
        eval_metrics.update({f"eval_{k}": v for k, v in baseline.items()})
    timed_out = deadline is not None and time.monotonic() >= deadline
    model_dir = out / "model"
    if ctx.is_main:
        save_final(model, tokenizer, recipe, out, config, log, run_id=run_id)
    barrier(ctx)
    summary = {
        "steps": trainer.step,
        "interrupted": interrupted and not timed_out,
        "stopped_by_time_limit": interrupted and timed_out,
        "eval": eval_metrics,
        "seconds": time.monotonic() - t_start,
    }
    write_plan(**summary)
    return PretrainResult(
        output_dir=out,
        model_dir=model_dir,
        steps=trainer.step,
        seconds=time.monotonic() - t_start,
        eval_metrics=eval_metrics,
        interrupted=interrupted and not timed_out,
        model=model,
        tokenizer=tokenizer,
    )


def save_final(
    model: nn.Module,
    tokenizer: Any,
    recipe: Recipe,
    out: Path,
    config: ModelConfig,
    log: Callable[[str], None] = print,
    *,
    run_id: str | None = None,
) -> Path:
    """OUTPUT/model (attnlab), OUTPUT/generator (ELECTRA) and OUTPUT/hf (HF transformers, where the model
    has an HF class; otherwise ``log`` says why not) with tokenizers. A GPT: OUTPUT/model as a causal-LM
    directory (attnlab.io.families.gpt2) and OUTPUT/hf as HF GPT-2 (attnlab.io.hf_gpt2). A Transformer-XL:
    OUTPUT/model as attnlab.io.families.transfo_xl's directory (weights, no memory), no OUTPUT/hf."""
    from attnlab.io import save

    if isinstance(config, GPTConfig):
        return _save_final_gpt(model, tokenizer, out, log, run_id=run_id)
    if isinstance(config, TransfoXLConfig):
        shutil.rmtree(out / "hf", ignore_errors=True)  # no stale export of an earlier run
        log("no HF transformers export: transformers 5 has no Transformer-XL class")
        return save_transfo_xl_run(model, tokenizer, out / "model", run_id=run_id)

    max_length = config.max_sequence_length
    kept = final_model(model)
    model_dir = save(kept, out / "model", run_id=run_id)
    _save_tokenizer(tokenizer, model_dir, recipe, max_length)
    write_manifest(model_dir, run_id=run_id)  # weights, config and tokenizer files, verified on load
    if isinstance(model, ElectraPreTrainer):
        save(model.generator, out / "generator", run_id=run_id)
        _save_tokenizer(tokenizer, out / "generator", recipe, max_length)
        write_manifest(out / "generator", run_id=run_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "HF ... has no pooler": said in the export's config
            save(kept, out / "hf", hf=True, tokenizer=tokenizer)  # tokenizer_config: HF rebuilds it
    except (ValueError, TypeError) as e:
        shutil.rmtree(out / "hf", ignore_errors=True)  # no stale export of an earlier run
        log(f"no HF transformers export: {' '.join(str(e).split())}")
    return model_dir


def _save_final_gpt(
    model: GPT, tokenizer: Any, out: Path, log: Callable[[str], None], *, run_id: str | None
) -> Path:
    from attnlab.io import save

    model_dir = save_causal_lm_run(model, tokenizer, out / "model", run_id=run_id)
    try:
        save(model, out / "hf", hf=True)
        tokenizer.save(out / "hf")
    except (ValueError, TypeError) as e:
        shutil.rmtree(out / "hf", ignore_errors=True)
        log(f"no HF transformers export: {' '.join(str(e).split())}")
    return model_dir


def document_texts(source: DocumentSource, max_chars: int | None = None) -> Iterator[str]:
    """The documents of ``source`` as texts (one line per sentence or paragraph), up to ``max_chars``."""
    total = 0
    for doc in source():
        text = "\n".join(doc)
        yield text
        total += len(text)
        if max_chars is not None and total >= max_chars:
            return


def train_or_load_tokenizer(
    recipe: Recipe,
    source: DocumentSource,
    directory: str | os.PathLike,
    *,
    vocab_size: int | None = None,
    min_frequency: int | None = None,
    sample_chars: int | None = 50_000_000,
    log: Callable[[str], None] = print,
) -> Any:
    """The tokenizer saved in ``directory`` if there is one; otherwise the recipe's kind trained on (the first
    ``sample_chars`` characters of) the corpus and saved there. ``min_frequency`` None: chosen for WordPiece
    (see below), the trainer's default otherwise."""
    from attnlab.tokenizers import load_tokenizer
    from attnlab.tokenizers.trainers import train_tokenizer

    d = Path(directory)
    if (d / "tokenizer.json").is_file():
        return load_tokenizer(d)
    t0 = time.perf_counter()
    target = vocab_size or recipe.vocab_size
    adaptive = min_frequency is None and recipe.tokenizer == "wordpiece"
    if adaptive:
        # attnlab's WordPiece trainer ranks pairs by freq(ab) / (freq(a) freq(b)), which puts the merges of
        # frequent words last: when the vocabulary fills up before the merges run out, "the" stays "th ##e"
        # (seen on the books and the stdlib docstrings). So the pair threshold starts at 10 and rises until
        # the trainer stops on its own below the requested size (a smaller, whole-word vocabulary).
        min_frequency = 10
    if recipe.objective == "clm":  # characters, or byte-level BPE with <|endoftext|> (GPT-2's)
        tokenizer = train_causal_tokenizer(recipe.tokenizer, source, target, sample_chars)
        _save_tokenizer(tokenizer, d, recipe, max(s.max_length for s in recipe.stages))
        log(f"trained a {recipe.tokenizer} tokenizer of {tokenizer.get_vocab_size():,} tokens -> {d}")
        return tokenizer
    texts = list(document_texts(source, sample_chars))
    for _ in range(6):
        tokenizer = train_tokenizer(
            recipe.tokenizer,
            iter(texts),
            target,
            lowercase=recipe.lowercase,
            min_frequency=min_frequency,
            show_progress=False,
        )
        if not adaptive or tokenizer.get_vocab_size() < target:
            break
        min_frequency *= 3
    _save_tokenizer(tokenizer, d, recipe, max(s.max_length for s in recipe.stages))
    log(
        f"trained a {recipe.tokenizer} tokenizer of {tokenizer.get_vocab_size():,} tokens in "
        f"{time.perf_counter() - t0:.1f}s (min_frequency {min_frequency}) -> {d}"
    )
    return tokenizer


def files_key(paths: Sequence[str | os.PathLike], fmt: str) -> dict[str, Any]:
    """What identifies a file corpus for the shard cache: every file's path, size and modification time."""
    from attnlab.data import list_files

    return {
        "format": fmt,
        "files": [
            (str(p), p.stat().st_size, int(p.stat().st_mtime)) for p in list_files([str(p) for p in paths])
        ],
    }
