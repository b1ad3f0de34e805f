"""datakit's samplers draw the same indices as torch's for the same seeds."""

from __future__ import annotations

import pytest
import torch
import torch.utils.data as tud

from datakit import samplers
from tests.loader._loader_helpers import seeded


def both(make: callable, seed: int = 3) -> tuple[list, list]:
    torch.manual_seed(seed)
    expected = [list(make(tud, seeded(seed))) for _ in range(2)]
    torch.manual_seed(seed)
    actual = [list(make(samplers, seeded(seed))) for _ in range(2)]
    return expected, actual


@pytest.mark.parametrize(
    "make",
    [
        lambda m, g: m.SequentialSampler(range(11)),
        lambda m, g: m.RandomSampler(range(11), generator=g),
        lambda m, g: m.RandomSampler(range(11)),  # seeded from the global RNG
        lambda m, g: m.RandomSampler(range(11), num_samples=30, generator=g),
        lambda m, g: m.RandomSampler(range(11), num_samples=4, generator=g),
        lambda m, g: m.RandomSampler(range(11), replacement=True, generator=g),
        lambda m, g: m.RandomSampler(range(7), replacement=True, num_samples=75, generator=g),
        lambda m, g: m.SubsetRandomSampler([3, 9, 1, 12, 40], generator=g),
        lambda m, g: m.WeightedRandomSampler([0.1, 0.9, 0.4, 0.7, 3.0], 12, generator=g),
        lambda m, g: m.WeightedRandomSampler([0.1, 0.9, 0.4, 0.7, 3.0], 4, replacement=False, generator=g),
        lambda m, g: m.BatchSampler(m.RandomSampler(range(10), generator=g), 3, drop_last=False),
        lambda m, g: m.BatchSampler(m.RandomSampler(range(10), generator=g), 3, drop_last=True),
    ],
    ids=[
        "sequential",
        "random",
        "random-global-rng",
        "random-more-samples",
        "random-fewer-samples",
        "random-replacement",
        "random-replacement-num-samples",
        "subset",
        "weighted",
        "weighted-no-replacement",
        "batch",
        "batch-drop-last",
    ],
)
def test_sampler_matches_torch(make):
    expected, actual = both(make)
    assert actual == expected
    assert len(make(samplers, seeded(0))) == len(make(tud, seeded(0)))


@pytest.mark.parametrize("length", [10, 11, 13])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_distributed_sampler_matches_torch(length, shuffle, drop_last):
    for rank in range(3):
        ours = samplers.DistributedSampler(
            range(length), 3, rank, shuffle=shuffle, seed=5, drop_last=drop_last
        )
        theirs = tud.DistributedSampler(range(length), 3, rank, shuffle=shuffle, seed=5, drop_last=drop_last)
        for epoch in range(2):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
            assert len(ours) == len(theirs)


def test_distributed_sampler_reads_world_from_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    sampler = samplers.DistributedSampler(range(8), shuffle=False)
    assert (sampler.num_replicas, sampler.rank) == (4, 2)
    assert list(sampler) == [2, 6]


def test_distributed_sampler_rejects_bad_rank():
    with pytest.raises(ValueError, match="Invalid rank 3"):
        samplers.DistributedSampler(range(8), num_replicas=3, rank=3)


@pytest.mark.parametrize(
    "build, error",
    [
        (lambda: samplers.RandomSampler(range(3), replacement=1), TypeError),
        (lambda: samplers.RandomSampler(range(3), num_samples=0), ValueError),
        (lambda: samplers.WeightedRandomSampler([1.0, 2.0], 0), ValueError),
        (lambda: samplers.WeightedRandomSampler([[1.0, 2.0]], 2), ValueError),
        (lambda: samplers.BatchSampler(range(3), 0, False), ValueError),
        (lambda: samplers.BatchSampler(range(3), 2, 1), ValueError),
    ],
)
def test_invalid_arguments_raise_like_torch(build, error):
    with pytest.raises(error):
        build()


def test_samplers_are_torch_samplers_and_torch_accepts_them():
    loader = tud.DataLoader(range(6), sampler=samplers.SubsetRandomSampler([0, 2, 4], generator=seeded(1)))
    assert sorted(int(batch) for batch in loader) == [0, 2, 4]
    assert isinstance(samplers.SequentialSampler(range(2)), tud.Sampler)
