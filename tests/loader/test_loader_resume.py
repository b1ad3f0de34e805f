"""A loader restored from ``state_dict()`` yields exactly what the uninterrupted loader would yield next."""

from __future__ import annotations

import json

import pytest
import torch
import torch.utils.data as tud

import datakit
from datakit import samplers
from tests.loader._loader_datasets import RangeDataset
from tests.loader._loader_helpers import seeded

LENGTH = 23
BATCH = 4  # 6 batches per epoch, the last one short


def make_loader(num_workers=0, generator_seed=1, **kwargs):
    options = {"batch_size": BATCH, "shuffle": True, "num_workers": num_workers}
    if generator_seed is not None:
        options["generator"] = seeded(generator_seed)
    options.update(kwargs)
    return datakit.DataLoader(RangeDataset(LENGTH), **options)


def as_lists(batches):
    return [batch.tolist() if isinstance(batch, torch.Tensor) else batch for batch in batches]


def uninterrupted(epochs=3, **kwargs):
    loader = make_loader(**kwargs)
    return [as_lists(loader) for _ in range(epochs)]


def interrupted(epoch, step, **kwargs):
    """Runs ``epoch`` epochs and ``step`` batches of the next; returns those and the state (via JSON)."""
    loader = make_loader(**kwargs)
    for _ in range(epoch):
        as_lists(loader)
    iterator = iter(loader)
    taken = [next(iterator).tolist() for _ in range(step)]
    state = json.loads(json.dumps(loader.state_dict()))
    del iterator, loader
    return taken, state


def resumed(state, epochs=2, **kwargs):
    """A fresh loader (another generator seed, to prove the state wins) continued from ``state``."""
    loader = make_loader(generator_seed=kwargs.pop("generator_seed", 999), **kwargs)
    loader.load_state_dict(state)
    return [as_lists(loader) for _ in range(epochs)]


@pytest.mark.parametrize("save_workers, load_workers", [(0, 0), (0, 2), (2, 0), (2, 2)])
def test_mid_epoch_resume_with_any_worker_count(save_workers, load_workers):
    expected = uninterrupted(num_workers=0)
    taken, state = interrupted(epoch=1, step=2, num_workers=save_workers)
    rest, following = resumed(state, num_workers=load_workers)
    assert taken == expected[1][:2]
    assert rest == expected[1][2:]
    assert following == expected[2]


def _options(kind):
    """Loader options of another shape; samplers are built fresh for every loader."""
    if kind == "drop-last":
        return {"drop_last": True}
    if kind == "no-batching":
        return {"batch_size": None}
    if kind == "batch-sampler":
        sampler = samplers.RandomSampler(range(LENGTH), generator=seeded(3))
        return {"batch_size": 1, "shuffle": False, "batch_sampler": samplers.BatchSampler(sampler, 5, False)}
    if kind == "weighted":
        weights = [float(i % 4) for i in range(LENGTH)]
        return {"shuffle": False, "sampler": tud.WeightedRandomSampler(weights, 30, generator=seeded(5))}
    assert kind == "subset-global-rng"
    return {"shuffle": False, "sampler": samplers.SubsetRandomSampler(list(range(0, LENGTH, 2)))}


OTHER_KINDS = ["drop-last", "no-batching", "batch-sampler", "weighted", "subset-global-rng"]


