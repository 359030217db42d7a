"""The inputs of a pre-training run, one kind per objective, as objects the run's steps call.

- `MaskedInputs`: BERT-family instances (`PretrainingInstances` -> `MaskedDataset` -> `PretrainingCollator`),
  masked as the recipe says; held out: masked once at `EVAL_MASK_RATE`, scored by `MaskedLMMetric`.
- `CausalInputs`: a GPT's blocks of the token stream (`TokenBlocks` -> `BlockCollator`), next-token loss.
- `SegmentInputs`: Transformer-XL's parallel streams read in order, segment after segment (`StreamSegments`),
  so that the memory carried between steps holds the text before each segment.

Each gives the training loader of a length stage, the held-out loader, the metric, and the unigram guess on
the same held-out tokens (what the model must beat).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from attnlab.data import (
    MaskedDataset,
    Masker,
    PretrainingCollator,
    PretrainingInstances,
    ShardedCorpus,
    SpecialIds,
)
from attnlab.data.blocks import BlockCollator, TokenBlocks, TokenStream
from attnlab.data.protocol import vocab_size_of
from attnlab.data.streams import SegmentCollator, StreamSegments
from attnlab.pretraining.baselines import unigram_baseline, unigram_counts
from attnlab.pretraining.causal_lm import CausalLMMetric, eos_id_of
from attnlab.pretraining.metrics import MaskedLMMetric
from attnlab.pretraining.recipes import Recipe
from attnlab.train import ResumableLoader, TrainerConfig
from attnlab.train.distributed import DistributedContext

# Held-out MLM accuracy and perplexity are measured with BERT's 15% of the tokens masked (Devlin et al.
# 2019, 3.1), whatever the recipe trains with.
EVAL_MASK_RATE = 0.15

Collate = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]  # examples -> a batch of tensors


class BatchFilter:
    """The collator, then drop the fields the model does not take (picklable, for loader workers)."""

    def __init__(self, collator: PretrainingCollator, drop: Sequence[str] = ()) -> None:
        self.collator, self.drop = collator, tuple(drop)

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collator(items)
        for key in self.drop:
            batch.pop(key, None)
        return batch


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
    boundary = recipe.objective == "sbo"  # span masking under plain MLM: no span-boundary targets
    return MaskedDataset(instances, masker, seed=seed, static=static, boundary_targets=boundary)


def heldout_segments(
    corpus: ShardedCorpus, tokenizer: Any, segment_length: int, streams: int, examples: int
) -> torch.utils.data.Subset:
    """Transformer-XL's held-out set: the held-out stream cut into at most ``streams`` parallel streams (as
    many as hold a segment, at most ``examples``), their first segments up to ``examples`` in all, in
    reading order (a loader of ``num_streams`` per batch reads segment k of every stream at batch k). Every
    token after each stream's first is scored once, the memory carried from segment to segment."""
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


class RunInputs:
    """The loaders, metric and baseline of one run (see the module docstring); subclasses say how the
    training data of a stage and the held-out set are cut, and how batches are collated."""

    shuffle = True
    collate: Collate

    def __init__(
        self,
        recipe: Recipe,
        tokenizer: Any,
        train_corpus: ShardedCorpus,
        heldout_corpus: ShardedCorpus,
        tconfig: TrainerConfig,
        ctx: DistributedContext,
        *,
        seed: int,
    ) -> None:
        self.recipe, self.tokenizer, self.seed, self.ctx = recipe, tokenizer, seed, ctx
        self.train_corpus, self.heldout_corpus, self.tconfig = train_corpus, heldout_corpus, tconfig
        self.longest = max(s.max_length for s in recipe.stages)

    def train_data(self, stage: int) -> torch.utils.data.Dataset:
        raise NotImplementedError

    def heldout_data(self, examples: int) -> tuple[torch.utils.data.Dataset, int]:
        """The held-out set and its batch size."""
        raise NotImplementedError

    def train_loader(self, stage: int) -> ResumableLoader:
        """Length stage ``stage``'s batches, this rank's share."""
        return ResumableLoader(
            self.train_data(stage), self.tconfig.batch_size, self.collate, seed=self.seed,
            shuffle=self.shuffle, drop_last=True, rank=self.ctx.rank, world_size=self.ctx.world_size,
            num_workers=self.tconfig.num_workers,
        )  # fmt: skip

    def eval_loader(self, examples: int) -> ResumableLoader:
        data, batch_size = self.heldout_data(examples)
        return ResumableLoader(data, batch_size, self.collate, shuffle=False)

    def metric(self) -> Any:
        return CausalLMMetric()

    def baseline(self, eval_loader: ResumableLoader, vocab_size: int) -> dict[str, float]:
        """The unigram guess on the held-out tokens ``eval_loader`` scores, as ``eval_unigram_*``."""
        counts = unigram_counts(self.train_corpus, vocab_size, self.unscored_ids())
        found = unigram_baseline(counts, self.scored_labels(eval_loader))
        return {f"eval_{k}": v for k, v in found.items()}

    def unscored_ids(self) -> Sequence[int]:
        """Token ids never predicted, left out of the unigram counts."""
        return ()

    def scored_labels(self, eval_loader: ResumableLoader) -> Iterable[dict[str, Any]]:
        # every token is predicted (end-of-text too), from the second of each block on
        return ({"labels": b["labels"][:, 1:]} for b in eval_loader.iter_epoch(0))


