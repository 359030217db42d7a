"""`ResumableLoader`: batches from a map-style dataset that can stop anywhere and continue exactly.

The order of epoch ``e`` is a permutation drawn from ``numpy.random.default_rng([seed, e])``: it depends
on nothing but (seed, epoch), so a resumed run sees the same order as an uninterrupted one. The state is
``(epoch, position)``, position = batches already handed out in that epoch; loading it skips the consumed
batches by index arithmetic without reading their items.

Sharding (DDP): the epoch's order is cut to a multiple of ``world_size`` (drop_last) or padded by wrapping
around, and rank r takes every world_size-th index from r (as `torch.utils.data.DistributedSampler`).
Batch k of every rank together is then exactly the examples of batch k of a single process with
``world_size`` times the batch size: the two runs see the same global batches.

Length grouping (``lengths``; HF's ``group_by_length``): padded batches cost the time of their longest
example, so the epoch's permutation is cut into chunks of ``group_chunk`` global batches, each chunk sorted by
length and cut into global batches, and the full batches are shuffled (the short last one stays last).
Batches then hold examples of similar length (less padding) while every example is still read once an epoch
in an order drawn from (seed, epoch) alone: resume and sharding work as above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate


class ResumableLoader:
    """Shuffled, sharded, resumable batches over a dataset with ``__len__`` and ``__getitem__``.

    Args:
        dataset: map-style dataset of examples.
        batch_size: examples per batch on this rank.
        collate_fn: list of examples -> batch (default `torch.utils.data.default_collate`).
        seed: the epoch order is a function of (seed, epoch) only.
        shuffle: permute each epoch; otherwise read in index order.
        drop_last: drop the incomplete last batch (and the tail that does not divide among ranks);
            otherwise the last batch is short and the shard is padded by wrapping around.
        rank, world_size: this process's shard.
        lengths: each example's length (e.g. tokens); given, a shuffled epoch is length-grouped (above).
        group_chunk: global batches per sorted chunk of a length-grouped epoch (HF's megabatches: 50).
        num_workers: 0 reads in this process; > 0 uses a `DataLoader` with worker processes whose
            random seeds come from (seed, epoch) rather than from the global torch RNG.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        lengths: Sequence[int] | None = None,
        group_chunk: int = 50,
        num_workers: int = 0,
    ) -> None:
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"ResumableLoader: dataset must have __len__ and __getitem__, got {type(dataset).__name__}"
            )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"ResumableLoader.batch_size: expected a positive int, got {batch_size!r}")
        if not isinstance(world_size, int) or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"ResumableLoader: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}"
            )
        if num_workers < 0:
            raise ValueError(f"ResumableLoader.num_workers: expected >= 0, got {num_workers}")
        if lengths is not None and len(lengths) != len(dataset):
            raise ValueError(
                f"ResumableLoader.lengths: {len(lengths)} lengths for a dataset of {len(dataset)} examples"
            )
        if not isinstance(group_chunk, int) or group_chunk < 1:
            raise ValueError(f"ResumableLoader.group_chunk: expected a positive int, got {group_chunk!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn or default_collate
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.lengths = None if lengths is None else np.asarray(lengths)
        self.group_chunk = group_chunk
        self.epoch = 0
        self.position = 0  # batches of self.epoch already handed out
        if len(self) == 0:
            processes = f" per process over {world_size} processes" if world_size > 1 else ""
            raise ValueError(
                f"{len(dataset)} examples are fewer than one batch of {batch_size}{processes}: give more "
                "data or a smaller batch (--batch-size)"
            )

    # --- sizes
    def _shard_size(self) -> int:
        n = len(self.dataset)
        return n // self.world_size if self.drop_last else math.ceil(n / self.world_size)

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        per_rank = self._shard_size()
        return per_rank // self.batch_size if self.drop_last else math.ceil(per_rank / self.batch_size)

    # --- order
    def epoch_indices(self, epoch: int) -> np.ndarray:
        """This rank's example indices for `epoch`, in reading order: (len(self) * batch_size,) or fewer."""
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(n)
            if self.lengths is not None:
                global_batch = self.batch_size * self.world_size
                rng = np.random.default_rng([self.seed, epoch, 2])
                order = group_by_length(order, self.lengths, global_batch, self.group_chunk, rng)
        else:
            order = np.arange(n)
        per_rank = self._shard_size()
        total = per_rank * self.world_size
        if total > n:  # pad by wrapping around so that every rank gets per_rank indices
            order = np.concatenate([order, order[: total - n]])
        shard = order[:total][self.rank :: self.world_size]
        if self.drop_last:
            shard = shard[: len(self) * self.batch_size]
        return shard

    def _batches_of(self, epoch: int, start: int) -> list[list[int]]:
        indices = self.epoch_indices(epoch).tolist()
        b = self.batch_size
        return [indices[i : i + b] for i in range(start * b, len(indices), b)]

    # --- iteration
    def _read(self, epoch: int, batches: list[list[int]]) -> Iterator[Any]:
        # Datasets whose items depend on the epoch (dynamic masking, NSP draws: attnlab.data) are told
        # which epoch they serve before any item is read; workers copy the dataset after this call.
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
        if self.num_workers == 0:
            return (self.collate_fn([self.dataset[i] for i in idx]) for idx in batches)
        generator = torch.Generator()
        generator.manual_seed(int(np.random.default_rng([self.seed, epoch, 1]).integers(2**62)))
        return iter(
            DataLoader(
                self.dataset,
                batch_sampler=batches,
                collate_fn=self.collate_fn,
                num_workers=self.num_workers,
                generator=generator,  # worker seeds must not consume the global RNG (exact resume)
            )
        )

    def iter_epoch(self, epoch: int = 0) -> Iterator[Any]:
        """All batches of `epoch` without touching the loader's state (for evaluation passes)."""
        return self._read(epoch, self._batches_of(epoch, 0))

    def __iter__(self) -> Iterator[Any]:
        """Yield the rest of the current epoch, then advance to the next epoch.

        The position counts batches *handed to the caller*, so prefetching by workers does not move it.
        """
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        epoch = self.epoch
        source = self._read(epoch, self._batches_of(epoch, self.position))
        for batch in source:
            self.position += 1
            yield batch
        if self.epoch == epoch and self.position >= len(self):
            self.epoch, self.position = epoch + 1, 0

    # --- state
    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from ``state["epoch"], state["position"]``; the consumed batches are not read again."""
        for key in ("epoch", "position"):
            if key not in state or not isinstance(state[key], int) or state[key] < 0:
                raise ValueError(
                    f"ResumableLoader.load_state_dict: {key!r} must be an int >= 0, got {state.get(key)!r}"
                )
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(
                f"ResumableLoader.load_state_dict: the state was saved with seed={state['seed']}, "
                f"this loader has seed={self.seed}: the epoch order would differ"
            )
        if state.get("world_size", self.world_size) != self.world_size:
            raise ValueError(
                f"ResumableLoader.load_state_dict: state saved with world_size={state['world_size']}, "
                f"this loader has world_size={self.world_size}: positions would not match"
            )
        if state["position"] > len(self):
            raise ValueError(
                f"ResumableLoader.load_state_dict: position {state['position']} is past the {len(self)} "
                f"batches of an epoch"
            )
        self.epoch, self.position = state["epoch"], state["position"]


def group_by_length(
    order: np.ndarray, lengths: np.ndarray, batch: int, chunk: int, rng: np.random.Generator
) -> np.ndarray:
    """``order`` (a permutation) regrouped so that each run of ``batch`` indices holds similar lengths.

    Chunks of ``chunk * batch`` consecutive indices are each sorted by length (longest first, ties in
    ``order``'s order), cut into batches of ``batch``; the full batches are shuffled by ``rng`` and the short
    last batch (``len(order) % batch`` indices), if any, is kept at the end, where unsorted loaders have it.
    """
    size = chunk * batch
    pieces = []
    for start in range(0, len(order), size):
        part = order[start : start + size]
        pieces.append(part[np.argsort(-lengths[part], kind="stable")])
    grouped = np.concatenate(pieces) if pieces else order
    full = len(grouped) // batch
    batches = grouped[: full * batch].reshape(full, batch)[rng.permutation(full)]
    return np.concatenate([batches.reshape(-1), grouped[full * batch :]])


def count_examples(batch: Any) -> int:
    """Number of examples in a batch: the leading size of its first tensor (1 if it holds none)."""
    tensors = _tensors(batch)
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else 1


def count_tokens(batch: Any) -> int | None:
    """Real tokens in a batch: sum of ``attention_mask`` if present, else ``input_ids.numel()``, else None."""
    if isinstance(batch, dict):
        if isinstance(batch.get("attention_mask"), torch.Tensor):
            return int(batch["attention_mask"].sum().item())
        if isinstance(batch.get("input_ids"), torch.Tensor):
            return int(batch["input_ids"].numel())
    return None


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def move_to(obj: Any, device: torch.device) -> Any:
    """Move every tensor inside dicts / lists / tuples to `device` (non-blocking from pinned memory)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: move_to(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(move_to(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(v, device) for v in obj)
    return obj


def as_loader(data: Any, collate_fn: Callable | None, cfg: Any, ctx: Any, *, train: bool) -> Any:
    """What the `Trainer` reads ``data`` through (see its ``train_data``): a `ResumableLoader` as it is
    (checked to be this rank's shard), a Dataset wrapped in one with ``cfg``'s batch size and seed
    (``cfg``: a `TrainerConfig`; training data sharded by ``ctx``'s rank), a re-iterable as it is."""
    if (
        train
        and cfg.group_by_length
        and not (
            isinstance(data, torch.utils.data.Dataset)
            or (isinstance(data, ResumableLoader) and data.lengths is not None)
        )
    ):
        raise ValueError(
            f"Trainer: group_by_length needs a Dataset with `lengths` (or a ResumableLoader built with "
            f"lengths); got {type(data).__name__}, whose batches the trainer does not form"
        )
    if isinstance(data, ResumableLoader):
        if train and (data.world_size, data.rank) != (ctx.world_size, ctx.rank):
            raise ValueError(
                f"Trainer: train loader is sharded as rank {data.rank} of {data.world_size}, but this "
                f"process is rank {ctx.rank} of {ctx.world_size}"
            )
        return data
    if isinstance(data, torch.utils.data.Dataset):
        lengths = None
        if train and cfg.group_by_length:
            lengths = getattr(data, "lengths", None)
            if lengths is None:
                raise ValueError(
                    f"Trainer: group_by_length needs the lengths of the examples, and the dataset "
                    f"{type(data).__name__} has no `lengths` attribute"
                )
        return ResumableLoader(
            data,
            cfg.batch_size,
            collate_fn,
            seed=cfg.seed,
            shuffle=train,
            drop_last=cfg.drop_last if train else False,
            rank=ctx.rank if train else 0,
            world_size=ctx.world_size if train else 1,
            lengths=lengths,
            num_workers=cfg.num_workers,
        )
    if not isinstance(data, Iterable):
        raise TypeError(
            f"Trainer: data must be a ResumableLoader, Dataset or iterable, got {type(data).__name__}"
        )
    if isinstance(data, Iterator):
        raise TypeError(
            "Trainer: data is a one-shot iterator; pass something re-iterable (a list, a DataLoader, a "
            "ResumableLoader) so that epochs and resume work"
        )
    return data


__all__: Sequence[str] = (
    "ResumableLoader", "as_loader", "count_examples", "count_tokens", "group_by_length", "move_to",
)  # fmt: skip
