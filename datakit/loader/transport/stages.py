"""The batch stages: what happens to a batch between the worker's answer and the training loop.

Three named stages, built once per iterator from the loader's backends:

1. **settle**: an answer that came through a shared-memory batch slot
   (:mod:`datakit.loader.transport.slots`) becomes its batch, copied out, and the slot
   is freed; every answer passes here, so a slot is freed whatever the answer.
   A dataset's per-batch *finish* step (:func:`~datakit.loader.workers.batch_contract.batch_steps`,
   e.g. normalising uint8 pixels into floats, mixing) runs here, reading the
   slot, when batches stay on the CPU (its *augment* step already ran in the
   worker, on the slot).
2. **pin**: a batch goes into page-locked memory: a slot of the
   :class:`~datakit.loader.transport.staging.PinnedRing` when batches go on to a device,
   else a pinned copy (``pin_memory``), else it stays as it is. With workers
   this runs on the pin thread (:func:`~datakit.loader.transport.pinning.pin_loop`),
   where a batch in a shared slot is pinned straight out of it: one copy.
3. **stage**: with a device, the :class:`~datakit.loader.transport.staging.DeviceStager`
   copies pinned batches to the device one batch ahead of the consumer, and
   the augment and finish steps run there, on the device: uint8 crosses the bus.

The stages hold no reference to their iterator, so the pin thread, which
calls them, does not keep the iterator alive.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

from datakit.loader.transport.device import DeviceBackend
from datakit.loader.transport.nested import map_tensors
from datakit.loader.transport.ragged import RaggedSlots
from datakit.loader.transport.slots import BatchSlots
from datakit.loader.transport.staging import DeviceStager, Pinned, PinnedRing
from datakit.loader.workers.batch_contract import BatchInfo, BatchSteps, with_rest
from datakit.loader.workers.messages import BatchInArena, BatchInSlot, Exhausted
from datakit.procs.failure import WorkerFailure

__all__ = ["BatchStages"]

# Extra ring slots beyond the tasks in flight: one being filled, one spare.
_RING_SPARE_SLOTS = 2


def _never() -> bool:
    return False


class BatchStages:
    """Settles, pins and stages one iterator's batches.

    Args:
        device_backend: Stages batches on a device; None without ``device=``.
        pin_backend: Pins batches (``pin_memory``) when there is no device.
        in_flight: Batches that can be pinned and not yet delivered (tasks in
            flight); the pinned ring gets that many slots plus spares.
        slots: The shared-memory batch slots (fixed-size or ragged) the workers answer through, if any.
        should_stop: True once the iterator shuts down; a pin waiting for a
            free ring slot gives up then.
        steps: The dataset's batch steps for batches that came through a slot,
            or None. Without a device the workers ran ``augment`` and
            ``finish`` runs here; with one, both run on the device, unless
            they call the user's code (``steps.on_host``): then as without a
            device, and the finished batch is copied to the device.
    """

    def __init__(
        self,
        device_backend: DeviceBackend | None,
        pin_backend: DeviceBackend | None,
        in_flight: int = 0,
        slots: BatchSlots | RaggedSlots | None = None,
        should_stop: Callable[[], bool] = _never,
        steps: BatchSteps | None = None,
    ) -> None:
        self._slots = slots
        self._steps = steps
        # Steps that call the user's code stay off the device: augment in the workers, finish here.
        on_device = device_backend is not None and not (steps is not None and steps.on_host)
        self._host_step = steps.finish if steps is not None and not on_device else None
        self._device_steps = steps is not None and on_device and (steps.augment or steps.finish) is not None
        self._pin_backend = pin_backend
        self._should_stop = should_stop
        self._thread_backend = device_backend if device_backend is not None else pin_backend
        self._ring: PinnedRing | None = None
        self._stager: DeviceStager | None = None
        if device_backend is not None:
            self._ring = PinnedRing(device_backend, in_flight + _RING_SPARE_SLOTS)
            self._stager = DeviceStager(device_backend, self._ring)

    @property
    def threaded(self) -> bool:
        """Whether, with workers, batches go through a thread of their own (the pin thread).

        They do when they are pinned (into the ring or a pinned copy), and when
        a dataset's finish step runs on the host: the thread then finishes each
        batch while the training loop works on the previous one.
        """
        return self._ring is not None or self._pin_backend is not None or self._host_step is not None

    def bind_thread(self) -> None:
        """Prepares the calling thread (the pin thread, first): one intra-op thread, the pinning device.

        The finish step and the copies out of the slots are small elementwise
        passes; split over torch's intra-op threads they wake the OpenMP pool
        for each, whose threads then spin on the cores the loader's workers
        need (measured: 2.4 times the CPU for the same work). The setting is
        this thread's own; the training loop's threads keep theirs.
        """
        torch.set_num_threads(1)
        if self._thread_backend is not None:
            self._thread_backend.bind_thread()

    def settle(self, task_id: int, payload: Any) -> Any:
        """Stage 1: a worker's answer to ``task_id``, a batch in a slot copied out of it (slot freed)."""
        if self._slots is None:
            return payload
        if self._host_step is None:
            return self._slots.settle(task_id, payload)
        info = _info(payload)
        return self._slots.settle(task_id, payload, take=lambda views: self._finish_out_of_slot(views, info))

    def _finish_out_of_slot(self, views: list[torch.Tensor], info: BatchInfo) -> list[torch.Tensor]:
        """``finish(images, labels)`` read from a slot's views, owning their memory."""
        assert self._host_step is not None
        images, labels = views[0], views[1]
        finished, new_labels = self._host_step(images, labels, info)
        if finished.data_ptr() == images.data_ptr():  # a finish that returned its input: copy it out
            finished = finished.clone()
        if new_labels.data_ptr() == labels.data_ptr():
            new_labels = new_labels.clone()
        return [finished, new_labels, *views[2:]]  # a slot's dict samples' other fields travel on

    def _finish_on_device(self, batch: list[torch.Tensor], info: BatchInfo) -> list[torch.Tensor]:
        assert self._steps is not None
        images, labels = batch[0], batch[1]
        if self._steps.augment is not None:
            images = self._steps.augment(images, info)
        if self._steps.finish is not None:
            images, labels = self._steps.finish(images, labels, info)
        return [images, labels, *batch[2:]]

    def pin(self, batch: Any) -> Any:
        """Stage 2: ``batch`` in page-locked memory (a :class:`Pinned` ring slot with a device)."""
        if self._ring is not None:
            return self._ring.pin(batch, should_stop=self._should_stop)
        if self._pin_backend is not None:
            return map_tensors(batch, self._pin_backend.pin)
        return batch

    def settle_and_pin(self, task_id: int, payload: Any) -> Any:
        """Stages 1 and 2 as the pin thread runs them: a batch pinned, anything else as it is.

        A batch that came through a slot is pinned straight out of it: one copy
        into page-locked memory, not a private copy and then a pinned one.
        """
        if self._slots is not None:
            in_slot = isinstance(payload, (BatchInSlot, BatchInArena))
            info = _info(payload)
            if in_slot and self._ring is not None and self._device_steps:  # uint8 to the device
                pinned = self._slots.settle(task_id, payload, take=self.pin)
                payload = dataclasses.replace(pinned, finish=functools.partial(self._finish_on_device,
                                                                               info=info))
            elif in_slot and self._host_step is not None:  # the finished batch is what gets pinned
                payload = self._slots.settle(
                    task_id, payload, take=lambda views: self.pin(self._finish_out_of_slot(views, info)))
            else:
                payload = self._slots.settle(task_id, payload, take=self.pin)
            if in_slot:
                return payload
        if isinstance(payload, (WorkerFailure, Exhausted)):
            return payload
        return self.pin(payload)

    def stage(self, next_batch: Callable[[], Any]) -> Any:
        """Stage 3: the batch the consumer gets next.

        Args:
            next_batch: The next pinned batch; raises StopIteration at the end
                or the error that stops the pass (with a device, raised after
                the batch already on its way is delivered).
        """
        if self._stager is None:
            return with_rest(next_batch())

        def next_pinned() -> Pinned:
            pinned = next_batch()
            assert isinstance(pinned, Pinned), "with a device, the pin stage puts every batch in the ring"
            return pinned

        return with_rest(self._stager.next(next_pinned))

    def discard(self, payload: Any) -> None:
        """Gives back what an answer that will not be delivered holds (a ring slot)."""
        if isinstance(payload, Pinned) and self._ring is not None:
            self._ring.release(payload.slot)

    def reset(self) -> None:
        """Forgets the batch staged ahead and the end of the pass (a new pass begins)."""
        if self._stager is not None:
            self._stager.reset()


def _info(payload: Any) -> BatchInfo:
    """The batch's indices and seed, as the worker sent them with a batch in a slot."""
    info = payload.info if isinstance(payload, BatchInSlot) else None
    return info if info is not None else BatchInfo((), None)