class MaskedInputs(RunInputs):
    """BERT-family instances, masked as the recipe says (see the module docstring)."""

    def __init__(self, *args: Any, drop: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pad = SpecialIds.from_tokenizer(self.tokenizer).pad
        self.collate = BatchFilter(PretrainingCollator(pad), drop)

    def train_data(self, stage: int) -> torch.utils.data.Dataset:
        return masked_dataset(self.recipe, self.train_corpus, self.tokenizer, stage, seed=self.seed)

    def heldout_data(self, examples: int) -> tuple[torch.utils.data.Dataset, int]:
        data = heldout_set(self.recipe, self.heldout_corpus, self.tokenizer, examples, seed=self.seed)
        return data, self.tconfig.batch_size

    def metric(self) -> Any:
        return MaskedLMMetric()

    def unscored_ids(self) -> Sequence[int]:
        return SpecialIds.from_tokenizer(self.tokenizer).all

    def scored_labels(self, eval_loader: ResumableLoader) -> Iterable[dict[str, Any]]:
        return eval_loader.iter_epoch(0)  # the masked tokens (labels != -100)


class CausalInputs(RunInputs):
    """A GPT's blocks of the token stream, shuffled; held out: the first blocks, cut at offset 0."""

    collate: Collate = BlockCollator()

    def train_data(self, stage: int) -> torch.utils.data.Dataset:
        length = self.recipe.stages[stage].max_length
        return TokenBlocks(self.train_corpus, length, eos_id_of(self.tokenizer), seed=self.seed)

    def heldout_data(self, examples: int) -> tuple[torch.utils.data.Dataset, int]:
        blocks = TokenBlocks(self.heldout_corpus, self.longest, eos_id_of(self.tokenizer), shift=False)
        return torch.utils.data.Subset(blocks, range(min(examples, len(blocks)))), self.tconfig.batch_size


class SegmentInputs(RunInputs):
    """Transformer-XL's segments in order: batch k is segment k of this rank's streams
    (`attnlab.data.streams`); held out: the first segments of the held-out stream's parallel streams."""

    shuffle = False
    collate: Collate = SegmentCollator()

    def train_data(self, stage: int) -> torch.utils.data.Dataset:
        streams = self.tconfig.batch_size * self.ctx.world_size
        length = self.recipe.stages[stage].max_length
        return StreamSegments(self.train_corpus, streams, length, eos_id_of(self.tokenizer))

    def heldout_data(self, examples: int) -> tuple[torch.utils.data.Dataset, int]:
        data = heldout_segments(
            self.heldout_corpus, self.tokenizer, self.longest, self.tconfig.batch_size, examples
        )
        return data, data.dataset.num_streams

    def scored_labels(self, eval_loader: ResumableLoader) -> Iterable[dict[str, Any]]:
        return ({"labels": b["targets"]} for b in eval_loader.iter_epoch(0))


def inputs_for(
    recipe: Recipe,
    config: Any,
    tokenizer: Any,
    train_corpus: ShardedCorpus,
    heldout_corpus: ShardedCorpus,
    tconfig: TrainerConfig,
    ctx: DistributedContext,
    *,
    seed: int,
) -> RunInputs:
    """The `RunInputs` of ``recipe``'s objective (``config``: the model's, whose token types decide
    whether batches carry them)."""
    args = (recipe, tokenizer, train_corpus, heldout_corpus, tconfig, ctx)
    if recipe.segment_recurrence:
        return SegmentInputs(*args, seed=seed)
    if recipe.objective == "clm":
        return CausalInputs(*args, seed=seed)
    drop = [] if config.type_vocab_size > 0 else ["token_type_ids"]
    return MaskedInputs(*args, seed=seed, drop=drop)