@pytest.mark.parametrize("kind", OTHER_KINDS)
def test_mid_epoch_resume_with_other_samplers_and_options(kind):
    def build(**extra):
        options = _options(kind)
        if options.get("batch_sampler") is not None:
            options.pop("batch_size")
            options.pop("shuffle")
            return datakit.DataLoader(RangeDataset(LENGTH), **options, **extra)
        return make_loader(**options, **extra)

    torch.manual_seed(2)
    loader = build()
    expected = [as_lists(loader) for _ in range(3)]
    torch.manual_seed(2)
    loader = build()
    as_lists(loader)
    iterator = iter(loader)
    taken = [next(iterator) for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    torch.manual_seed(77)
    fresh = build(num_workers=2)
    fresh.load_state_dict(state)
    assert as_lists(taken) + as_lists(fresh) == expected[1]
    assert as_lists(fresh) == expected[2]


def test_state_of_a_loader_not_yet_iterated():
    expected = uninterrupted(epochs=2)
    state = json.loads(json.dumps(make_loader().state_dict()))
    assert state["epoch"] == 0
    assert resumed(state) == expected


@pytest.mark.parametrize("step", [0, 6], ids=["before-first-batch", "after-last-batch"])
def test_resume_at_epoch_boundaries(step):
    expected = uninterrupted()
    taken, state = interrupted(epoch=1, step=step)
    rest, following = resumed(state)
    if step == 6:
        assert state["epoch"] == 2, "a fully yielded epoch is saved as the start of the next one"
        assert [taken, rest] == expected[1:]
    else:
        assert [rest, following] == expected[1:]


def test_resume_after_a_finished_epoch():
    expected = uninterrupted()
    loader = make_loader()
    as_lists(loader)
    state = json.loads(json.dumps(loader.state_dict()))
    assert resumed(state) == expected[1:]


@pytest.mark.parametrize("load_workers", [0, 2])
def test_resume_with_persistent_workers(load_workers):
    expected = uninterrupted(num_workers=2, persistent_workers=True)
    taken, state = interrupted(epoch=1, step=3, num_workers=2, persistent_workers=True)
    extra = {"persistent_workers": True} if load_workers else {}
    rest, following = resumed(state, num_workers=load_workers, **extra)
    assert taken + rest == expected[1]
    if load_workers:
        assert following == expected[2]
    # else: later epochs follow the resumed loader's own draws, and without workers it
    # draws a base seed from the shared generator every epoch (docs/resume.md)


def test_load_state_dict_into_a_loader_with_live_persistent_workers():
    expected = uninterrupted(num_workers=2, persistent_workers=True)
    _, state = interrupted(epoch=1, step=2, num_workers=2, persistent_workers=True)
    loader = make_loader(num_workers=2, persistent_workers=True, generator_seed=5)
    as_lists(loader)  # workers are up
    loader.load_state_dict(state)
    assert as_lists(loader) == expected[1][2:]
    assert as_lists(loader) == expected[2]
    del loader


def test_resume_shuffled_by_the_global_rng():
    torch.manual_seed(3)
    expected = uninterrupted(generator_seed=None)
    torch.manual_seed(3)
    taken, state = interrupted(epoch=1, step=2, generator_seed=None)
    torch.manual_seed(12345)  # whatever the global RNG holds now, the state puts the saved one back
    loader = make_loader(generator_seed=None)
    loader.load_state_dict(state)
    assert taken + as_lists(loader) == expected[1]
    assert as_lists(loader) == expected[2]


def test_out_of_order_resume_delivers_exactly_the_remaining_batches():
    """``in_order=False``: the state records which batches were delivered, so none is lost or repeated."""
    expected = sorted(uninterrupted(epochs=1)[0])
    taken, state = interrupted(epoch=0, step=3, num_workers=2, in_order=False)
    (rest,) = resumed(state, epochs=1, num_workers=2, in_order=False)
    assert sorted(taken + rest) == expected
    assert len(state["delivered"]["extra"]) <= 2 * 2, "at most the batches in flight beyond the prefix"


class CountingDataset(RangeDataset):
    def __init__(self, length):
        super().__init__(length)
        self.fetched = []

    def __getitem__(self, index):
        self.fetched.append(index)
        return super().__getitem__(index)


def test_resume_skips_delivered_batches_without_fetching_them():
    loader = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH, shuffle=True, generator=seeded(4))
    iterator = iter(loader)
    delivered = [next(iterator).tolist() for _ in range(3)]
    dataset = CountingDataset(LENGTH)
    resumed_loader = datakit.DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=seeded(0))
    resumed_loader.load_state_dict(loader.state_dict())
    rest = as_lists(resumed_loader)
    assert sorted(dataset.fetched) == sorted(i for batch in rest for i in batch)
    assert not set(dataset.fetched) & {i for batch in delivered for i in batch}


@pytest.mark.filterwarnings("ignore:DataLoader\\(device='cuda'\\)")  # without CUDA: CPU stand-in
@pytest.mark.parametrize("load_workers", [0, 2])
def test_resume_with_device_staging_counts_yielded_not_prefetched_batches(load_workers):
    """With ``device=`` the stager fetches one batch ahead; the state counts what the consumer got."""
    expected = uninterrupted(epochs=2, device="cuda")
    taken, state = interrupted(epoch=0, step=2, device="cuda")
    rest, following = resumed(state, device="cuda", num_workers=load_workers)
    assert taken + rest == expected[0]
    assert following == expected[1]


def test_state_is_small_versioned_plain_data():
    _, state = interrupted(epoch=2, step=3)
    text = json.dumps(state)
    assert json.loads(text) == state
    assert state["format"] == "datakit.DataLoader" and state["version"] == 1
    assert state["epoch"] == 2 and state["delivered"] == {"prefix": 3, "extra": []}
    assert len(text) < 8_000, "no per-sample lists: one compressed generator state and a few ints"


def test_deterministic_order_state_carries_no_generator():
    loader = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    assert state["generators"] == {}
    assert len(json.dumps(state)) < 300
    fresh = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH)
    fresh.load_state_dict(state)
    assert as_lists(fresh) == as_lists(iterator)


@pytest.mark.parametrize(
    "state, message",
    [
        ({}, "format"),
        ({"format": "datakit.DataLoader", "version": 99, "epoch": 0}, "version 99"),
        ({"format": "datakit.DataLoader", "version": 1, "epoch": -1}, "epoch"),
        ({"format": "datakit.DataLoader", "version": 1, "epoch": 0, "generators": {"loader": "!!"}}, None),
        (
            {
                "format": "datakit.DataLoader",
                "version": 1,
                "epoch": 0,
                "delivered": {"prefix": 2, "extra": [1]},
            },
            "delivered",
        ),
    ],
)
def test_bad_states_are_rejected(state, message):
    loader = make_loader()
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state)
        as_lists(loader)


