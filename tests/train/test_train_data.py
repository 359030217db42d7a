"""ResumableLoader: order by (seed, epoch), exact resume without re-reading, sharding by rank."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.train import ResumableLoader


class CountingDataset(torch.utils.data.Dataset):
    """Items are their own indices; counts every read."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.reads.append(i)
        return i


def _ids(batch) -> list[int]:
    return batch.tolist()


def _take(loader: ResumableLoader, k: int) -> list[list[int]]:
    out = []
    while len(out) < k:
        for batch in loader:
            out.append(_ids(batch))
            if len(out) == k:
                break
    return out


def test_each_epoch_is_a_permutation_fixed_by_seed_and_epoch() -> None:
    loader = ResumableLoader(CountingDataset(10), batch_size=5, seed=7)
    e0 = [i for b in loader for i in _ids(b)]
    e1 = [i for b in loader for i in _ids(b)]
    assert sorted(e0) == sorted(e1) == list(range(10))
    assert e0 != e1  # reshuffled each epoch
    again = ResumableLoader(CountingDataset(10), batch_size=5, seed=7)
    assert [i for b in again for i in _ids(b)] == e0
    other = ResumableLoader(CountingDataset(10), batch_size=5, seed=8)
    assert [i for b in other for i in _ids(b)] != e0
    assert loader.epoch_indices(1).tolist() == e1


def test_no_shuffle_reads_in_order_and_keeps_short_last_batch() -> None:
    loader = ResumableLoader(CountingDataset(7), batch_size=3, shuffle=False)
    assert len(loader) == 3
    assert [_ids(b) for b in loader] == [[0, 1, 2], [3, 4, 5], [6]]
    dropping = ResumableLoader(CountingDataset(7), batch_size=3, shuffle=False, drop_last=True)
    assert [_ids(b) for b in dropping] == [[0, 1, 2], [3, 4, 5]]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(4, 40),
    batch_size=st.integers(1, 5),
    stop=st.integers(0, 25),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_resume_continues_exactly_without_rereading(n, batch_size, stop, drop_last, seed) -> None:
    if drop_last and n < batch_size:
        return
    reference = ResumableLoader(CountingDataset(n), batch_size, seed=seed, drop_last=drop_last)
    total = stop + 7
    expected = _take(reference, total)

    first = ResumableLoader(CountingDataset(n), batch_size, seed=seed, drop_last=drop_last)
    got = _take(first, stop) if stop else []
    state = first.state_dict()

    dataset = CountingDataset(n)
    resumed = ResumableLoader(dataset, batch_size, seed=seed, drop_last=drop_last)
    resumed.load_state_dict(state)
    got += _take(resumed, total - stop)
    assert got == expected
    # only the items of the batches handed out after the resume were read
    assert len(dataset.reads) == sum(len(b) for b in expected[stop:])


def test_state_counts_batches_handed_out() -> None:
    loader = ResumableLoader(CountingDataset(12), batch_size=4, seed=0)
    it = iter(loader)
    next(it)
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["position"] == 1
    next(it), next(it)
    assert loader.state_dict()["position"] == 3  # end of the epoch: resumes into epoch 1
    resumed = ResumableLoader(CountingDataset(12), batch_size=4, seed=0)
    resumed.load_state_dict(loader.state_dict())
    assert _ids(next(iter(resumed))) == loader.epoch_indices(1)[:4].tolist()


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("n", [24, 23, 11, 7])
def test_shards_together_are_the_single_process_global_batches(n: int, drop_last: bool) -> None:
    world, b = 3, 2
    single = ResumableLoader(CountingDataset(n), b * world, seed=4, drop_last=drop_last)
    ranks = [
        ResumableLoader(CountingDataset(n), b, seed=4, rank=r, world_size=world, drop_last=drop_last)
        for r in range(world)
    ]
    assert len({len(r) for r in ranks}) == 1  # every rank has the same number of batches (no DDP hang)
    per_rank = [[_ids(x) for x in r] for r in ranks]
    if drop_last or n % world == 0:  # no padding: the union of step k's shards is global batch k
        assert [sorted(sum((p[k] for p in per_rank), [])) for k in range(len(ranks[0]))] == [
            sorted(_ids(x)) for x in single
        ]
    seen = [i for p in per_rank for batch in p for i in batch]
    if drop_last:
        assert len(seen) == len(set(seen))  # disjoint shards
    else:
        assert set(seen) == set(range(n))  # everything read, the tail padded by wrapping around


def test_workers_give_the_same_batches_and_state() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(20))
    collate = lambda items: torch.stack([x[0] for x in items])
    plain = ResumableLoader(dataset, 3, collate, seed=2)
    workers = ResumableLoader(dataset, 3, collate, seed=2, num_workers=2)
    a = _take(plain, 9)
    b = _take(workers, 9)
    assert a == b
    assert plain.state_dict() == workers.state_dict()


def test_eval_iteration_does_not_touch_state() -> None:
    loader = ResumableLoader(CountingDataset(6), 2, seed=1)
    next(iter(loader))
    state = loader.state_dict()
    assert [_ids(b) for b in loader.iter_epoch(0)] == [
        loader.epoch_indices(0)[i : i + 2].tolist() for i in (0, 2, 4)
    ]
    assert loader.state_dict() == state


