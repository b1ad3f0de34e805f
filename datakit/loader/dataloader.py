"""``datakit.DataLoader``: torch's ``DataLoader`` interface, datakit's engine.

This module only validates arguments (raising torch's errors for the same
mistakes), builds the default sampler, batch sampler and collate function as
torch does, and hands them to iterators as a
:class:`~datakit.loader.plan.LoaderPlan`; the work happens in
:mod:`datakit.loader.iterators` and below. See ``docs/loader.md``.

The class is a subclass of ``torch.utils.data.DataLoader`` (as torchdata's
``StatefulDataLoader`` is), without running torch's constructor: trainers
dispatch on ``isinstance``. PyTorch Lightning and Hugging Face Accelerate skip
their ``iter()`` probe for torch's loaders (a probe draws an epoch seed, and
batches would then differ from torch's), and re-create them from their
constructor arguments with a ``DistributedSampler`` under DDP; every argument
of :class:`DataLoader` is therefore readable as an attribute of the same name.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Dataset, IterableDataset, Sampler

from datakit.loader.arguments import check_sampling_arguments, check_worker_arguments
from datakit.loader.epochs import EpochKeeper
from datakit.loader.iterators import MultiProcessIterator, SingleProcessIterator
from datakit.loader.plan import LoaderPlan
from datakit.loader.sampling.batch_sampler import BatchSampler, InfiniteConstantSampler
from datakit.loader.sampling.index import RandomSampler, SequentialSampler
from datakit.loader.sampling.lazy import LazyRandomSampler
from datakit.loader.transport.collate import default_collate, default_convert
from datakit.loader.transport.device import (
    CpuBackend,
    CudaBackend,
    DeviceBackend,
    parse_device,
    select_backend,
)

__all__ = ["DataLoader"]

T = TypeVar("T")

# torch's ``_dataset_kind`` values (``_DatasetKind.Map``, ``.Iterable``), for code that reads that attribute.
_MAP_KIND, _ITERABLE_KIND = 0, 1

# Above this many samples, shuffle=True (a full permutation per epoch) warns and names shuffle="lazy".
LARGE_DATASET = 10_000_000

# Attributes that cannot change once the loader exists (as in torch).
_FROZEN_ATTRIBUTES = frozenset(
    {"batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"}
)


class DataLoader(TorchDataLoader[T]):
    """Iterates over a dataset in batches, optionally with worker processes and device staging.

    Accepts torch's arguments with torch's meaning and yields the same batches
    as :class:`torch.utils.data.DataLoader` for the same generator seed.

    Args:
        dataset: A map-style dataset (``__getitem__``, ``__len__``, optionally
            ``__getitems__``, called once per batch) or an iterable dataset.
        batch_size: Samples per batch; None turns automatic batching off.
        shuffle: Visit a map-style dataset in random order: ``True`` in torch's
            order (a ``randperm`` of the dataset at every epoch start),
            ``"lazy"`` in an order computed on the fly from one seed drawn from
            ``generator`` per epoch (:class:`~datakit.samplers.LazyRandomSampler`:
            O(1) memory and epoch start, for datasets of 10^7 samples and more).
        sampler: Which indices to visit (excludes ``shuffle``).
        batch_sampler: Which batches of indices to visit (excludes
            ``batch_size``, ``shuffle``, ``sampler`` and ``drop_last``).
        num_workers: Worker processes; 0 loads in the calling process.
        collate_fn: Builds a batch from a list of samples; defaults to
            :func:`~datakit.loader.transport.collate.default_collate` (or
            :func:`~datakit.loader.transport.collate.default_convert` without batching).
        pin_memory: Deliver CPU tensors in page-locked memory (pinned on a thread).
        drop_last: Drop a short final batch.
        timeout: Seconds to wait for a batch from the workers before raising; 0 waits forever.
        worker_init_fn: Called in each worker with its id, after seeding.
        multiprocessing_context: Start method name (``"fork"``, ``"spawn"``,
            ``"forkserver"``) or context; default ``fork`` on Linux.
        generator: Generator for the default random sampler and the workers' base seed.
        prefetch_factor: Batches in flight per worker (default 2 with workers; at least 1).
        persistent_workers: Keep the workers between epochs.
        in_order: Deliver batches in sampler order; False hands them out as they finish.
        device: Deliver batches on this device (``"cuda"``, ``"cuda:N"``, a
            ``torch.device``): batches are copied into reused pinned buffers and
            to the device on a side stream, one batch ahead. ``"cpu"`` delivers
            them unstaged. Without CUDA, and for ``"mps"``: a warning naming the
            device and CPU tensors.

    Raises:
        ValueError: For the same conflicting or invalid options torch rejects;
            for ``prefetch_factor=0`` with workers (torch's own loader accepts
            it and fails at ``iter()``); for a ``device`` that is not a device
            name, a CUDA index past the machine's devices, or a device type
            batches cannot be staged to.
        TypeError: ``device`` is neither a string nor a ``torch.device``.

    Example:
        >>> loader = DataLoader(range(10), batch_size=4)
        >>> [batch.tolist() for batch in loader]
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    __initialized = False

    def __init__(
        self,
        dataset: Dataset[T] | Iterable[T],
        batch_size: int | None = 1,
        shuffle: bool | Literal["lazy"] | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[T]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: str | multiprocessing.context.BaseContext | None = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        in_order: bool = True,
        device: str | torch.device | None = None,
    ) -> None:
        prefetch_factor = check_worker_arguments(num_workers, timeout, prefetch_factor, persistent_workers)
        self.dataset = dataset  # type: ignore[assignment]  # torch annotates a map-style Dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        self._is_iterable = isinstance(dataset, IterableDataset)
        self._dataset_kind = _ITERABLE_KIND if self._is_iterable else _MAP_KIND  # torch's attribute
        shuffle, batch_size, drop_last = check_sampling_arguments(
            dataset, self._is_iterable, shuffle, sampler, batch_sampler, batch_size, drop_last
        )
        self._shuffle = shuffle  # read through the ``shuffle`` property
        if sampler is None:
            sampler = default_sampler(dataset, self._is_iterable, shuffle, generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.pin_memory_device = ""  # torch's attribute: datakit stages with device= instead
        self.device = None if device is None else parse_device(device)
        self._device_backend: DeviceBackend | None = None
        self._pin_backend: DeviceBackend | None = None
        self._choose_backends()
        self._IterableDataset_len_called: int | None = None  # type: ignore[assignment]  # torch's says None
        self._iterator: MultiProcessIterator | None = None  # type: ignore[assignment]  # datakit's own iterator
        self._epochs = EpochKeeper(self._plan())
        self.__initialized = True
        self._check_worker_count()

    def _choose_backends(self) -> None:
        if self.device is not None and self.device.type != "cpu":
            self._device_backend = select_backend(
                self.device, stacklevel=4
            )  # the user's DataLoader(...) line
        elif self.pin_memory:
            if torch.cuda.is_available():
                self._pin_backend = CudaBackend(torch.device("cuda"))
            else:
                warnings.warn(
                    "'pin_memory' argument is set as true but no accelerator is found, "
                    "then device pinned memory won't be used.",
                    stacklevel=3,
                )
                self._pin_backend = CpuBackend()

    @property
    def shuffle(self) -> bool | str | None:
        """The ``shuffle`` argument (False when not given; torch's loader does not keep it).

        Read-only and not in ``vars(loader)``: a tool that re-creates the loader
        from its attributes with a sampler of its own (Lightning under DDP)
        must not pass ``shuffle=True`` beside that sampler, which is refused.
        """
        return self._shuffle

    @property
    def multiprocessing_context(self) -> multiprocessing.context.BaseContext | None:
        """The context that starts the workers (None: fork on Linux)."""
        context: multiprocessing.context.BaseContext | None = self.__multiprocessing_context
        return context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: str | multiprocessing.context.BaseContext | None) -> None:
        if context is not None:
            if self.num_workers <= 0:
                raise ValueError(
                    "multiprocessing_context can only be used with multi-process loading "
                    f"(num_workers > 0), but got num_workers={self.num_workers}"
                )
            if isinstance(context, str):
                methods = multiprocessing.get_all_start_methods()
                if context not in methods:
                    raise ValueError(
                        f"multiprocessing_context option should specify a valid start method in {methods!r}, "
                        f"but got multiprocessing_context={context!r}"
                    )
                context = multiprocessing.get_context(context)
            if not isinstance(context, multiprocessing.context.BaseContext):
                raise TypeError(
                    "multiprocessing_context option should be a valid context object or a string specifying "
                    f"the start method, but got multiprocessing_context={context}"
                )
        self.__multiprocessing_context = context

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__initialized and name in _FROZEN_ATTRIBUTES:
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def _plan(self) -> LoaderPlan:
        """What the next pass works from: the loader's settings as they are now."""
        return LoaderPlan(
            dataset=self.dataset,
            is_iterable=self._is_iterable,
            sampler=self.sampler,
            batch_sampler=self.batch_sampler,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            collate_fn=self.collate_fn,
            generator=self.generator,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch_factor,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            persistent_workers=self.persistent_workers,
            in_order=self.in_order,
            device_backend=self._device_backend,
            pin_backend=self._pin_backend,
            reported_length=self._IterableDataset_len_called,
        )

    def _make_iterator(self) -> SingleProcessIterator | MultiProcessIterator:
        if self.num_workers == 0:
            return SingleProcessIterator(self._plan(), self._epochs)
        return MultiProcessIterator(self._plan(), self._epochs)

    def __iter__(self) -> SingleProcessIterator | MultiProcessIterator:  # type: ignore[override]
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None or self._iterator.is_closed:
                self._iterator = MultiProcessIterator(self._plan(), self._epochs)
            else:
                self._iterator.restart(self._plan())
            return self._iterator
        return self._make_iterator()

    def state_dict(self) -> dict[str, Any]:
        """Where iteration stands, as small, versioned, JSON-serialisable plain data.

        Save it beside the model checkpoint; :meth:`load_state_dict` on a loader
        built the same way (any ``num_workers``; any world size with a
        :class:`~datakit.samplers.DistributedSampler`) continues with exactly the
        batches this loader would yield next. Describes the latest ``iter()``.
        See ``docs/resume.md``.

        Raises:
            TypeError: The dataset is an ``IterableDataset``.
        """
        return self._epochs.state_dict(self._plan())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Makes the next ``iter()`` continue from ``state`` (from :meth:`state_dict`).

        The delivered batches of the saved epoch are skipped without loading
        them; a state saved between epochs starts the next epoch.

        Raises:
            ValueError: ``state`` is not a datakit loader state of a supported
                version, or was saved with another kind of sampler.
            TypeError: The dataset is an ``IterableDataset``.
        """
        self._epochs.load_state_dict(self._plan(), state)

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` starts (unless ``set_epoch`` is called on the sampler)."""
        return self._epochs.next_epoch

    def __len__(self) -> int:
        if self._is_iterable:
            length = self._IterableDataset_len_called = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def _check_worker_count(self) -> None:
        """Warns, as torch does, when there are more workers than usable CPUs."""
        if not self.num_workers:
            return
        try:
            cpus: int | None = len(os.sched_getaffinity(0))
        except AttributeError:
            cpus = os.cpu_count()
        if cpus is None or self.num_workers > cpus:
            warnings.warn(
                f"This DataLoader will create {self.num_workers} worker processes in total. "
                f"Our suggested max number of worker in current system is {cpus}, which is smaller than "
                "what this DataLoader is going to create. Please be aware that excessive worker creation "
                "might get DataLoader running slow or even freeze, lower the worker number to avoid "
                "potential slowness/freeze if necessary.",
                stacklevel=3,
            )


