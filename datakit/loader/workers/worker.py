"""The worker process: its configuration, its loop, and ``get_worker_info``.

A worker receives one frozen :class:`WorkerConfig`, seeds ``random``, numpy and
torch as torch's workers do, runs ``worker_init_fn``, then answers tasks from
its task pipe on its result pipe (see :mod:`datakit.loader.workers.messages`) until it
is told to stop, its parent dies, or the pipes close.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

import numpy as np
import torch
import torch.utils.data

from datakit.loader.resume.epoch_seed import set_epoch_seed
from datakit.loader.sampling import datapipes
from datakit.loader.workers.fetch import Fetcher
from datakit.loader.workers.messages import STOP, Exhausted, Resume
from datakit.procs import channel
from datakit.procs.failure import WorkerFailure
from datakit.procs.lifeline import ParentLink

__all__ = ["WorkerInfo", "WorkerConfig", "get_worker_info", "worker_loop", "draw_base_seed", "numpy_seed"]


class WorkerInfo:
    """What a worker process knows about itself; see :func:`get_worker_info`.

    Read-only as torch's: any assignment raises ``RuntimeError("Cannot assign
    attributes to WorkerInfo objects")``, which code written for torch's catches.

    Attributes:
        id: This worker's index, ``0 .. num_workers - 1``.
        num_workers: How many workers the loader runs.
        seed: The seed of this worker's ``random`` and torch RNGs (``base_seed + id``).
        dataset: This process's copy of the dataset.
    """

    _FIELDS = ("id", "num_workers", "seed", "dataset")
    id: int
    num_workers: int
    seed: int
    dataset: Any

    def __init__(self, id: int, num_workers: int, seed: int, dataset: Any) -> None:  # torch's names
        for name, value in zip(self._FIELDS, (id, num_workers, seed, dataset), strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise RuntimeError("Cannot assign attributes to WorkerInfo objects")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"WorkerInfo({fields})"


_worker_info: WorkerInfo | None = None

# torch's own function, bound now: a user (or a test harness) may point
# ``torch.utils.data.get_worker_info`` at ours, and looking it up at call time
# would then call ourselves until RecursionError.
_torch_get_worker_info = torch.utils.data.get_worker_info


def get_worker_info() -> Any:
    """Returns this worker's :class:`WorkerInfo`, or None in the main process.

    Use it in an iterable dataset's ``__iter__`` to give each worker its own
    shard, or in ``worker_init_fn`` to configure each worker's dataset copy.
    In a worker of torch's own ``DataLoader`` it returns torch's worker info,
    so a dataset written against datakit shards the same way under both.
    """
    if _worker_info is not None:
        return _worker_info
    return _torch_get_worker_info()


def _publish_to_torch(info: WorkerInfo) -> None:
    """Makes ``torch.utils.data.get_worker_info()`` answer in datakit workers too.

    Datasets written for torch shard themselves with torch's function; torch
    keeps its answer in a private module global, so this is best effort.
    """
    try:
        from torch.utils.data._utils import worker as torch_worker  # import-graph: allow-private

        # import-graph: allow-private: torch's get_worker_info() reads this global; failures are caught
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=info.id, num_workers=info.num_workers, seed=info.seed, dataset=info.dataset
        )
    except (ImportError, AttributeError, TypeError):
        pass


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs, fixed when the loader's iterator starts.

    Attributes:
        dataset: The dataset (copied into the worker by fork or pickle).
        make_fetcher: Builds the fetcher from ``(dataset, collate_fn,
            auto_collation, drop_last)``: :class:`~datakit.loader.workers.fetch.MapFetcher`
            or :class:`~datakit.loader.workers.fetch.IterableFetcher`.
        collate_fn: Turns a list of samples into a batch.
        auto_collation: Tasks carry lists of indices.
        drop_last: Passed to the fetcher.
        base_seed: Seed of worker 0; worker ``i`` uses ``base_seed + i``.
        num_workers: How many workers the loader runs.
        worker_init_fn: Called with the worker id after seeding, or None.
        poll_interval: Seconds between checks that the parent is alive.
        shared_seed: Seed of an ``IterDataPipe``'s random pipes for the first
            pass (the same in every worker); None for other datasets.
        epoch: The loader's epoch at the workers' start; with
            ``base_seed``, it sets :func:`~datakit.loader.resume.epoch_seed.epoch_seed`
            (a :class:`~datakit.loader.workers.messages.Resume` sets the next one).
    """

    dataset: Any
    make_fetcher: Callable[[Any, Callable[[Any], Any], bool, bool], Fetcher]
    collate_fn: Callable[[Any], Any]
    auto_collation: bool
    drop_last: bool
    base_seed: int
    num_workers: int
    worker_init_fn: Callable[[int], None] | None
    poll_interval: float = 1.0
    shared_seed: int | None = None
    epoch: int = 0

    def new_fetcher(self, dataset: Any) -> Fetcher:
        """Builds a fetcher over ``dataset`` (this process's copy)."""
        return self.make_fetcher(dataset, self.collate_fn, self.auto_collation, self.drop_last)