def test_iterable_datasets_have_no_state():
    from tests.loader._loader_datasets import ShardedIterable

    loader = datakit.DataLoader(ShardedIterable(10), batch_size=2)
    with pytest.raises(TypeError, match="map-style"):
        loader.state_dict()


def test_each_iteration_starts_the_next_epoch_reproducibly():
    first, second = uninterrupted(epochs=3), uninterrupted(epochs=3)
    assert first == second, "the same seed gives the same epochs"
    assert first[0] != first[1] != first[2]
    loader = make_loader()
    assert loader.epoch == 0
    as_lists(loader)
    assert loader.epoch == 1


@pytest.mark.parametrize("module", [samplers, tud], ids=["datakit", "torch"])
def test_loader_sets_the_epoch_of_a_distributed_sampler(module):
    sampler = module.DistributedSampler(range(LENGTH), num_replicas=2, rank=1, seed=4)
    loader = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH, sampler=sampler)
    epochs = []
    for _ in range(3):
        epochs.append(as_lists(loader))
        assert sampler.epoch == len(epochs) - 1
    reference = module.DistributedSampler(range(LENGTH), num_replicas=2, rank=1, seed=4)
    for epoch, batches in enumerate(epochs):
        reference.set_epoch(epoch)
        assert batches == as_lists(tud.DataLoader(RangeDataset(LENGTH), batch_size=BATCH, sampler=reference))


def test_an_explicit_set_epoch_wins():
    sampler = samplers.DistributedSampler(range(LENGTH), num_replicas=2, rank=0, seed=4)
    loader = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH, sampler=sampler)
    sampler.set_epoch(7)
    seventh = as_lists(loader)
    assert sampler.epoch == 7 and loader.epoch == 8
    as_lists(loader)
    assert sampler.epoch == 8
    sampler.set_epoch(7)
    assert as_lists(loader) == seventh


@pytest.mark.parametrize(
    "make",
    [
        lambda g: samplers.SequentialSampler(range(11)),
        lambda g: samplers.RandomSampler(range(11), generator=g),
        lambda g: samplers.RandomSampler(range(11)),
        lambda g: samplers.RandomSampler(range(7), replacement=True, num_samples=40, generator=g),
        lambda g: samplers.SubsetRandomSampler([3, 9, 1, 12, 40, 5], generator=g),
        lambda g: samplers.SubsetRandomSampler([3, 9, 1, 12, 40, 5]),
        lambda g: samplers.WeightedRandomSampler([0.1, 0.9, 0.4, 0.7, 3.0], 12, generator=g),
        lambda g: samplers.BatchSampler(samplers.RandomSampler(range(10), generator=g), 3, False),
    ],
    ids=[
        "sequential",
        "random",
        "random-global",
        "replacement",
        "subset",
        "subset-global",
        "weighted",
        "batch",
    ],
)
def test_sampler_state_dict_resumes_its_pass(make):
    torch.manual_seed(8)
    sampler = make(seeded(2))
    expected = [list(sampler), list(sampler)]
    torch.manual_seed(8)
    sampler = make(seeded(2))
    list(sampler)
    iterator = iter(sampler)
    taken = [next(iterator) for _ in range(3)]
    state = json.loads(json.dumps(sampler.state_dict()))
    restored = make(seeded(77))
    restored.load_state_dict(state)
    assert taken + list(restored) == expected[1]
    with pytest.raises(ValueError):
        restored.load_state_dict({"version": 2})


def test_progress_records_out_of_order_deliveries_compactly():
    """Pure bookkeeping: batches delivered ahead of the prefix are kept as a short list of positions."""
    from datakit.loader.progress import PassProgress
    from datakit.loader.resume.state import Delivered

    progress = PassProgress(epoch=0)
    batches = progress.track(iter([[0], [1], [2], [3], [4], [5]]))
    taken = [next(batches) for _ in range(4)]  # pulls 0..3 in flight
    for pull in (1, 3, 0):  # results finish out of order
        progress.deliver(pull)
        progress.record_yield()
    assert progress.delivered == Delivered(prefix=2, extra=[3])
    resumed = PassProgress(epoch=0, delivered=Delivered.from_dict(progress.delivered.to_dict()))
    assert taken == [[0], [1], [2], [3]]
    assert list(resumed.track(iter([[0], [1], [2], [3], [4], [5]]))) == [[2], [4], [5]]


def test_progress_counts_a_failed_batch_as_delivered():
    from datakit.loader.progress import PassProgress

    progress = PassProgress(epoch=0)
    batches = progress.track(iter([[0], [1], [2]]))
    next(batches), next(batches)
    progress.deliver(0, failed=True)
    progress.deliver(1)
    progress.record_yield()
    assert progress.delivered.prefix == 2
