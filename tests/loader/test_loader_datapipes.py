"""DataPipes: shuffle and sharding settings applied as torch's DataLoader applies them."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.utils.data as tud
from torch.utils.data.datapipes.iter import IterableWrapper

import datakit
from tests.loader._loader_helpers import free_port, init_gloo_group, run_in_ranks

pytestmark = pytest.mark.integration

LOADERS = [pytest.param(datakit.DataLoader, id="datakit"), pytest.param(tud.DataLoader, id="torch")]


def shuffled_pipe(length: int = 100, buffer_size: int = 20) -> tud.IterDataPipe:
    return IterableWrapper(range(length)).shuffle(buffer_size=buffer_size).sharding_filter()


@pytest.mark.parametrize("loader_class", LOADERS)
@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_sharding_filter_gives_every_sample_once(loader_class, num_workers):
    loader = loader_class(shuffled_pipe(), batch_size=None, num_workers=num_workers)
    samples = list(loader)
    assert sorted(samples) == list(range(100))  # 2 workers used to yield 200: each yielded everything


def epochs_of(loader_class: type, num_workers: int, persistent: bool, **kwargs) -> list[list[list[int]]]:
    loader = loader_class(
        shuffled_pipe(), batch_size=10, num_workers=num_workers, persistent_workers=persistent, **kwargs
    )
    return [[batch.tolist() for batch in loader] for _ in range(3)]


@pytest.mark.parametrize(
    ("num_workers", "persistent"), [(0, False), (2, False), (2, True)], ids=["main", "workers", "persistent"]
)
def test_shuffle_true_gives_torchs_batches_for_the_same_seed(num_workers, persistent):
    torch.manual_seed(123)
    theirs = epochs_of(tud.DataLoader, num_workers, persistent, shuffle=True)
    after_theirs = torch.rand(3)
    torch.manual_seed(123)
    ours = epochs_of(datakit.DataLoader, num_workers, persistent, shuffle=True)
    assert ours == theirs
    assert torch.equal(torch.rand(3), after_theirs), "the global RNG was drawn from as often as torch draws"
    assert theirs[0] != theirs[1], "each epoch draws a new shuffle"
    for epoch in theirs:
        assert sorted(i for batch in epoch for i in batch) == list(range(100))


def test_shuffle_follows_the_loaders_generator():
    theirs = epochs_of(tud.DataLoader, 2, False, shuffle=True, generator=torch.Generator().manual_seed(9))
    ours = epochs_of(datakit.DataLoader, 2, False, shuffle=True, generator=torch.Generator().manual_seed(9))
    assert ours == theirs


@pytest.mark.parametrize("loader_class", LOADERS)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_false_switches_the_graphs_shuffler_off(loader_class, num_workers):
    loader = loader_class(shuffled_pipe(), batch_size=None, shuffle=False, num_workers=num_workers)
    # in order; with 2 workers each holds every other sample and they take turns
    assert list(loader) == list(range(100))


def test_shuffle_true_without_a_shuffler_warns_and_yields_torchs_batches():
    def run(loader_class: type) -> tuple[list[str], list[list[int]]]:
        pipe = IterableWrapper(range(12)).sharding_filter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = loader_class(pipe, batch_size=3, shuffle=True, num_workers=2)
        return [str(warning.message) for warning in caught], [batch.tolist() for batch in loader]

    torch.manual_seed(0)
    their_warnings, theirs = run(tud.DataLoader)
    torch.manual_seed(0)
    our_warnings, ours = run(datakit.DataLoader)
    assert ours == theirs
    assert any("does not contain a `Shuffler`" in text for text in their_warnings)
    assert [text for text in our_warnings if "Shuffler" in text] == [
        text for text in their_warnings if "Shuffler" in text
    ]


def test_shuffle_is_still_refused_for_other_iterable_datasets():
    class Plain(tud.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        datakit.DataLoader(Plain(), shuffle=True)


# -- ranks of a real process group: one shuffle, sharded across ranks and workers --------------


def _rank_main(rank: int, world_size: int, port: int, out_dir: str) -> None:
    init_gloo_group(rank, world_size, port)
    try:
        torch.manual_seed(rank)  # different global RNGs: only the broadcast seed can make ranks agree
        loader = datakit.DataLoader(shuffled_pipe(60, 7), batch_size=None, shuffle=True, num_workers=2)
        with open(f"{out_dir}/rank-{rank}.json", "w") as handle:
            json.dump([int(sample) for sample in loader], handle)
    finally:
        dist.destroy_process_group()


def test_ranks_share_one_shuffle_and_split_it(tmp_path):
    run_in_ranks(_rank_main, (2, free_port(), str(tmp_path)), nprocs=2)
    shares = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in range(2)]
    assert all(len(share) == 30 for share in shares)
    assert sorted(shares[0] + shares[1]) == list(range(60)), "every sample exactly once across ranks"
