"""``datakit.DataLoader`` is an instance of ``torch.utils.data.DataLoader`` (issue 27), with torch's guard.

Libraries dispatch on ``isinstance``: PyTorch Lightning skips its ``iter()``
probe for torch's loaders only and rebuilds only them with a
``DistributedSampler`` (from their attributes, or from the arguments it
recorded), choosing torch's ``DistributedSampler`` for a ``RandomSampler`` or
``SequentialSampler`` and leaving a loader whose sampler is already a
``DistributedSampler`` alone. These tests check what that needs without
Lightning; ``tests/test_lightning.py`` runs Lightning itself.
"""

from __future__ import annotations

import inspect
import multiprocessing

import pytest
import torch
import torch.utils.data as tud

import datakit
import datakit.samplers as ds
from tests.loader._loader_datasets import RangeDataset, ShardedIterable
from tests.loader._loader_helpers import child_pids, leaked_children, seeded, wait_until

GUARDED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


def test_the_loader_is_a_torch_dataloader():
    loader = datakit.DataLoader(RangeDataset(5), batch_size=2)
    assert isinstance(loader, tud.DataLoader)
    assert issubclass(datakit.DataLoader, tud.DataLoader)
    assert datakit.DataLoader[int] is not None  # generic, like torch's
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("name", GUARDED)
def test_torchs_guard_refuses_what_it_refuses_on_torchs_loader(name):
    loader = datakit.DataLoader(RangeDataset(5), batch_size=2, num_workers=1, persistent_workers=True)
    torch_loader = tud.DataLoader(RangeDataset(5), batch_size=2, num_workers=1, persistent_workers=True)
    with pytest.raises(ValueError) as ours:
        setattr(loader, name, getattr(loader, name))
    with pytest.raises(ValueError) as torchs:
        setattr(torch_loader, name, getattr(torch_loader, name))
    assert str(ours.value) == str(torchs.value) == (
        f"{name} attribute should not be set after DataLoader is initialized"
    )


def test_what_torch_lets_change_still_changes_between_epochs():
    loader = datakit.DataLoader(RangeDataset(4), batch_size=2)
    loader.collate_fn = lambda samples: sum(samples)
    loader.timeout = 3.0
    assert list(loader) == [1, 5]


def test_every_argument_reads_back_as_an_attribute_of_its_name():
    def init(worker_id: int) -> None:
        pass

    def collate(samples: list) -> list:
        return samples

    generator = seeded(3)
    given = {"dataset": RangeDataset(9), "batch_size": 3, "shuffle": True, "num_workers": 2,
             "collate_fn": collate, "pin_memory": False, "drop_last": True, "timeout": 5.0,
             "worker_init_fn": init, "multiprocessing_context": multiprocessing.get_context("spawn"),
             "generator": generator, "prefetch_factor": 3, "persistent_workers": True, "in_order": False,
             "device": torch.device("cpu")}
    loader = datakit.DataLoader(**given)
    parameters = set(inspect.signature(datakit.DataLoader.__init__).parameters) - {"self"}
    assert parameters == set(given) | {"sampler", "batch_sampler"}
    for name, value in given.items():
        assert getattr(loader, name) is value or getattr(loader, name) == value, name
    assert isinstance(loader.sampler, tud.RandomSampler)
    assert isinstance(loader.batch_sampler, tud.BatchSampler)
    # shuffle is derived, not stored: a tool that rebuilds a loader from vars() passes the sampler alone
    assert "shuffle" not in vars(loader)
    assert datakit.DataLoader(RangeDataset(3), shuffle="lazy").shuffle == "lazy"
    assert datakit.DataLoader(RangeDataset(3)).shuffle is False


def rebuild(loader: tud.DataLoader, sampler: tud.Sampler) -> tud.DataLoader:
    """What Lightning does under DDP, spelled out: the loader's non-default attributes, a new sampler."""
    parameters = inspect.signature(type(loader).__init__).parameters
    attributes = {**vars(loader), "multiprocessing_context": loader.multiprocessing_context}
    kwargs = {name: value for name, value in attributes.items()
              if name in parameters and not name.startswith("_") and value is not parameters[name].default}
    kwargs.update(dataset=loader.dataset, sampler=sampler, shuffle=False, batch_sampler=None)
    return type(loader)(**kwargs)


def test_rebuilt_with_a_distributed_sampler_it_yields_torchs_shards():
    shards = {}
    for cls in (datakit.DataLoader, tud.DataLoader):
        extra = {"device": "cpu"} if cls is datakit.DataLoader else {}
        loader = cls(RangeDataset(20), batch_size=3, shuffle=True, generator=seeded(0), **extra)
        samplers = [tud.DistributedSampler(loader.dataset, 2, rank, seed=7) for rank in (0, 1)]
        shards[cls] = [[batch.tolist() for batch in rebuild(loader, sampler)] for sampler in samplers]
    assert shards[datakit.DataLoader] == shards[tud.DataLoader]
    first, second = (sum(shard, []) for shard in shards[datakit.DataLoader])
    assert sorted(first + second) == list(range(20))


@pytest.mark.parametrize(("ours", "torchs"), [
    (ds.SequentialSampler(range(3)), tud.SequentialSampler),
    (ds.RandomSampler(range(3)), tud.RandomSampler),
    (ds.SubsetRandomSampler([0, 2]), tud.SubsetRandomSampler),
    (ds.WeightedRandomSampler([1.0, 2.0], 2), tud.WeightedRandomSampler),
    (ds.BatchSampler(range(3), 2, False), tud.BatchSampler),
    (ds.DistributedSampler(range(4), num_replicas=2, rank=0), tud.DistributedSampler),
    (ds.DistributedWeightedSampler([1.0, 1.0], num_replicas=2, rank=1), tud.DistributedSampler),
], ids=["sequential", "random", "subset-random", "weighted-random", "batch", "distributed",
        "distributed-weighted"])
def test_samplers_are_instances_of_their_torch_namesakes(ours, torchs):
    """Lightning shards a RandomSampler with torch's DistributedSampler, leaves a DistributedSampler alone."""
    assert isinstance(ours, torchs)


def test_the_lazy_sampler_is_neither_torchs_random_nor_a_distributed_sampler():
    """So Lightning shards shuffle="lazy" through its sampler wrapper instead of replacing or skipping it."""
    lazy = datakit.DataLoader(RangeDataset(4), shuffle="lazy").sampler
    assert not isinstance(lazy, (tud.RandomSampler, tud.DistributedSampler))


def test_torchs_attributes_and_property_read_datakits_values():
    loader = datakit.DataLoader(RangeDataset(4), num_workers=1, multiprocessing_context="spawn")
    assert tud.DataLoader.multiprocessing_context.fget(loader) is loader.multiprocessing_context
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert loader.pin_memory_device == ""
    for dataset in (RangeDataset(4), ShardedIterable(4)):
        assert datakit.DataLoader(dataset)._dataset_kind == tud.DataLoader(dataset)._dataset_kind


def test_dropping_the_iterator_as_lightning_does_stops_persistent_workers():
    """Lightning ends a fit with ``loader._iterator = None`` (it shuts down only torch's own iterators)."""
    before = child_pids()
    loader = datakit.DataLoader(RangeDataset(6), batch_size=2, num_workers=2, persistent_workers=True)
    assert len(list(loader)) == 3
    assert leaked_children(before)
    loader._iterator = None
    assert wait_until(lambda: not leaked_children(before))
