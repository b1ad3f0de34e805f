"""Worker processes: worker info, seeding, worker_init_fn, start methods, argument validation."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from torch.utils.data._utils.worker import _generate_state

import datakit
from datakit.loader.workers.worker import numpy_seed
from tests.loader._loader_datasets import (
    DatakitWorkerIdDataset,
    GetItemsDataset,
    ImageDataset,
    RandomDataset,
    RangeDataset,
    ShardedIterable,
    TorchWorkerIdDataset,
    UnderReportingIterable,
    WorkerInfoDataset,
    tag_worker,
)
from tests.loader._loader_helpers import assert_same, run_loader, seeded


def test_get_worker_info_is_none_in_main_process():
    assert datakit.get_worker_info() is None


def test_worker_info_and_init_fn():
    loader = datakit.DataLoader(
        WorkerInfoDataset(8), batch_size=2, num_workers=2, worker_init_fn=tag_worker, generator=seeded(5)
    )
    batches = list(loader)
    base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=seeded(5)).item())
    for position, batch in enumerate(batches):
        worker = position % 2
        assert batch["id"].tolist() == [worker, worker]
        assert batch["torch_id"].tolist() == [worker, worker]
        assert batch["num_workers"].tolist() == [2, 2]
        assert batch["seed"].tolist() == [base_seed + worker] * 2
        assert batch["same_dataset_type"].tolist() == [True, True]
        assert batch["init_tag"].tolist() == [100 + worker] * 2


def test_worker_info_refuses_assignment_in_torchs_words():
    """torch's WorkerInfo raises RuntimeError on any assignment, and code written for it (torch's own
    test suite among it) catches exactly that."""
    from datakit.loader.workers.worker import WorkerInfo

    info = WorkerInfo(id=1, num_workers=2, seed=7, dataset=[1, 2])
    for name in ("id", "anything"):
        with pytest.raises(RuntimeError, match="^Cannot assign attributes to WorkerInfo objects$"):
            setattr(info, name, 3999)
    assert (info.id, info.num_workers, info.seed, info.dataset) == (1, 2, 7, [1, 2])
    assert repr(info) == "WorkerInfo(id=1, num_workers=2, seed=7, dataset=[1, 2])"


LOADERS = [pytest.param(datakit.DataLoader, id="datakit"), pytest.param(tud.DataLoader, id="torch")]


def expected_worker_ids(num_workers: int) -> list[list[int]]:
    """``[index, worker id]`` pairs of 8 samples in batches of 2 (round robin over the workers)."""
    return [[i, -1 if num_workers == 0 else (i // 2) % num_workers] for i in range(8)]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("loader_class", LOADERS)
def test_torch_get_worker_info_aliased_to_datakit(monkeypatch, loader_class, num_workers):
    # docs/loader.md says the two functions answer "in both directions", which invites
    # torch.utils.data.get_worker_info = datakit.get_worker_info; collating tensors then
    # asks datakit's function, which must not call itself through torch's name.
    monkeypatch.setattr(tud, "get_worker_info", datakit.get_worker_info)
    loader = loader_class(TorchWorkerIdDataset(8), batch_size=2, num_workers=num_workers)
    pairs = torch.cat(list(loader)).tolist()
    assert pairs == expected_worker_ids(num_workers)
    assert tud.get_worker_info() is None


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("loader_class", LOADERS)
def test_datakit_get_worker_info_aliased_to_torch(monkeypatch, loader_class, num_workers):
    monkeypatch.setattr(datakit, "get_worker_info", tud.get_worker_info)
    loader = loader_class(DatakitWorkerIdDataset(8), batch_size=2, num_workers=num_workers)
    pairs = torch.cat(list(loader)).tolist()
    assert pairs == expected_worker_ids(num_workers)
    assert datakit.get_worker_info() is None


def length_warnings(loader_class: type, dataset: UnderReportingIterable, num_workers: int) -> list[str]:
    loader = loader_class(dataset, batch_size=None, num_workers=num_workers)
    assert len(loader) == dataset.reported
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = list(loader)
    assert len(samples) == dataset.length * max(num_workers, 1)
    return [str(warning.message) for warning in caught if warning.category is UserWarning]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_length_warning_is_torchs(num_workers):
    dataset = UnderReportingIterable(length=5, reported=3)
    theirs = length_warnings(tud.DataLoader, dataset, num_workers)
    assert len(theirs) == 5 * max(num_workers, 1) - 3
    assert length_warnings(datakit.DataLoader, dataset, num_workers) == theirs


@pytest.mark.parametrize("base_seed", [0, 1, 2**32 - 1, 2**32 + 5, 2**63 - 1])
@pytest.mark.parametrize("worker_id", [0, 3])
def test_numpy_seed_matches_torch(base_seed, worker_id):
    assert numpy_seed(base_seed, worker_id) == _generate_state(base_seed, worker_id)


def test_main_process_rngs_untouched_by_workers():
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), np.random.rand())
    random.seed(1)
    np.random.seed(1)
    list(datakit.DataLoader(RandomDataset(6), batch_size=2, num_workers=2))
    assert (random.random(), np.random.rand()) == expected


def compare_start_method(method: str, dataset, kwargs: dict, epochs: int) -> None:
    """datakit with ``method`` against torch with fork (the seeds do not depend on the start method)."""
    expected = run_loader(tud.DataLoader, dataset, lambda: dict(kwargs, generator=seeded(3)), epochs, 0)
    actual = run_loader(
        datakit.DataLoader,
        dataset,
        lambda: dict(kwargs, generator=seeded(3), multiprocessing_context=method),
        epochs,
        0,
    )
    assert_same(expected, actual)


@pytest.mark.slow
def test_forkserver_matches_torch():
    compare_start_method(
        "forkserver", RandomDataset(10), {"batch_size": 3, "shuffle": True, "num_workers": 2}, 1
    )


@pytest.mark.slow
def test_spawn_with_iterable_and_persistent_workers():
    kwargs = {"batch_size": 4, "num_workers": 2, "persistent_workers": True}
    compare_start_method("spawn", ShardedIterable(13), kwargs, 2)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_called_once_per_batch(num_workers):
    batches = list(datakit.DataLoader(GetItemsDataset(10), batch_size=4, num_workers=num_workers))
    assert [batch["call_size"].tolist() for batch in batches] == [[4] * 4, [4] * 4, [2] * 2]


def test_batches_from_workers_arrive_in_shared_memory():
    for images, _ in datakit.DataLoader(ImageDataset(64), batch_size=16, num_workers=2):
        assert images.is_shared()
        assert images.shape == (16, 3, 32, 32)


BAD_ARGUMENTS = [
    ({"num_workers": -1}, ValueError, "non-negative"),
    ({"timeout": -1}, ValueError, "timeout"),
    ({"prefetch_factor": 2}, ValueError, "prefetch_factor"),
    ({"num_workers": 1, "prefetch_factor": -1}, ValueError, "prefetch_factor"),
    ({"persistent_workers": True}, ValueError, "persistent_workers"),
    ({"shuffle": True, "sampler": [0, 1]}, ValueError, "mutually exclusive"),
    ({"batch_sampler": [[0]], "batch_size": 2}, ValueError, "mutually exclusive"),
    ({"batch_sampler": [[0]], "drop_last": True}, ValueError, "mutually exclusive"),
    ({"batch_size": None, "drop_last": True}, ValueError, "mutually exclusive"),
    ({"multiprocessing_context": "spawn"}, ValueError, "multi-process"),
    ({"num_workers": 1, "multiprocessing_context": "nope"}, ValueError, "start method"),
    ({"num_workers": 1, "multiprocessing_context": 3}, TypeError, "context"),
]


@pytest.mark.parametrize("kwargs, error, match", BAD_ARGUMENTS)
def test_invalid_arguments_raise_like_torch(kwargs, error, match):
    with pytest.raises(error, match=match):
        datakit.DataLoader(RangeDataset(4), **kwargs)
    with pytest.raises(error):
        tud.DataLoader(RangeDataset(4), **kwargs)


def test_prefetch_factor_zero_with_workers_is_refused_when_the_loader_is_built():
    # torch accepts it here and fails at iter() with an AssertionError naming its iterator class
    with pytest.raises(ValueError, match=r"^prefetch_factor must be greater than 0 .*prefetch_factor=0"):
        datakit.DataLoader(RangeDataset(4), num_workers=2, prefetch_factor=0)


PREFETCH_SET_LATER = """
import datakit
loader = datakit.DataLoader(range(4), num_workers=1)
loader.prefetch_factor = 0  # not frozen, as in torch
try:
    iter(loader)
