"""Distributed loading: where rank and world size come from, balanced ranks, elastic resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
import torch.distributed as dist
import torch.utils.data as tud

import datakit
from datakit import samplers
from datakit.samplers import DistributedSampler, DistributedWeightedSampler
from tests.loader._loader_datasets import RangeDataset
from tests.loader._loader_helpers import free_port, init_gloo_group, run_in_ranks


def rank_loaders(length, world_size, batch_size, num_workers=0, drop_last=False, **sampler_kwargs):
    return [
        datakit.DataLoader(
            RangeDataset(length),
            batch_size=batch_size,
            num_workers=num_workers,
            sampler=DistributedSampler(
                range(length), num_replicas=world_size, rank=rank, drop_last=drop_last, **sampler_kwargs
            ),
        )
        for rank in range(world_size)
    ]


def lockstep(loaders, steps=None):
    """Iterates the ranks' loaders step by step as DDP would; every rank must have a batch at every step."""
    iterators = [iter(loader) for loader in loaders]
    per_rank = [[] for _ in loaders]
    while steps is None or len(per_rank[0]) < steps:
        batches = [next(iterator, None) for iterator in iterators]
        if all(batch is None for batch in batches):
            break
        assert None not in batches, "one rank ran out of batches while another had more: DDP would hang"
        for collected, batch in zip(per_rank, batches, strict=True):
            collected.append(batch.tolist())
    return per_rank


def flat(per_rank):
    return [index for batches in per_rank for batch in batches for index in batch]


# -- where rank and world size come from ------------------------------------------


def test_world_from_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    sampler = DistributedSampler(range(8), shuffle=False)
    assert (sampler.num_replicas, sampler.rank) == (4, 2)
    assert list(sampler) == [2, 6]


def test_explicit_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    sampler = DistributedSampler(range(8), num_replicas=2, rank=1, shuffle=False)
    assert (sampler.num_replicas, sampler.rank) == (2, 1)
    weighted = DistributedWeightedSampler([1.0] * 8, num_replicas=3)
    assert (weighted.num_replicas, weighted.rank) == (3, 2)


