"""``shuffle="lazy"``: a permutation computed on the fly, exact per epoch, reproducible and resumable."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter

import numpy as np
import pytest
import torch

import datakit
from datakit.loader.sampling import permutation
from datakit.loader.sampling.permutation import Permutation, mix_key
from datakit.samplers import DistributedSampler, LazyRandomSampler
from tests.loader._loader_datasets import RangeDataset
from tests.loader._loader_helpers import seeded
from tests.loader.test_loader_distributed import flat, lockstep

# -- the permutation ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 255, 256, 257, 1000, 4097, 123_457, 1_000_000])
@pytest.mark.parametrize("seed", [0, 1, 2**40 + 3])
def test_every_index_exactly_once(n, seed):
    indices = Permutation(n, mix_key(seed, 0)).take(np.arange(n))
    assert np.array_equal(np.sort(indices), np.arange(n))


@pytest.mark.parametrize("n", [300, 5001])
def test_one_position_at_a_time_matches_the_vectorised_map(n, monkeypatch):
    perm = Permutation(n, key=12345)
    assert [perm[i] for i in range(n)] == perm.take(np.arange(n)).tolist()
    monkeypatch.setattr(permutation, "TABLE_DOMAIN", 0)  # the same order, walked instead of tabulated
    walked = Permutation(n, key=12345)
    assert (
        [walked[i] for i in range(n)]
        == walked.take(np.arange(n)).tolist()
        == perm.take(np.arange(n)).tolist()
    )
    with pytest.raises(IndexError):
        perm[n]
    with pytest.raises(IndexError):
        perm.take([0, -1])


def test_keys_and_epochs_give_different_orders():
    n = 1000
    orders = {
        tuple(Permutation(n, mix_key(seed, epoch)).take(np.arange(n)).tolist())
        for seed in range(3)
        for epoch in range(3)
    }
    assert len(orders) == 9
    assert tuple(range(n)) not in orders


def test_every_ordering_of_a_small_dataset_occurs_about_equally_often():
    counts = Counter(tuple(Permutation(5, key).take(np.arange(5)).tolist()) for key in range(12_000))
    expected = 12_000 / 120
    assert len(counts) == 120
    chi2_per_dof = sum((count - expected) ** 2 / expected for count in counts.values()) / 119
    assert chi2_per_dof < 2.0, f"orderings are biased: chi2/dof={chi2_per_dof:.2f}"


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    gaps = np.searchsorted(a, points, side="right") / len(a) - np.searchsorted(b, points, side="right") / len(
        b
    )
    return float(np.abs(gaps).max())


def _displacements_and_gaps(order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(order)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    return np.abs(position - np.arange(n)) / n, np.abs(np.diff(order)) / n


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_positions_and_neighbour_gaps_look_like_a_true_shuffle(seed):
    """|pos(i) - i| / n and |order[k+1] - order[k]| / n, against torch.randperm's, by KS statistic."""
    n = 200_000
    lazy = Permutation(n, mix_key(seed, 0)).take(np.arange(n))
    true = torch.randperm(n, generator=seeded(seed)).numpy()
    lazy_stats, true_stats = _displacements_and_gaps(lazy), _displacements_and_gaps(true)
    threshold = 2.7 * (2 / n) ** 0.5  # two-sample KS critical value at p ~ 1e-6
    for ours, theirs in zip(lazy_stats, true_stats, strict=True):
        assert _ks(ours, theirs) < threshold
    # the statistic catches a poor shuffle: a keyed affine map i -> (a*i + b) mod n
    affine = (np.arange(n) * 7919 + 13) % n
    assert (
        max(_ks(o, t) for o, t in zip(_displacements_and_gaps(affine), true_stats, strict=True)) > threshold
    )


# -- DistributedSampler(shuffle="lazy") -----------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 100, 1001, 65_537])
@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_share_every_index_once_and_stay_balanced(n, world_size, drop_last):
    for seed in (0, 5):
        shares = [
            list(
                DistributedSampler(range(n), world_size, rank, shuffle="lazy", seed=seed, drop_last=drop_last)
            )
            for rank in range(world_size)
        ]
        assert len({len(share) for share in shares}) == 1, "every rank gets as many indices"
        assert len(shares[0]) == len(
            DistributedSampler(range(n), world_size, 0, shuffle="lazy", drop_last=drop_last)
        )
        seen = Counter(index for share in shares for index in share)
        if drop_last:
            assert max(seen.values(), default=1) == 1 and len(seen) == n - n % world_size
        else:
            assert set(seen) == set(range(n)) and sum(seen.values()) - n < world_size


