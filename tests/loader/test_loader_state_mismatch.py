"""A loader state loads only into a loader it fits: same dataset length, batching and sampler.

Loaded into another loader, the saved positions mean other samples: a state
saved at batch_size=100 resumed at 50 would show 500 samples twice. Only
``num_workers`` may change, and with datakit's sharded samplers (whose state
is a global sample position) the world size and the per-rank batch size.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch.utils.data as tud

import datakit
from datakit.samplers import DistributedSampler, DistributedWeightedSampler
from tests.loader._loader_datasets import RangeDataset
from tests.loader._loader_helpers import seeded


def loader(length=1000, **options):
    options.setdefault("batch_size", 100)
    return datakit.DataLoader(RangeDataset(length), **options)


def state_after(source, steps):
    iterator = iter(source)
    seen = [next(iterator).tolist() for _ in range(steps)]
    del iterator
    return seen, json.loads(json.dumps(source.state_dict()))


def refusal(target, state) -> str:
    with pytest.raises(ValueError) as caught:
        target.load_state_dict(state)
    return str(caught.value)


def test_a_state_loads_into_a_loader_built_the_same_way():
    seen, state = state_after(loader(shuffle=True, generator=seeded(1)), 5)
    resumed = loader(shuffle=True, generator=seeded(2), num_workers=2)  # the state restores the generator
    resumed.load_state_dict(state)
    rest = [index for batch in resumed for index in batch.tolist()]
    assert Counter([index for batch in seen for index in batch] + rest) == Counter(range(1000))


def test_another_batch_size_is_refused_naming_both():
    _, state = state_after(loader(), 5)
    message = refusal(loader(batch_size=50), state)
    assert "this state was saved by a loader with batch_size=100, drop_last=False" in message
    assert "over 1000 samples" in message
    assert "this loader has batch_size=50" in message
    assert "differs in batch_size" in message


@pytest.mark.parametrize("length", [900, 49, 1001])
def test_another_dataset_length_is_refused(length):
    _, state = state_after(loader(), 3)
    message = refusal(loader(length), state)
    assert "over 1000 samples" in message and f"over {length} samples" in message
    assert "differs in dataset length" in message


def test_shuffle_changed_is_refused():
    _, state = state_after(loader(shuffle=True, generator=seeded(0)), 2)
    message = refusal(loader(), state)
    assert "sampler=random" in message and "sampler=sequential" in message
    assert "differs in sampler" in message
    message = refusal(loader(shuffle=True), json.loads(json.dumps(loader().state_dict())))
    assert "differs in sampler" in message


def test_drop_last_changed_is_refused():
    _, state = state_after(loader(length=1010, drop_last=True), 2)
    assert "differs in drop_last" in refusal(loader(length=1010), state)


def test_batching_turned_off_is_refused():
    _, state = state_after(loader(), 2)
    assert "batch_size=None" in refusal(loader(batch_size=None), state)


def test_every_mismatch_is_named_in_one_message():
    _, state = state_after(loader(shuffle=True, generator=seeded(0)), 2)
    message = refusal(loader(length=49, batch_size=50, drop_last=True), state)
    assert "differs in batch_size, drop_last, sampler, dataset length" in message


class Evens(tud.Sampler):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        return iter(range(0, self.length, 2))

    def __len__(self):
        return (self.length + 1) // 2


class Odds(Evens):
    def __iter__(self):
        return iter(range(1, self.length, 2))


def test_custom_samplers_are_told_apart_by_class():
    _, state = state_after(loader(sampler=Evens(1000)), 1)
    assert state["loader"]["sampler"] == f"{__name__}.Evens"
    loader(sampler=Evens(1000)).load_state_dict(state)
    message = refusal(loader(sampler=Odds(1000)), state)
    assert f"sampler={__name__}.Evens" in message and f"sampler={__name__}.Odds" in message


def test_a_batch_sampler_is_described_by_its_batch_size_and_sampler():
    sampler = datakit.samplers.BatchSampler(datakit.samplers.SequentialSampler(range(30)), 7, True)
    source = datakit.DataLoader(RangeDataset(30), batch_sampler=sampler)
    _, state = state_after(source, 1)
    assert state["loader"] == {"dataset_length": 30, "batch_size": 7, "drop_last": True,
                               "sampler": "sequential"}
    other = datakit.samplers.BatchSampler(datakit.samplers.SequentialSampler(range(30)), 5, True)
    target = datakit.DataLoader(RangeDataset(30), batch_sampler=other)
    assert "differs in batch_size" in refusal(target, state)


class Pairs(tud.Sampler):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        return iter([[i, i + 1] for i in range(0, self.length - 1, 2)])

    def __len__(self):
        return self.length // 2


def test_a_custom_batch_sampler_is_described_by_its_class():
    _, state = state_after(datakit.DataLoader(RangeDataset(30), batch_sampler=Pairs(30)), 1)
    assert state["loader"] == {"dataset_length": 30, "batch_size": None, "drop_last": None,
                               "sampler": f"{__name__}.Pairs"}
    message = refusal(datakit.DataLoader(RangeDataset(30), batch_size=2), state)
    assert "differs in batch_size, drop_last, sampler)" in message


def test_a_state_from_the_previous_version_still_loads():
    seen, state = state_after(loader(length=230, batch_size=40, shuffle=True, generator=seeded(4)), 2)
    del state["loader"]  # states saved before datakit recorded the loader's shape
    resumed = loader(length=230, batch_size=40, shuffle=True, generator=seeded(4))
    resumed.load_state_dict(state)
    indices = [index for batch in seen for index in batch] + [i for batch in resumed for i in batch.tolist()]
    assert Counter(indices) == Counter(range(230))


def test_a_malformed_shape_is_refused():
    _, state = state_after(loader(), 1)
    state["loader"] = {"batch_size": "many"}
    assert "loader" in refusal(loader(), state)


# -- distributed ----------------------------------------------------------------------


def sharded(world_size, rank, length=1000, batch_size=10, seed=0, **options):
    sampler = DistributedSampler(range(length), num_replicas=world_size, rank=rank, seed=seed, **options)
    return datakit.DataLoader(RangeDataset(length), batch_size=batch_size, sampler=sampler)


def test_elastic_resume_accepts_another_world_size_and_batch_size():
    # What the state holds is a global position: 3 ranks x 4 steps x 10 samples.
    before = [sharded(3, rank) for rank in range(3)]
    iterators = [iter(source) for source in before]
    seen = [index for _ in range(4) for iterator in iterators for index in next(iterator).tolist()]
    state = json.loads(json.dumps(before[0].state_dict()))
    assert state["loader"]["world_size"] == 3
    assert all(source.state_dict() == before[0].state_dict() for source in before), "the same on every rank"
    after = [sharded(2, rank, batch_size=15) for rank in range(2)]
    for source in after:
        source.load_state_dict(state)
    rest = [index for source in after for batch in source for index in batch.tolist()]
    assert Counter(seen + rest) == Counter(range(1000))  # 120 + 880, split evenly: no padding


def test_elastic_resume_refuses_another_seed_shuffle_or_dataset():
    _, state = state_after(sharded(2, 0, seed=1), 3)
    assert "differs in seed" in refusal(sharded(4, 1, seed=2), state)
    assert "differs in shuffle" in refusal(sharded(4, 1, seed=1, shuffle=False), state)
    assert "differs in dataset length" in refusal(sharded(4, 1, seed=1, length=999), state)
    sampler = DistributedWeightedSampler([1.0] * 1000, num_replicas=2, rank=0, seed=1)
    weighted = datakit.DataLoader(RangeDataset(1000), batch_size=10, sampler=sampler)
    assert "differs in sampler" in refusal(weighted, state)


def test_torch_distributed_sampler_is_not_elastic():
    def torch_sharded(world_size, rank):
        sampler = tud.DistributedSampler(range(1000), num_replicas=world_size, rank=rank, seed=3)
        return datakit.DataLoader(RangeDataset(1000), batch_size=10, sampler=sampler)

    _, state = state_after(torch_sharded(3, 0), 2)
    torch_sharded(3, 1).load_state_dict(state)  # same world size: fine
    message = refusal(torch_sharded(2, 0), state)
    assert "world_size=3" in message and "world_size=2" in message and "differs in world_size" in message