def test_without_group_or_environment_there_is_one_rank(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert list(DistributedSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]


# -- balanced ranks ---------------------------------------------------------------------


@pytest.mark.parametrize("length, world_size, batch_size", [(23, 3, 3), (20, 3, 4), (7, 3, 2), (10, 2, 5)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_rank_gets_the_same_number_of_batches(length, world_size, batch_size, drop_last):
    loaders = rank_loaders(length, world_size, batch_size, drop_last=drop_last, seed=2)
    per_rank = lockstep(loaders)
    assert len({len(batches) for batches in per_rank}) == 1
    assert all(len(loader) == len(per_rank[0]) for loader in loaders)
    seen = Counter(flat(per_rank))
    if drop_last:
        assert max(seen.values()) == 1
    else:
        assert set(seen) == set(range(length)), "every sample is seen"
        assert sum(seen.values()) - length < world_size, "padding repeats fewer samples than there are ranks"


def test_matches_torch_from_a_fresh_epoch():
    for rank in range(3):
        ours = DistributedSampler(range(13), 3, rank, seed=5)
        theirs = tud.DistributedSampler(range(13), 3, rank, seed=5)
        for epoch in range(2):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


# -- elastic resume ------------------------------------------------------------------------


def elastic_run(length, batch_size, before, after, steps, num_workers=(0, 0), drop_last=False):
    """``steps`` lockstep steps at world size ``before``, the state of rank 0, the rest at ``after``."""
    first = rank_loaders(length, before, batch_size, num_workers[0], drop_last=drop_last, seed=9)
    lockstep(first)  # epoch 0, whole
    head = lockstep(first, steps)  # epoch 1, first steps
    state = json.loads(json.dumps(first[0].state_dict()))
    assert all(loader.state_dict() == state for loader in first), "every rank saves the same state"
    second = rank_loaders(length, after, batch_size, num_workers[1], drop_last=drop_last, seed=9)
    for loader in second:
        loader.load_state_dict(state)
    tail = lockstep(second)
    following = lockstep(second)
    return head, tail, following, state


@pytest.mark.parametrize(
    "length, batch_size, before, after, steps",
    [(24, 2, 3, 2, 2), (24, 2, 2, 3, 3), (23, 3, 3, 2, 1), (30, 4, 3, 1, 1), (17, 2, 1, 4, 3)],
)
def test_elastic_resume_sees_every_sample_once(length, batch_size, before, after, steps):
    head, tail, following, state = elastic_run(length, batch_size, before, after, steps)
    assert state["epoch"] == 1 and state["sampler"]["start"] == steps * batch_size * before
    seen = Counter(flat(head) + flat(tail))
    assert set(seen) == set(range(length)), "the epoch covers every sample"
    assert sum(seen.values()) - length < after, "only the resumed pass's padding repeats samples"
    assert len({len(batches) for batches in tail}) == 1, "ranks stay balanced after resume"
    fresh = rank_loaders(length, after, batch_size, seed=9)
    for loader in fresh:
        loader.sampler.set_epoch(2)
    assert following == lockstep(fresh), "the next epoch is the same global order at the new world size"


def test_elastic_resume_continues_the_global_order():
    """Without padding, the resumed ranks take exactly the rest of the epoch's one global order."""
    head, tail, _, _ = elastic_run(24, 2, 3, 2, 2)
    sampler = DistributedSampler(range(24), num_replicas=1, rank=0, seed=9)
    sampler.set_epoch(1)
    order = list(sampler)
    steps_tail = len(tail[0])
    consumed = [i for step in range(2) for rank in range(3) for i in head[rank][step]]
    assert sorted(consumed) == sorted(order[:12])
    rest = [i for step in range(steps_tail) for rank in range(2) for i in tail[rank][step]]
    assert sorted(rest) == sorted(order[12:])


def test_elastic_resume_with_workers_and_drop_last():
    head, tail, _, _ = elastic_run(26, 2, 3, 2, 2, num_workers=(2, 0), drop_last=True)
    seen = Counter(flat(head) + flat(tail))
    assert max(seen.values()) == 1, "drop_last never repeats a sample"
    assert len({len(batches) for batches in tail}) == 1


def test_a_state_saved_at_the_end_of_an_epoch_starts_the_next():
    loaders = rank_loaders(12, 3, 2, seed=1)
    lockstep(loaders)
    state = loaders[0].state_dict()
    assert state["epoch"] == 1 and state["sampler"]["start"] == 0
    resumed = rank_loaders(12, 2, 2, seed=1)
    for loader in resumed:
        loader.load_state_dict(state)
    fresh = rank_loaders(12, 2, 2, seed=1)
    lockstep(fresh)
    assert lockstep(resumed) == lockstep(fresh)


def test_torch_distributed_sampler_resumes_at_the_same_world_size():
    def loaders():
        return [
            datakit.DataLoader(
                RangeDataset(23),
                batch_size=3,
                sampler=tud.DistributedSampler(range(23), num_replicas=2, rank=rank, seed=6),
            )
            for rank in range(2)
        ]

    reference = loaders()
    expected = [lockstep(reference), lockstep(reference)]
    first = loaders()
    lockstep(first)
    head = lockstep(first, 2)
    resumed = loaders()
    for rank, loader in enumerate(resumed):
        loader.load_state_dict(json.loads(json.dumps(first[rank].state_dict())))
    tail = lockstep(resumed)
    assert [h + t for h, t in zip(head, tail, strict=True)] == expected[1]


def test_sharded_and_generic_states_do_not_mix():
    sharded = rank_loaders(12, 2, 2)[0]
    plain = datakit.DataLoader(RangeDataset(12), batch_size=2)
    with pytest.raises(ValueError, match="different kind of sampler"):
        plain.load_state_dict(sharded.state_dict())
    with pytest.raises(ValueError, match="different kind of sampler"):
        sharded.load_state_dict(plain.state_dict())


def test_sampler_state_on_its_own():
    sampler = DistributedSampler(range(20), num_replicas=2, rank=1, seed=3)
    iterator = iter(sampler)
    taken = [next(iterator) for _ in range(4)]
    state = sampler.state_dict()
    assert state == {"version": 1, "epoch": 0, "start": 8}
    others = [DistributedSampler(range(20), num_replicas=4, rank=r, seed=3) for r in range(4)]
    for other in others:
        other.load_state_dict(state)
    rest = [i for other in others for i in other]
    whole = DistributedSampler(range(20), num_replicas=1, rank=0, seed=3)
    assert sorted(rest) == sorted(list(whole)[8:])
    assert not set(rest) & set(taken)


# -- DistributedWeightedSampler ------------------------------------------------------------


def test_weighted_sampler_is_exported_and_reproducible():
    assert samplers.DistributedWeightedSampler is DistributedWeightedSampler
    weights = [0.0, 1.0, 2.0, 0.0, 5.0, 1.0]

    def draws(seed, epoch):
        result = []
        for rank in range(2):
            sampler = DistributedWeightedSampler(
                weights, num_samples=30, num_replicas=2, rank=rank, seed=seed
            )
            sampler.set_epoch(epoch)
            result.append(list(sampler))
        return result

    assert draws(4, 0) == draws(4, 0)
    assert draws(4, 0) != draws(4, 1) and draws(4, 0) != draws(5, 0)
    first = draws(4, 0)
    assert len(first[0]) == len(first[1]) == 15
    assert not {index for rank in first for index in rank} & {0, 3}, "zero weights are never drawn"


def test_weighted_sampler_shards_one_global_draw_and_resumes_elastically():
    weights = torch.rand(50, generator=torch.Generator().manual_seed(0)).tolist()
    whole = DistributedWeightedSampler(weights, num_samples=60, num_replicas=1, rank=0, seed=2)
    order = list(whole)
    ranks = [
        DistributedWeightedSampler(weights, num_samples=60, num_replicas=3, rank=r, seed=2) for r in range(3)
    ]
    assert [list(rank) for rank in ranks] == [order[r::3] for r in range(3)]
    loaders = [datakit.DataLoader(RangeDataset(50), batch_size=4, sampler=rank) for rank in ranks]
    head = lockstep(loaders, 2)
    state = loaders[0].state_dict()
    assert state["sampler"]["start"] == 24
    resumed = [
        datakit.DataLoader(
            RangeDataset(50),
            batch_size=4,
            sampler=DistributedWeightedSampler(weights, num_samples=60, num_replicas=2, rank=r, seed=2),
        )
        for r in range(2)
    ]
    for loader in resumed:
        loader.load_state_dict(state)
    tail = lockstep(resumed)
    assert Counter(flat(head) + flat(tail)) == Counter(order)


def test_weighted_sampler_without_replacement_draws_distinct_indices():
    sampler = DistributedWeightedSampler(
        [1.0] * 10, num_samples=10, replacement=False, num_replicas=2, rank=0
    )
    other = DistributedWeightedSampler([1.0] * 10, num_samples=10, replacement=False, num_replicas=2, rank=1)
    assert sorted(list(sampler) + list(other)) == list(range(10))
    with pytest.raises(ValueError):
        DistributedWeightedSampler([1.0, 0.0], num_samples=2, replacement=False, num_replicas=1, rank=0)
    with pytest.raises(ValueError):
        DistributedWeightedSampler([[1.0]], num_replicas=1, rank=0)


# -- real processes with torch.distributed ----------------------------------------------------

LENGTH = 29
BATCH = 3


def _rank_main(rank, world_size, port, out_dir, phase):
    """One rank: epoch 0 whole and 2 steps of epoch 1 (phase "save"), or the rest of epoch 1 ("load")."""
    init_gloo_group(rank, world_size, port)
    try:
        sampler = DistributedSampler(range(LENGTH), seed=7)  # rank and world size from the group
        assert (sampler.rank, sampler.num_replicas) == (rank, world_size)
        loader = datakit.DataLoader(RangeDataset(LENGTH), batch_size=BATCH, sampler=sampler)
        report = {"len": len(loader)}
        if phase == "save":
            report["epoch0"] = ddp_steps(loader, None)
            report["epoch1"] = ddp_steps(loader, 2)
            report["state"] = loader.state_dict()
        else:
            with open(f"{out_dir}/state.json") as handle:
                loader.load_state_dict(json.load(handle))
            report["len"] = len(loader)
            report["epoch1"] = ddp_steps(loader, None)
        with open(f"{out_dir}/{phase}-{rank}.json", "w") as handle:
            json.dump(report, handle)
    finally:
        dist.destroy_process_group()


def ddp_steps(loader, steps):
    """Like a DDP training step: an all-reduce after every batch (a rank with fewer batches would hang)."""
    batches = []
    for batch in loader:
        dist.all_reduce(torch.ones(1))
        batches.append(batch.tolist())
        if steps is not None and len(batches) == steps:
            break
    counts = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([float(len(batches))]))
    assert len({int(count.item()) for count in counts}) == 1
    return batches


def run_ranks(world_size, out_dir, phase):
    run_in_ranks(_rank_main, (world_size, free_port(), str(out_dir), phase), nprocs=world_size)
    reports = []
    for rank in range(world_size):
        with open(out_dir / f"{phase}-{rank}.json") as handle:
            reports.append(json.load(handle))
    return reports


@pytest.mark.integration
def test_process_group_coverage_balance_and_elastic_resume_from_three_ranks_to_two(tmp_path):
    saved = run_ranks(3, tmp_path, "save")
    assert len({report["len"] for report in saved}) == 1
    epoch0 = Counter(i for report in saved for batch in report["epoch0"] for i in batch)
    assert set(epoch0) == set(range(LENGTH)) and sum(epoch0.values()) - LENGTH < 3
    assert len({json.dumps(report["state"]) for report in saved}) == 1, "every rank saves the same state"
    (tmp_path / "state.json").write_text(json.dumps(saved[0]["state"]))
    loaded = run_ranks(2, tmp_path, "load")
    assert len({report["len"] for report in loaded}) == 1
    epoch1 = Counter(i for report in saved + loaded for batch in report["epoch1"] for i in batch)
    assert set(epoch1) == set(range(LENGTH)), "epoch 1 is covered across the change of world size"
    assert sum(epoch1.values()) - LENGTH < 2, "only the padding of the 2-rank pass repeats"
