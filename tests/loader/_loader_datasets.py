"""Datasets for the loader tests, at module level so ``spawn`` workers can import them."""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

import datakit

Point = collections.namedtuple("Point", ["x", "y"])


class RangeDataset(Dataset):
    """Sample ``i`` is ``i`` (an int)."""

    def __init__(self, length: int = 23) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.length:
            raise IndexError(index)
        return index


class RandomDataset(Dataset):
    """Samples that read every RNG a worker seeds, so seeding differences show."""

    def __init__(self, length: int = 20) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple:
        return index, torch.rand(2), np.random.rand(2), random.random()


class NestedDataset(Dataset):
    """Samples mixing dicts, namedtuples, numpy arrays and scalars, strings and floats."""

    def __init__(self, length: int = 14) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return {
            "image": torch.full((3, 4, 4), index, dtype=torch.uint8),
            "array": np.arange(6, dtype=np.float32).reshape(2, 3) + index,
            "scalar": np.int16(index),
            "label": index % 3,
            "weight": index / 7,
            "name": f"sample-{index}",
            "point": Point(x=index, y=np.float64(index) * 2),
            "pair": (index, [index + 1, index + 2]),
        }


class GetItemsDataset(Dataset):
    """Has ``__getitems__``; each sample records the size of the ``__getitems__`` call that made it."""

    def __init__(self, length: int = 30) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        raise AssertionError("__getitem__ must not be called when __getitems__ exists")

    def __getitems__(self, indices: list[int]) -> list[dict]:
        return [{"index": i, "call_size": len(indices), "pid": os.getpid()} for i in indices]


class ImageDataset(Dataset):
    """3x32x32 uint8 tensors built in one ``__getitems__`` call (the benchmark's records)."""

    def __init__(self, length: int = 1024) -> None:
        self.length = length
        self.base = (
            torch.arange(3 * 32 * 32, dtype=torch.int64).remainder(251).to(torch.uint8).view(3, 32, 32)
        )

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.base + (index % 5), index % 10

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        return [self[i] for i in indices]


class ShardedIterable(IterableDataset):
    """Yields ``range(length)`` in contiguous shards, one per worker (by datakit's get_worker_info)."""

    def __init__(self, length: int = 25) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        info = datakit.get_worker_info()
        if info is None:
            return iter(range(self.length))
        per_worker = -(-self.length // info.num_workers)
        start = info.id * per_worker
        return iter(range(start, min(start + per_worker, self.length)))


class TorchShardedIterable(IterableDataset):
    """Shards by ``torch.utils.data.get_worker_info`` (a dataset written for torch), strided."""

    def __init__(self, length: int = 22) -> None:
        self.length = length

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(worker, self.length, workers):
            yield {"value": i, "worker": worker}


class FailingDataset(Dataset):
    """Raises ``ValueError`` at ``bad_index``."""

    def __init__(self, length: int = 16, bad_index: int = 5) -> None:
        self.length = length
        self.bad_index = bad_index

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if index == self.bad_index:
            raise ValueError(f"bad sample {index}")
        return index


class OddError(Exception):
    """An exception that cannot be rebuilt from one message argument."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.code = code
        self.detail = detail


class OddErrorDataset(RangeDataset):
    """Raises :class:`OddError` for every sample."""

    def __getitem__(self, index: int) -> int:
        raise OddError(7, f"cannot read {index}")


class KillingDataset(RangeDataset):
    """SIGKILLs the worker process that fetches ``bad_index`` (never the main process)."""

    def __init__(self, length: int = 16, bad_index: int = 6) -> None:
        super().__init__(length)
        self.bad_index = bad_index

    def __getitem__(self, index: int) -> int:
        if index == self.bad_index and datakit.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return index


class ExitingDataset(RangeDataset):
    """Ends the worker process that fetches ``bad_index`` with ``os._exit(code)`` (never the main process)."""

    def __init__(self, length: int = 16, bad_index: int = 0, code: int = 3) -> None:
        super().__init__(length)
        self.bad_index = bad_index
        self.code = code

    def __getitem__(self, index: int) -> int:
        if index == self.bad_index and datakit.get_worker_info() is not None:
            os._exit(self.code)
        return index


class UnderReportingIterable(IterableDataset):
    """Yields ``range(length)`` but reports ``reported`` as its length (not sharded across workers)."""

    def __init__(self, length: int = 5, reported: int = 3) -> None:
        self.length = length
        self.reported = reported

    def __len__(self) -> int:
        return self.reported

    def __iter__(self):
        return iter(range(self.length))


class HangingDataset(RangeDataset):
    """Blocks (in workers) on ``hang_index`` until the process is stopped.

    With ``marker``, creates that file just before blocking.
    """

    def __init__(self, length: int = 16, hang_index: int = 3, marker: str | None = None) -> None:
        super().__init__(length)
        self.hang_index = hang_index
        self.marker = marker

    def __getitem__(self, index: int) -> int:
        if index == self.hang_index and datakit.get_worker_info() is not None:
            if self.marker is not None:
                Path(self.marker).touch()
            threading.Event().wait(120)
        return index


class MarkerDataset(RangeDataset):
    """Creates ``<directory>/<pid>-<index>`` for every sample fetched, to watch workers from outside."""

    def __init__(self, directory: str, length: int = 64) -> None:
        super().__init__(length)
        self.directory = directory

    def __getitem__(self, index: int) -> int:
        Path(self.directory, f"{os.getpid()}-{index}").touch()
        return index


class WorkerInfoDataset(RangeDataset):
    """Each sample carries the worker info seen while fetching it."""

    def __getitem__(self, index: int) -> dict:
        info = datakit.get_worker_info()
        torch_info = torch.utils.data.get_worker_info()
        return {
            "index": index,
            "id": -1 if info is None else info.id,
            "num_workers": -1 if info is None else info.num_workers,
            "seed": -1 if info is None else info.seed,
            "same_dataset_type": info is not None and type(info.dataset) is type(self),
            "torch_id": -1 if torch_info is None else torch_info.id,
            "init_tag": getattr(self, "init_tag", -1),
        }


class TorchWorkerIdDataset(RangeDataset):
    """Each sample is the tensor ``[index, worker id]``, the id from ``torch.utils.data.get_worker_info``.

    -1 in the main process. A tensor sample makes collation ask whether it runs in a worker.
    """

    def __getitem__(self, index: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        return torch.tensor([index, -1 if info is None else info.id])


class DatakitWorkerIdDataset(RangeDataset):
    """As :class:`TorchWorkerIdDataset`, the id from ``datakit.get_worker_info`` (read on the package)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        info = datakit.get_worker_info()
        return torch.tensor([index, -1 if info is None else info.id])


def tag_worker(worker_id: int) -> None:
    """A ``worker_init_fn`` that tags the worker's dataset copy with the worker id plus 100."""
    info = datakit.get_worker_info()
    info.dataset.init_tag = worker_id + 100


def failing_init(worker_id: int) -> None:
    """A ``worker_init_fn`` that fails."""
    raise KeyError(f"init failed in {worker_id}")


def draw_in_init(worker_id: int) -> None:
    """A ``worker_init_fn`` that consumes every RNG, so later samples depend on it."""
    torch.rand(worker_id + 1)
    np.random.rand(worker_id + 2)
    random.random()


class RefusesPickling:
    """Pickling it fails like a full /dev/shm does."""

    def __reduce__(self):
        raise OSError(28, "No space left on device")


def collate_unpicklable(batch: list) -> RefusesPickling:
    """A ``collate_fn`` whose batches cannot cross to the main process."""
    return RefusesPickling()