def default_sampler(
    dataset: Any, is_iterable: bool, shuffle: bool | Literal["lazy"] | None, generator: torch.Generator | None
) -> Sampler[Any]:
    """The sampler torch's loader builds when none is given (``"lazy"``: datakit's on-the-fly order).

    Warns, at the user's ``DataLoader(...)`` line, when ``shuffle=True`` would
    materialise a permutation of a very large dataset.
    """
    if is_iterable:
        return InfiniteConstantSampler()
    if shuffle == "lazy":
        return LazyRandomSampler(dataset, generator=generator)
    if shuffle:
        _warn_if_large(dataset)
        return RandomSampler(dataset, generator=generator)
    return SequentialSampler(dataset)


def _warn_if_large(dataset: Any) -> None:
    """shuffle=True materialises a permutation of the dataset per epoch: say so when that costs seconds."""
    try:
        length = len(dataset)
    except (TypeError, NotImplementedError):
        return
    if length > LARGE_DATASET:
        warnings.warn(
            f"DataLoader(shuffle=True) over {length} samples materialises a permutation of all of them "
            "at every epoch start (seconds and gigabytes at this size); shuffle='lazy' computes the order "
            "on the fly in O(1) memory (another order than torch's; see docs/performance.md)",
            stacklevel=4,  # the user's DataLoader(...) line, through default_sampler and __init__
        )
