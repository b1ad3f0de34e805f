"""datakit.DataLoader yields exactly the batches torch's DataLoader yields, configuration by configuration."""

from __future__ import annotations

import pytest
import torch
import torch.utils.data as tud

import datakit
from datakit import samplers
from tests.loader._loader_datasets import (
    GetItemsDataset,
    NestedDataset,
    RandomDataset,
    RangeDataset,
    ShardedIterable,
    TorchShardedIterable,
    draw_in_init,
)
from tests.loader._loader_helpers import assert_same, compare_with_torch, run_loader, seeded

# Three workers on a two-core machine make both loaders warn; that is expected here.
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:This DataLoader will create")]

WORKERS = [0, 2, 3]


@pytest.mark.parametrize("num_workers", WORKERS)
def test_sequential(num_workers):
    compare_with_torch(RangeDataset(23), lambda: {"batch_size": 4, "num_workers": num_workers})


@pytest.mark.parametrize("num_workers", WORKERS)
def test_shuffled_with_generator(num_workers):
    compare_with_torch(
        RandomDataset(20),
        lambda: {"batch_size": 3, "shuffle": True, "num_workers": num_workers, "generator": seeded(11)},
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffled_with_global_rng(num_workers):
    compare_with_torch(
        RandomDataset(17), lambda: {"batch_size": 4, "shuffle": True, "num_workers": num_workers}
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_drop_last(num_workers):
    batches = compare_with_torch(
        RangeDataset(23),
        lambda: {
            "batch_size": 5,
            "shuffle": True,
            "drop_last": True,
            "num_workers": num_workers,
            "generator": seeded(2),
        },
    )
    assert len(batches) == 4


@pytest.mark.parametrize("num_workers", [0, 2])
def test_no_auto_batching(num_workers):
    compare_with_torch(
        NestedDataset(9),
        lambda: {"batch_size": None, "shuffle": True, "num_workers": num_workers, "generator": seeded(4)},
    )


@pytest.mark.parametrize("module", [samplers, tud], ids=["datakit-samplers", "torch-samplers"])
@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda m: m.SequentialSampler(range(19)),
        lambda m: m.RandomSampler(range(19), generator=seeded(5)),
        lambda m: m.RandomSampler(range(19), replacement=True, num_samples=40, generator=seeded(5)),
        lambda m: m.SubsetRandomSampler([1, 4, 9, 16, 18, 2, 3], generator=seeded(5)),
        lambda m: m.WeightedRandomSampler([1.0, 0.1, 3.0, 2.0] * 4, 21, generator=seeded(5)),
        lambda m: m.DistributedSampler(range(19), num_replicas=3, rank=1, seed=8),
    ],
    ids=["sequential", "random", "replacement", "subset", "weighted", "distributed"],
)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_sampler(module, make_sampler, num_workers):
    compare_with_torch(
        RandomDataset(19),
        lambda: {"batch_size": 4, "sampler": make_sampler(module), "num_workers": num_workers},
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_sampler(num_workers):
    def make():
        sampler = samplers.RandomSampler(range(20), generator=seeded(9))
        return {
            "batch_sampler": samplers.BatchSampler(sampler, 6, drop_last=False),
            "num_workers": num_workers,
        }

    compare_with_torch(RangeDataset(20), make)


@pytest.mark.parametrize("module", [samplers, tud], ids=["datakit-sampler", "torch-sampler"])
def test_distributed_sampler_across_epochs(module):
    """datakit's loader calls ``set_epoch`` itself (a deliberate difference); torch's needs the call."""

    def run(loader_class, call_set_epoch):
        sampler = module.DistributedSampler(range(18), num_replicas=2, rank=0, seed=3)
        loader = loader_class(RangeDataset(18), batch_size=4, sampler=sampler, num_workers=2)
        epochs = []
        for epoch in range(3):
            if call_set_epoch:
                sampler.set_epoch(epoch)
            epochs.append(list(loader))
        return epochs

    expected = run(tud.DataLoader, call_set_epoch=True)
    assert_same(expected, run(datakit.DataLoader, call_set_epoch=False))
    assert_same(expected, run(datakit.DataLoader, call_set_epoch=True))


@pytest.mark.parametrize("num_workers", [2, 3])
def test_persistent_workers_two_epochs(num_workers):
    compare_with_torch(
        RandomDataset(22),
        lambda: {
            "batch_size": 4,
            "shuffle": True,
            "num_workers": num_workers,
            "persistent_workers": True,
            "generator": seeded(13),
        },
        epochs=2,
    )


@pytest.mark.parametrize("dataset", [RandomDataset(22), ShardedIterable(23)], ids=["map", "iterable"])
def test_persistent_workers_after_an_early_break(dataset):
    def run(loader_class):
        torch.manual_seed(0)
        loader = loader_class(
            dataset, batch_size=3, num_workers=2, persistent_workers=True, generator=seeded(4)
        )
        first = []
        for batch in loader:
            first.append(batch)
            if len(first) == 2:
                break
        second = list(loader)
        del loader
        return first, second

    assert_same(run(tud.DataLoader), run(datakit.DataLoader))


def test_non_persistent_workers_two_epochs():
    compare_with_torch(
        RandomDataset(12),
        lambda: {"batch_size": 4, "shuffle": True, "num_workers": 2, "generator": seeded(1)},
        epochs=2,
    )


@pytest.mark.parametrize("prefetch_factor", [1, 4])
def test_prefetch_factor(prefetch_factor):
    compare_with_torch(
        RandomDataset(21),
        lambda: {
            "batch_size": 2,
            "shuffle": True,
            "num_workers": 2,
            "prefetch_factor": prefetch_factor,
            "generator": seeded(6),
        },
    )


@pytest.mark.parametrize("num_workers", WORKERS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_sharded_with_worker_info(num_workers, drop_last):
    compare_with_torch(
        ShardedIterable(25), lambda: {"batch_size": 4, "drop_last": drop_last, "num_workers": num_workers}
    )


@pytest.mark.parametrize("num_workers", [0, 3])
def test_iterable_written_for_torch(num_workers):
    compare_with_torch(TorchShardedIterable(22), lambda: {"batch_size": 3, "num_workers": num_workers})


def test_iterable_persistent_two_epochs():
    compare_with_torch(
        ShardedIterable(19), lambda: {"batch_size": 3, "num_workers": 2, "persistent_workers": True}, epochs=2
    )


def test_iterable_without_batching():
    compare_with_torch(ShardedIterable(9), lambda: {"batch_size": None, "num_workers": 2})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_nested_samples(num_workers):
    compare_with_torch(
        NestedDataset(14),
        lambda: {"batch_size": 4, "shuffle": True, "num_workers": num_workers, "generator": seeded(3)},
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_dataset(num_workers):
    def strip_pid(batches):
        return [{key: value for key, value in batch.items() if key != "pid"} for batch in batches]

    make = lambda: {"batch_size": 7, "shuffle": True, "num_workers": num_workers, "generator": seeded(2)}  # noqa: E731
    expected = run_loader(tud.DataLoader, GetItemsDataset(30), make, 1, 0)[0]
    actual = run_loader(datakit.DataLoader, GetItemsDataset(30), make, 1, 0)[0]
    assert_same(strip_pid(expected), strip_pid(actual))
    # one __getitems__ call per batch: every sample of a batch came from a call of that batch's size
    for batch in actual:
        assert batch["call_size"].tolist() == [len(batch["index"])] * len(batch["index"])


def test_worker_init_fn_drawing_random_numbers():
    compare_with_torch(
        RandomDataset(12),
        lambda: {"batch_size": 3, "num_workers": 2, "worker_init_fn": draw_in_init, "generator": seeded(21)},
    )


def test_custom_collate_fn():
    compare_with_torch(
        RangeDataset(10), lambda: {"batch_size": 3, "num_workers": 2, "collate_fn": lambda batch: sum(batch)}
    )


def test_out_of_order_delivers_the_same_batches():
    def make():
        return {"batch_size": 3, "num_workers": 2, "in_order": False, "shuffle": True, "generator": seeded(7)}

    # Which worker takes which task depends on timing here, so compare worker-independent samples.
    expected = run_loader(tud.DataLoader, RangeDataset(20), make, 1, 0)[0]
    actual = run_loader(datakit.DataLoader, RangeDataset(20), make, 1, 0)[0]
    key = lambda batch: batch.tolist()  # noqa: E731
    assert_same(sorted(expected, key=key), sorted(actual, key=key))


def test_pin_memory_without_accelerator(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also where there is one
    make = lambda: {"batch_size": 4, "num_workers": 2, "pin_memory": True}  # noqa: E731
    with pytest.warns(UserWarning, match="no accelerator"):
        compare_with_torch(RangeDataset(10), make)


def test_len_matches_torch():
    for kwargs in (
        {"batch_size": 4},
        {"batch_size": 4, "drop_last": True},
        {"batch_size": None},
        {"batch_sampler": tud.BatchSampler(range(10), 3, False)},
    ):
        assert len(datakit.DataLoader(RangeDataset(10), **kwargs)) == len(
            tud.DataLoader(RangeDataset(10), **kwargs)
        )
    for kwargs in ({"batch_size": 4}, {"batch_size": 4, "drop_last": True}, {"batch_size": None}):
        assert len(datakit.DataLoader(ShardedIterable(10), **kwargs)) == len(
            tud.DataLoader(ShardedIterable(10), **kwargs)
        )


def test_two_iterators_of_one_loader_are_independent():
    loader = datakit.DataLoader(RangeDataset(8), batch_size=2, num_workers=2)
    first, second = iter(loader), iter(loader)
    assert [b.tolist() for b in first] == [b.tolist() for b in second] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert next(iter(loader)).tolist() == [0, 1]


def _option_grid() -> list[dict]:
    """A fixed sample of the option space: every value of every option appears, in varied company."""
    import itertools
    import random as stdlib_random

    grid = list(
        itertools.product(
            [None, 1, 3],  # batch_size
            [False, True],  # shuffle
            [False, True],  # drop_last
            [0, 2],  # num_workers
            [None, 1, 3],  # prefetch_factor (only with workers)
            [False, True],  # persistent_workers (only with workers)
            [False, True],  # generator
        )
    )
    chosen = []
    for batch_size, shuffle, drop_last, workers, prefetch, persistent, generator in stdlib_random.Random(
        2024
    ).sample(grid, 14):
        if batch_size is None:
            drop_last = False
        if workers == 0:
            prefetch, persistent = None, False
        chosen.append(
            {
                "batch_size": batch_size,
                "shuffle": shuffle,
                "drop_last": drop_last,
                "num_workers": workers,
                "prefetch_factor": prefetch,
                "persistent_workers": persistent,
                "generator": generator,
            }
        )
    return chosen


@pytest.mark.parametrize(
    "options", _option_grid(), ids=lambda options: "-".join(f"{v}" for v in options.values())
)
def test_option_combinations(options):
    def make():
        kwargs = dict(options)
        kwargs["generator"] = seeded(17) if options["generator"] else None
        return kwargs

    compare_with_torch(RandomDataset(13), make, epochs=2 if options["persistent_workers"] else 1)