except ValueError as error:
    print(error)
"""


def test_prefetch_factor_set_to_zero_later_is_refused_at_iter_even_under_python_O():
    # under -O an assert is gone: the check must not be one (nor leave it to the TaskLedger's own error)
    result = subprocess.run([sys.executable, "-O", "-c", PREFETCH_SET_LATER], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("prefetch_factor must be greater than 0"), result.stdout
    assert "TaskLedger" not in result.stdout


@pytest.mark.parametrize(
    "kwargs",
    [{"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}],
    ids=["shuffle", "sampler", "batch"],
)
def test_iterable_dataset_rejects_samplers_like_torch(kwargs):
    with pytest.raises(ValueError, match="IterableDataset"):
        datakit.DataLoader(ShardedIterable(4), **kwargs)
    with pytest.raises(ValueError, match="IterableDataset"):
        tud.DataLoader(ShardedIterable(4), **kwargs)


def test_frozen_attributes():
    loader = datakit.DataLoader(RangeDataset(4))
    with pytest.raises(ValueError, match="should not be set"):
        loader.batch_size = 3
    loader.num_workers = 0  # not frozen, as in torch


def test_iterator_cannot_be_pickled():
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(iter(datakit.DataLoader(RangeDataset(4))))


def test_plain_sequences_and_default_convert():
    assert_same(
        list(tud.DataLoader([1, 2, 3], batch_size=None)), list(datakit.DataLoader([1, 2, 3], batch_size=None))
    )