def test_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        ResumableLoader(CountingDataset(4), 0)
    with pytest.raises(ValueError, match="rank"):
        ResumableLoader(CountingDataset(4), 1, rank=2, world_size=2)
    with pytest.raises(ValueError, match="fewer than one batch of"):
        ResumableLoader(CountingDataset(3), 4, drop_last=True)
    with pytest.raises(TypeError, match="__len__"):
        ResumableLoader(iter([1, 2]), 1)
    loader = ResumableLoader(CountingDataset(4), 2, seed=1)
    with pytest.raises(ValueError, match="seed"):
        loader.load_state_dict({"epoch": 0, "position": 1, "seed": 2})
    with pytest.raises(ValueError, match="world_size"):
        loader.load_state_dict({"epoch": 0, "position": 1, "seed": 1, "world_size": 2})
    with pytest.raises(ValueError, match="past"):
        loader.load_state_dict({"epoch": 0, "position": 3})
    with pytest.raises(ValueError, match="position"):
        loader.load_state_dict({"epoch": 0})


def test_loader_tells_epoch_aware_datasets_their_epoch():
    """Dynamic masking needs the epoch: the loader calls dataset.set_epoch before reading an epoch."""
    from attnlab.train.data import ResumableLoader

    class EpochAware:
        def __init__(self) -> None:
            self.epoch = -1

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[int, int]:
            return (self.epoch, i)

    loader = ResumableLoader(EpochAware(), batch_size=2, collate_fn=list, seed=0, shuffle=False)
    first = [item for batch in loader for item in batch]
    second = [item for batch in loader for item in batch]
    assert {e for e, _ in first} == {0} and {e for e, _ in second} == {1}


# ---------------------------------------------------------------------------------- length grouping


def _lengths(n: int, seed: int = 0) -> list[int]:
    return torch.randint(1, 129, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _padding(batches: list[list[int]], lengths: list[int]) -> float:
    """Padded positions / all positions when each batch pads to its longest example."""
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / padded


def test_length_grouping_reads_every_example_once_with_less_padding() -> None:
    n, b = 1003, 32
    lengths = _lengths(n)
    plain = ResumableLoader(CountingDataset(n), b, seed=3)
    grouped = ResumableLoader(CountingDataset(n), b, seed=3, lengths=lengths, group_chunk=8)
    for epoch in range(2):
        order = grouped.epoch_indices(epoch).tolist()
        assert sorted(order) == list(range(n))  # a permutation: nothing dropped or repeated
        batches = [order[i : i + b] for i in range(0, n, b)]
        assert [len(x) for x in batches][-1] == n % b  # the short batch stays last
        plain_order = plain.epoch_indices(epoch).tolist()
        plain_batches = [plain_order[i : i + b] for i in range(0, n, b)]
        assert _padding(batches, lengths) < 0.2 < 0.4 < _padding(plain_batches, lengths)
        # each sorted chunk holds the examples of the plain permutation's chunk (the draw stays the seed's)
        chunk = 8 * b
        assert {frozenset(plain_order[i : i + chunk]) for i in range(0, n, chunk)} == {
            frozenset(x for bb in batches if bb[0] in plain_order[i : i + chunk] for x in bb)
            for i in range(0, n, chunk)
        }
    assert grouped.epoch_indices(0).tolist() != grouped.epoch_indices(1).tolist()
    again = ResumableLoader(CountingDataset(n), b, seed=3, lengths=lengths, group_chunk=8)
    assert again.epoch_indices(1).tolist() == grouped.epoch_indices(1).tolist()
    # the batches' order is shuffled, not longest first
    firsts = [lengths[x[0]] for x in batches[:-1]]
    assert firsts != sorted(firsts, reverse=True)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(4, 60), batch_size=st.integers(1, 6), stop=st.integers(0, 20), seed=st.integers(0, 99))
def test_length_grouped_resume_is_exact(n, batch_size, stop, seed) -> None:
    lengths = _lengths(n, seed)

    def loader(dataset):
        return ResumableLoader(dataset, batch_size, seed=seed, lengths=lengths, group_chunk=2)

    expected = _take(loader(CountingDataset(n)), stop + 5)
    first = loader(CountingDataset(n))
    got = _take(first, stop) if stop else []
    resumed = loader(CountingDataset(n))
    resumed.load_state_dict(first.state_dict())
    assert got + _take(resumed, 5) == expected


@pytest.mark.parametrize("n", [96, 95])
def test_length_grouped_shards_are_the_single_process_global_batches(n: int) -> None:
    world, b = 3, 4
    lengths = _lengths(n, 1)
    single = ResumableLoader(CountingDataset(n), b * world, seed=2, lengths=lengths, drop_last=True)
    ranks = [
        ResumableLoader(
            CountingDataset(n), b, seed=2, rank=r, world_size=world, lengths=lengths, drop_last=True
        )
        for r in range(world)
    ]
    per_rank = [[_ids(x) for x in r] for r in ranks]
    assert [sorted(sum((p[k] for p in per_rank), [])) for k in range(len(ranks[0]))] == [
        sorted(_ids(x)) for x in single
    ]


def test_length_grouping_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="lengths: 3 lengths for a dataset of 4"):
        ResumableLoader(CountingDataset(4), 2, lengths=[1, 2, 3])
    with pytest.raises(ValueError, match="group_chunk"):
        ResumableLoader(CountingDataset(4), 2, lengths=[1, 2, 3, 4], group_chunk=0)
