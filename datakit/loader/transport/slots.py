"""Batch-native transport: workers decode whole batches into reused shared memory.

torch hands each batch from a worker to the main process as new shared-memory
tensors: the worker builds one tensor per sample, stacks them into a fresh
shared-memory file, and the main process receives a file descriptor through
a helper thread and maps it. For small samples that hand-over costs more
than reading the data.

When a dataset can decode a batch straight into preallocated memory (it
satisfies :class:`~datakit.loader.workers.batch_contract.SupportsBatchSlots`; the datakit
datasets do, and can when every sample is a same-sized uint8 image tensor),
the loader instead allocates a fixed set of batch-sized *slots* in shared
memory once, tells a worker which slot to fill with each task
(:class:`~datakit.loader.workers.messages.SlotTask`), and receives only
``BatchInSlot(slot, count)``. The main process copies the batch out of the
slot (one memcpy; with ``pin_memory`` or ``device``, straight into pinned
memory) and frees the slot for the next task. The result is the batch
``default_collate`` would have built: ``[images, labels]``.

A slot is reserved when its task is sent and freed when that task's answer
arrives, whatever the answer (a batch, a failure, or a stale result after an
early break). Tasks sent while no slot is free travel the ordinary way, so
the transport never waits for itself.
"""

from __future__ import annotations

import collections
import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.data

from datakit.loader.resume.epoch_seed import epoch_seed
from datakit.loader.transport.borrowed import leased_tensor
from datakit.loader.transport.collate import is_default_collate
from datakit.loader.workers.batch_contract import BatchInfo, ShapeChanged, batch_steps, supports_batch_slots
from datakit.loader.workers.fetch import MapFetcher
from datakit.loader.workers.messages import BatchInSlot, SlotTask

__all__ = ["SlotBuffers", "SlotBook", "BatchSlots", "SlotFetcher", "batch_sample_shape", "lend",
           "shared_empty", "copy_out"]


@dataclass(frozen=True)
class SlotBuffers:
    """The shared-memory slots, as the workers see them (pickles by sharing, not copying).

    Attributes:
        images: uint8, ``(slots, batch_size, *sample_shape)``.
        labels: int64, ``(slots, batch_size)``.
    """

    images: torch.Tensor
    labels: torch.Tensor


def batch_sample_shape(dataset: Any, batch_size: int | None, collate_fn: Any,
                       auto_collation: bool) -> tuple[int, ...] | None:
    """The per-sample shape if this loader's batches can travel through slots, else None.

    Only when the result is guaranteed to equal the ordinary path's: automatic
    batching with a known batch size, the default collate function, and a
    dataset that satisfies :class:`~datakit.loader.workers.batch_contract.SupportsBatchSlots`
    and gives a shape.
    """
    if not auto_collation or batch_size is None:
        return None
    if not is_default_collate(collate_fn):
        return None
    if not supports_batch_slots(dataset):
        return None
    shape = dataset.batch_sample_shape()
    return tuple(shape) if shape is not None else None


class SlotBook:
    """Which slots are free, which task holds which, and which lent ones came back: any kind of slot.

    Thread-safe, since with ``pin_memory`` or ``device`` the pin thread
    receives (and so frees) while the main thread sends (and so reserves).

    Args:
        count: number of slots.
        lends: batches are lent to the consumer (see :func:`lend`) rather than copied out.
    """

    def __init__(self, count: int, lends: bool) -> None:
        self.lends = lends
        self._lock = threading.Lock()
        self._free = list(range(count - 1, -1, -1))
        self._held: dict[int, int] = {}  # task id -> slot
        self._returned: collections.deque[int] = collections.deque()  # lent slots given back

    def reserve(self, task_id: int) -> int | None:
        """A free slot for ``task_id``, or None when every slot is held (or lent)."""
        with self._lock:
            while self._returned:
                self._free.append(self._returned.popleft())
            if not self._free:
                return None
            slot = self._free.pop()
            self._held[task_id] = slot
            return slot

    def answered(self, task_id: int) -> int | None:
        """The slot ``task_id`` held, no longer held by it (None if it held none); :meth:`free` it, or
        :meth:`lend` it."""
        with self._lock:
            return self._held.pop(task_id, None)

    def free(self, slot: int) -> None:
        """``slot`` may take the next task."""
        with self._lock:
            self._free.append(slot)

    def lend(self, memory: torch.Tensor, slot: int) -> torch.Tensor:
        """``memory`` of ``slot``, lent: the slot is free again once it and every view of it are gone."""
        return lend(memory, self._returned, slot)