def test_a_million_samples_over_eight_ranks():
    n, world_size = 1_000_000, 8
    shares = [
        list(DistributedSampler(range(n), world_size, rank, shuffle="lazy", seed=3)) for rank in range(8)
    ]
    assert {len(share) for share in shares} == {n // world_size}
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(n))


def test_lazy_order_is_reproducible_and_changes_with_epoch_and_seed():
    def order(seed, epoch):
        sampler = DistributedSampler(range(500), 1, 0, shuffle="lazy", seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(4, 0) == order(4, 0)
    assert len({tuple(order(seed, epoch)) for seed in (4, 5) for epoch in (0, 1)}) == 4
    assert sorted(order(4, 1)) == list(range(500))


def test_the_first_index_of_a_hundred_million_samples_costs_no_memory():
    tracemalloc.start()
    try:
        sampler = DistributedSampler(range(100_000_000), num_replicas=8, rank=3, shuffle="lazy")
        first = next(iter(sampler))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0 <= first < 100_000_000
    assert peak < 1_000_000, f"{peak} bytes traced for the first index"
    assert sampler.state_dict() == {"version": 1, "epoch": 0, "start": 8}


def test_bad_shuffle_values_are_rejected():
    with pytest.raises(ValueError, match="'lazy'"):
        DistributedSampler(range(4), 1, 0, shuffle="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'lazy'"):
        datakit.DataLoader(RangeDataset(4), shuffle="Lazy")  # type: ignore[arg-type]


def lazy_rank_loaders(length, world_size, batch_size, num_workers=0, seed=9):
    return [
        datakit.DataLoader(
            RangeDataset(length),
            batch_size=batch_size,
            num_workers=num_workers,
            sampler=DistributedSampler(range(length), world_size, rank, shuffle="lazy", seed=seed),
        )
        for rank in range(world_size)
    ]


@pytest.mark.parametrize("before, after, steps", [(3, 2, 2), (2, 5, 3), (4, 1, 1)])
def test_elastic_resume_of_a_lazy_order(before, after, steps):
    length, batch_size = 61, 3
    first = lazy_rank_loaders(length, before, batch_size)
    lockstep(first)  # epoch 0
    head = lockstep(first, steps)  # epoch 1, first steps
    state = json.loads(json.dumps(first[0].state_dict()))
    assert all(loader.state_dict() == state for loader in first)
    assert state["sampler"] == {"version": 1, "epoch": 1, "start": steps * batch_size * before}
    assert state["loader"]["sampler"] == "distributed-lazy" and state["loader"]["shuffle"] == "lazy"
    second = lazy_rank_loaders(length, after, batch_size, num_workers=1 if after < 3 else 0)
    for loader in second:
        loader.load_state_dict(state)
    tail = lockstep(second)
    seen = Counter(flat(head) + flat(tail))
    assert set(seen) == set(range(length)) and sum(seen.values()) - length < after
    assert len({len(batches) for batches in tail}) == 1, "ranks stay balanced after resume"
    whole = DistributedSampler(range(length), 1, 0, shuffle="lazy", seed=9)
    whole.set_epoch(1)
    shares = [[i for batch in batches for i in batch] for batches in tail]  # rank r holds r, r + M, ...
    rest = [share[j] for j in range(len(shares[0])) for share in shares]
    assert rest[: length - len(flat(head))] == list(whole)[len(flat(head)) :], "the rest of the global order"


def test_a_lazy_state_does_not_load_into_a_torch_ordered_sampler():
    lazy = lazy_rank_loaders(20, 2, 2)[0]
    ordered = datakit.DataLoader(
        RangeDataset(20), batch_size=2, sampler=DistributedSampler(range(20), 2, 0, seed=9)
    )
    with pytest.raises(ValueError, match="sampler=distributed-lazy.*sampler=distributed"):
        ordered.load_state_dict(lazy.state_dict())


# -- DataLoader(shuffle="lazy") ---------------------------------------------------------------------


def lazy_loader(generator_seed=1, num_workers=0, length=47, batch_size=5):
    generator = None if generator_seed is None else seeded(generator_seed)
    return datakit.DataLoader(
        RangeDataset(length),
        batch_size=batch_size,
        shuffle="lazy",
        generator=generator,
        num_workers=num_workers,
    )


def epochs_of(loader, count):
    return [[batch.tolist() for batch in loader] for _ in range(count)]


def test_loader_epochs_are_permutations_that_differ_and_reproduce():
    first, second = epochs_of(lazy_loader(), 3), epochs_of(lazy_loader(), 3)
    assert first == second
    orders = [[i for batch in epoch for i in batch] for epoch in first]
    assert all(sorted(order) == list(range(47)) for order in orders)
    assert len({tuple(order) for order in orders}) == 3
    assert epochs_of(lazy_loader(generator_seed=2), 1)[0] != first[0]
    assert isinstance(lazy_loader().sampler, LazyRandomSampler)


@pytest.mark.parametrize("save_workers, load_workers", [(0, 0), (0, 2), (2, 0)])
def test_loader_resumes_a_lazy_epoch_exactly(save_workers, load_workers):
    expected = epochs_of(lazy_loader(), 3)
    loader = lazy_loader(num_workers=save_workers)
    epochs_of(loader, 1)
    iterator = iter(loader)
    taken = [next(iterator).tolist() for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    del iterator
    assert state["sampler"]["start"] == 15 and isinstance(state["sampler"]["seed"], int)
    assert state["loader"]["sampler"] == "lazy-random"
    resumed = lazy_loader(generator_seed=999, num_workers=load_workers)
    resumed.load_state_dict(state)
    rest, following = epochs_of(resumed, 2)
    assert taken + rest == expected[1]
    assert following == expected[2]


@pytest.mark.parametrize("persistent", [False, True])
def test_a_lazy_state_saved_between_epochs_starts_the_next(persistent):
    def build(seed):
        return datakit.DataLoader(
            RangeDataset(47),
            batch_size=5,
            shuffle="lazy",
            generator=seeded(seed),
            num_workers=2,
            persistent_workers=persistent,
        )

    expected = epochs_of(build(1), 3)
    loader = build(1)
    epochs_of(loader, 1)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["epoch"] == 1 and state["sampler"] == {"version": 1, "epoch": 1, "start": 0}
    resumed = build(999)
    resumed.load_state_dict(state)
    assert epochs_of(resumed, 2) == expected[1:]


def test_loader_resumes_a_lazy_epoch_drawn_from_the_global_rng():
    torch.manual_seed(3)
    expected = epochs_of(lazy_loader(generator_seed=None), 2)
    torch.manual_seed(3)
    loader = lazy_loader(generator_seed=None)
    iterator = iter(loader)
    taken = [next(iterator).tolist() for _ in range(4)]
    state = json.loads(json.dumps(loader.state_dict()))
    torch.manual_seed(12345)
    resumed = lazy_loader(generator_seed=None)
    resumed.load_state_dict(state)
    assert taken + epochs_of(resumed, 1)[0] == expected[0]
    assert epochs_of(resumed, 1)[0] == expected[1]


def test_lazy_and_torch_ordered_loader_states_do_not_mix():
    lazy, ordered = lazy_loader(), datakit.DataLoader(RangeDataset(47), batch_size=5, shuffle=True)
    with pytest.raises(ValueError, match="different kind of sampler"):
        ordered.load_state_dict(lazy.state_dict())
    with pytest.raises(ValueError, match="different kind of sampler"):
        lazy.load_state_dict(ordered.state_dict())


def test_lazy_sampler_state_on_its_own():
    sampler = LazyRandomSampler(range(30), generator=seeded(4))
    iterator = iter(sampler)
    taken = [next(iterator) for _ in range(7)]
    state = sampler.state_dict()
    assert set(state) == {"version", "epoch", "start", "seed"} and state["start"] == 7
    other = LazyRandomSampler(range(30), generator=seeded(50))
    other.load_state_dict(json.loads(json.dumps(state)))
    assert sorted(taken + list(other)) == list(range(30))


def test_lazy_shuffle_is_refused_for_an_iterable_dataset():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="shuffle='lazy'"):
        datakit.DataLoader(Stream(), shuffle="lazy")


# -- the warning on large datasets ---------------------------------------------------------------


class _Sized(torch.utils.data.Dataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return index


def test_shuffle_true_over_ten_million_samples_warns_once_and_names_lazy():
    with pytest.warns(UserWarning, match="shuffle='lazy'") as caught:
        datakit.DataLoader(_Sized(10_000_001), batch_size=4, shuffle=True)
    assert len(caught) == 1 and caught[0].filename == __file__


@pytest.mark.parametrize("length, shuffle", [(10_000_000, True), (10_000_001, "lazy"), (10_000_001, False)])
def test_no_warning_below_the_threshold_or_without_a_full_permutation(length, shuffle):
    loader = datakit.DataLoader(_Sized(length), batch_size=4, shuffle=shuffle)  # warnings are errors here
    assert len(loader) == (length + 3) // 4