def draw_base_seed(generator: torch.Generator | None) -> int:
    """The workers' base seed: one int64 draw from ``generator`` (or the global RNG), as torch's iterators do.

    Drawn in the main process when an iterator starts (and again when a
    resumed pass restores the generators to before that draw).
    """
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def numpy_seed(base_seed: int, worker_id: int) -> list[int]:
    """The numpy seed torch gives worker ``worker_id``: four 32-bit words from a SeedSequence.

    Mixing the worker id with both halves of the 64-bit base seed keeps the
    workers' numpy streams apart (consecutive plain seeds would give
    correlated streams).
    """
    entropy = [worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]
    return [int(word) for word in np.random.SeedSequence(entropy).generate_state(4)]


def _seed_everything(base_seed: int, worker_id: int) -> int:
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(numpy_seed(base_seed, worker_id))
    return seed


def worker_loop(
    config: WorkerConfig,
    worker_id: int,
    tasks: Connection,
    results: Connection,
    stop: Event,
    parent: ParentLink,
) -> None:
    """Runs one worker until told to stop or its parent dies; the target of each worker process.

    Args:
        config: The loader's frozen configuration.
        worker_id: This worker's index.
        tasks: Read end of this worker's task pipe.
        results: Write end of this worker's result pipe.
        stop: Set by the main process at shutdown: skip remaining tasks.
        parent: The loader's process; the worker exits when it is gone
            (see :mod:`datakit.procs.lifeline`).
    """
    global _worker_info
    try:
        if not parent.arm():
            return  # the parent died before the worker was ready
        torch.set_num_threads(1)
        seed = _seed_everything(config.base_seed, worker_id)
        set_epoch_seed(config.base_seed, config.epoch)
        dataset = config.dataset
        if config.shared_seed is not None:
            datapipes.reseed(dataset, config.shared_seed)
        _worker_info = WorkerInfo(id=worker_id, num_workers=config.num_workers, seed=seed, dataset=dataset)
        _publish_to_torch(_worker_info)
        where = f"DataLoader worker process {worker_id} (pid {os.getpid()})"
        try:
            if datapipes.is_datapipe(dataset):
                datapipes.shard(dataset, worker_id, config.num_workers)  # before worker_init_fn, as torch
            if config.worker_init_fn is not None:
                config.worker_init_fn(worker_id)
            fetcher: Fetcher | WorkerFailure = config.new_fetcher(dataset)
        except Exception:
            fetcher = WorkerFailure.capture(where)  # every task of this worker fails with it
        _serve(config, tasks, results, stop, where, fetcher, parent)
    except KeyboardInterrupt:
        pass  # the main process sees it too and shuts the workers down
    except (BrokenPipeError, ConnectionResetError, EOFError, channel.PeerGoneError):
        pass  # the main process closed its ends, is gone, or is shutting down
    finally:
        results.close()
        tasks.close()


def _serve(
    config: WorkerConfig,
    tasks: Connection,
    results: Connection,
    stop: Event,
    where: str,
    fetcher: Fetcher | WorkerFailure,
    parent: ParentLink,
) -> None:
    def keep_going() -> bool:
        return parent.alive() and not stop.is_set()

    exhausted = False
    while True:
        if not tasks.poll(config.poll_interval):
            if not keep_going():
                return
            continue
        message = tasks.recv()
        if message is STOP:
            return
        if isinstance(message, Resume):
            set_epoch_seed(config.base_seed, message.epoch)
            exhausted = False
            try:
                if message.shared_seed is not None:
                    datapipes.reseed(config.dataset, message.shared_seed)
                fetcher = config.new_fetcher(config.dataset)
            except Exception:
                fetcher = WorkerFailure.capture(where)
            continue
        if stop.is_set() or exhausted:
            continue
        task_id, indices = message
        payload: Any
        if isinstance(fetcher, WorkerFailure):
            payload = fetcher
        else:
            try:
                payload = fetcher.fetch(indices)
            except StopIteration:
                payload, exhausted = Exhausted(), True
            except Exception:
                payload = WorkerFailure.capture(where, indices)
        _send(results, task_id, payload, where, indices, keep_going)
        del payload, message


def _send(
    results: Connection, task_id: int, payload: Any, where: str, indices: Any, keep_going: Callable[[], bool]
) -> None:
    """Sends a result; a payload that cannot be pickled is replaced by a failure saying so."""
    transport_errors = (BrokenPipeError, ConnectionResetError, channel.PeerGoneError)
    try:
        channel.send(results, (task_id, payload), keep_going)
        return
    except transport_errors:
        raise
    except Exception:
        if isinstance(payload, WorkerFailure):
            failure = payload.without_type()
        else:
            failure = WorkerFailure.capture(where + " (sending the batch to the main process)", indices)
    try:
        channel.send(results, (task_id, failure), keep_going)
    except transport_errors:
        raise
    except Exception:
        channel.send(results, (task_id, failure.without_type()), keep_going)