class BatchSlots(SlotBook):
    """The main process's side: the buffers, which are free, and which task holds which.

    Args:
        count: number of slots; the tasks that may be in flight.
        batch_size: rows per slot.
        sample_shape: shape of one image.
        lendable: slots beyond ``count``, so that batches can be lent (see :func:`lend`).
    """

    def __init__(self, count: int, batch_size: int, sample_shape: tuple[int, ...], lendable: int = 0) -> None:
        count += lendable
        super().__init__(count, lends=lendable > 0)
        self.buffers = SlotBuffers(
            images=shared_empty((count, batch_size, *sample_shape), torch.uint8),
            labels=shared_empty((count, batch_size), torch.int64),
        )

    def settle(self, task_id: int, payload: Any,
               take: Callable[[list[torch.Tensor]], Any] | None = None) -> Any:
        """Frees ``task_id``'s slot; a :class:`BatchInSlot` becomes its batch, copied out.

        Args:
            task_id: The task the payload answers.
            payload: The worker's answer.
            take: Makes the delivered batch from ``[images, labels]`` views of
                the slot; it must copy them, since the slot is reused as soon
                as it returns. The pin thread passes its pinning function, so a
                batch is copied once, from the slot straight into page-locked
                memory. By default the images are *lent* when the slots were
                made with room to lend (see :func:`lend`), else copied.
        """
        slot = self.answered(task_id)
        if slot is None:
            return payload
        lent = False
        try:
            if isinstance(payload, BatchInSlot):
                assert payload.slot == slot, f"task {task_id} answered in slot {payload.slot}, not {slot}"
                rest = [] if payload.rest is None else [payload.rest]  # dict samples' other fields
                views = [self.buffers.images[slot, :payload.count], self.buffers.labels[slot, :payload.count]]
                if take is not None:
                    payload = take([*views, *rest])
                elif self.lends:
                    payload, lent = [self.lend(views[0], slot), copy_out(views[1]), *rest], True
                else:
                    payload = [*(copy_out(view) for view in views), *rest]
        finally:
            if not lent:
                self.free(slot)
        return payload


def lend(rows: torch.Tensor, returned: collections.deque[int], slot: int) -> torch.Tensor:
    """A tensor over ``rows`` of ``slot`` itself, not a copy; ``slot`` goes to ``returned`` when it dies.

    The slot comes back only when the batch and everything cut from it are
    gone (:mod:`datakit.loader.transport.borrowed`). The main process then never copies a
    batch: it reads the workers' memory. A user who keeps many batches holds
    many slots; tasks sent while none is free travel the ordinary way, so
    nothing waits for a lent slot.
    """
    return leased_tensor(rows.numpy(), functools.partial(returned.append, slot))


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory whose pages nobody has touched yet.

    ``torch.empty(...).share_memory_()`` copies the empty tensor into the new
    shared memory, page by page, so the main process would hold every slot's
    pages (300 MB for six 256-image batches of 256x256) before a worker wrote
    any; shared memory made directly is only paged in by whoever writes or
    reads it.
    """
    # import-graph: allow-private: torch's own way to allocate shared storage (its collate uses it)
    storage: torch.UntypedStorage = torch.UntypedStorage._new_shared(  # type: ignore[no-untyped-call]
        math.prod(shape) * dtype.itemsize)
    flat = torch.empty(0, dtype=dtype).set_(storage)
    return flat.view(shape)


def copy_out(rows: torch.Tensor) -> torch.Tensor:
    """A private copy of ``rows``, made by numpy on this thread.

    ``Tensor.clone`` would split the copy over torch's intra-op threads; on a
    machine whose cores are busy with the loader's own workers, waiting for
    those threads to be scheduled costs milliseconds per batch.
    """
    return torch.from_numpy(rows.numpy().copy())


class SlotFetcher(MapFetcher):
    """A worker's fetcher: :class:`SlotTask` into a slot, anything else the ordinary way.

    A slot task whose ``read_batch_into`` raises ``ValueError`` (a sample of
    another size than the slot's) is fetched the ordinary way instead. After
    a batch is read into its slot, the dataset's ``augment`` step
    (:class:`~datakit.loader.workers.batch_contract.BatchSteps`) runs on it there, unless
    the loader runs it on the device.

    Args:
        dataset, collate_fn, auto_collation, drop_last: as for :class:`MapFetcher`.
        buffers: the shared slots.
        augment_here: run the dataset's ``augment`` step in this process.
    """

    def __init__(self, dataset: Any, collate_fn: Any, auto_collation: bool, drop_last: bool,
                 buffers: SlotBuffers, augment_here: bool = True) -> None:
        # slots are used with the default collate function only, so collated batches are mixed
        super().__init__(dataset, collate_fn, auto_collation, drop_last, mix_batches=True)
        self.buffers = buffers
        steps = batch_steps(dataset)
        self._augment = steps.augment if steps is not None and (augment_here or steps.on_host) else None
        self._shapes_kept = True  # until a callable of the user's changes a batch's shape

    def fetch(self, indices: Any) -> Any:
        if not isinstance(indices, SlotTask):
            return super().fetch(indices)
        if not self._shapes_kept:  # this dataset's batches do not fit the slots: no use decoding twice
            return super().fetch(indices.indices)
        count = len(indices.indices)
        images = self.buffers.images[indices.slot, :count]
        labels = self.buffers.labels[indices.slot, :count].numpy()
        try:
            rest = self.dataset.read_batch_into(indices.indices, images.numpy(), labels)
        except ValueError:
            # A sample that does not fit the slot (images of mixed sizes; numpy's broadcasting error):
            # read this batch the ordinary way, which gives it if it can be built and else raises what
            # default_collate says about mixed sizes (which samples, and what to do). The slot is freed
            # by whatever answer the task gets.
            return super().fetch(indices.indices)
        info = BatchInfo(tuple(int(index) for index in indices.indices), epoch_seed())
        if self._augment is not None:
            try:
                augmented = self._augment(images, info)
            except ShapeChanged:
                # A callable of the user's changed the shape: the slot cannot hold this batch, and
                # most likely no other either. Read it (and the rest) the ordinary way.
                self._shapes_kept = False
                return super().fetch(indices.indices)
            if augmented.data_ptr() != images.data_ptr():
                images.copy_(augmented)
        return BatchInSlot(indices.slot, count, info, rest)
