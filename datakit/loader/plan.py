"""The loader's plan: everything one pass works from, in one frozen object.

:class:`~datakit.DataLoader` validates its arguments and builds the samplers,
the collate function and the device backends; :class:`LoaderPlan` carries the
result to the iterators and to the epoch keeper
(:class:`~datakit.loader.epochs.EpochKeeper`), so neither reads the loader
itself. The loader builds a fresh plan for every ``iter()`` (and every
``state_dict()`` / ``load_state_dict()``): torch's loader reads its
attributes when an iterator starts, so a ``num_workers`` or ``collate_fn``
changed between epochs takes effect at the next one, here too.
"""

from __future__ import annotations

import multiprocessing.context
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from datakit.loader.transport.device import DeviceBackend

__all__ = ["LoaderPlan"]


@dataclass(frozen=True)
class LoaderPlan:
    """One pass's configuration, as the :class:`~datakit.DataLoader` resolved it.

    Attributes:
        dataset: The dataset.
        is_iterable: The dataset is an ``IterableDataset``.
        sampler: The sampler (an ``InfiniteConstantSampler`` for an iterable dataset).
        batch_sampler: The batch sampler; None without automatic batching.
        batch_size: Samples per batch; None without automatic batching or with
            a user's batch sampler.
        drop_last: Drop a short final batch (an iterable dataset's fetcher drops it).
        collate_fn: Builds a batch from samples (or converts one sample).
        generator: The loader's generator (the base seed is drawn from it).
        num_workers: Worker processes; 0 loads in the calling thread.
        prefetch_factor: Tasks in flight per worker; None without workers.
        timeout: Seconds to wait for a worker's result; 0 waits forever.
        worker_init_fn: Called in each worker with its id, after seeding.
        multiprocessing_context: Starts the workers; None: the default (fork on Linux).
        persistent_workers: Keep the workers between passes.
        in_order: Deliver batches in sampler order.
        device_backend: Stages batches on a device; None without ``device=``.
        pin_backend: Pins batches (``pin_memory`` without a device); None otherwise.
        reported_length: What ``len(loader)`` read from an iterable dataset,
            if it was called (more batches than that draws torch's warning).
    """

    dataset: Any
    is_iterable: bool
    sampler: Any
    batch_sampler: Any
    batch_size: int | None
    drop_last: bool
    collate_fn: Callable[[Any], Any]
    generator: torch.Generator | None
    num_workers: int
    prefetch_factor: int | None
    timeout: float
    worker_init_fn: Callable[[int], None] | None
    multiprocessing_context: multiprocessing.context.BaseContext | None
    persistent_workers: bool
    in_order: bool
    device_backend: DeviceBackend | None
    pin_backend: DeviceBackend | None
    reported_length: int | None

    @property
    def auto_collation(self) -> bool:
        """Batches are built from lists of indices (there is a batch sampler)."""
        return self.batch_sampler is not None

    @property
    def index_sampler(self) -> Any:
        """What each task's indices come from: the batch sampler, else the sampler."""
        return self.batch_sampler if self.auto_collation else self.sampler
