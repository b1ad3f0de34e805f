"""Device staging: reused pinned buffers and copies to the device one batch ahead.

:class:`PinnedRing` owns a fixed set of pinned host buffers (slots). A batch is
copied into a free slot (on the pin thread); the host-to-device copy is then
queued from that slot on a side stream and an event is recorded after it; the
slot goes back to the ring with that event, and whoever takes the slot next
waits for the event before writing into it. So the ring never overwrites
memory a copy still reads.

:class:`DeviceStager` keeps one batch in flight: when the consumer takes batch
``k`` it first makes the consumer's stream wait for batch ``k``'s copy event
and marks batch ``k``'s tensors as used on the consumer's stream
(``record_stream``, so the caching allocator does not hand their memory to the
side stream while the consumer still reads it), then queues batch ``k + 1``'s
copy, which overlaps with the consumer's work on batch ``k``.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from datakit.loader.transport.device import DeviceBackend, Event
from datakit.loader.transport.nested import iter_tensors, map_tensors

__all__ = ["PinnedBuffers", "Pinned", "PinnedRing", "DeviceStager", "RingClosedError"]


class RingClosedError(RuntimeError):
    """The ring was closed while waiting for a free slot (the loader is shutting down)."""


@dataclass
class PinnedBuffers:
    """One set of pinned buffers of the ring, one per tensor of a batch (not a shared-memory batch slot:
    those are :mod:`datakit.loader.transport.slots`).

    Attributes:
        number: The slot's index in the ring.
        buffers: Pinned uint8 buffers, grown on demand.
        ready: Recorded after the last copy out of this slot; None when unused.
    """

    number: int
    buffers: list[torch.Tensor] = field(default_factory=list)
    ready: Event | None = None


@dataclass(frozen=True)
class Pinned:
    """A batch whose tensors are views of a ring slot's pinned buffers.

    Attributes:
        batch: The batch.
        slot: The slot holding its tensors.
        finish: Applied to the batch once it is on the device (a dataset's
            per-batch step, such as normalising a uint8 batch), or None.
    """

    batch: Any
    slot: PinnedBuffers
    finish: Callable[[Any], Any] | None = None


class PinnedRing:
    """A fixed number of reusable pinned buffer sets.

    Args:
        backend: Allocates the pinned memory.
        slots: How many batches can be pinned and not yet copied at once.
        poll_interval: Seconds between checks of ``should_stop`` while waiting.
    """

    def __init__(self, backend: DeviceBackend, slots: int, poll_interval: float = 0.1) -> None:
        self._backend = backend
        self._free: queue.Queue[PinnedBuffers] = queue.Queue()
        self._poll_interval = poll_interval
        self.size = slots
        for number in range(slots):
            self._free.put(PinnedBuffers(number))

    def free_slots(self) -> int:
        """How many slots are free now."""
        return self._free.qsize()

    def acquire(self, should_stop: Callable[[], bool] = lambda: False) -> PinnedBuffers:
        """Takes a free slot, waiting for one if needed, and for its last copy to finish.

        Raises:
            RingClosedError: ``should_stop()`` became true while waiting.
        """
        while True:
            try:
                slot = self._free.get(timeout=self._poll_interval)
                break
            except queue.Empty:
                if should_stop():
                    raise RingClosedError("the loader is shutting down") from None
        if slot.ready is not None:
            slot.ready.synchronize()
            slot.ready = None
        return slot

    def release(self, slot: PinnedBuffers, ready: Event | None = None) -> None:
        """Returns a slot; ``ready`` is the event after the last copy out of it."""
        slot.ready = ready
        self._free.put(slot)

    def pin(self, batch: Any, should_stop: Callable[[], bool] = lambda: False) -> Pinned:
        """Copies a batch's tensors into a free slot."""
        slot = self.acquire(should_stop)
        try:
            position = iter(range(1 << 62))
            pinned = map_tensors(batch, lambda tensor: self._copy_in(slot, next(position), tensor))
        except BaseException:
            self.release(slot)
            raise
        return Pinned(pinned, slot)

    def _copy_in(self, slot: PinnedBuffers, position: int, tensor: torch.Tensor) -> torch.Tensor:
        nbytes = tensor.numel() * tensor.element_size()
        if position == len(slot.buffers):
            slot.buffers.append(self._backend.empty_pinned(nbytes))
        elif slot.buffers[position].numel() < nbytes:
            slot.buffers[position] = self._backend.empty_pinned(nbytes)
        view = slot.buffers[position][:nbytes].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        return view


@dataclass(frozen=True)
class _Staged:
    batch: Any
    copied: Event
    finish: Callable[[Any], Any] | None


class DeviceStager:
    """Copies pinned batches to the device on a side stream, one batch ahead of the consumer.

    Args:
        backend: The device layer.
        ring: Where pinned batches come from; slots are returned after their copy is queued.
    """

    def __init__(self, backend: DeviceBackend, ring: PinnedRing) -> None:
        self._backend = backend
        self._ring = ring
        self._stream = backend.new_stream()
        self._ahead: _Staged | None = None
        self._pending_error: BaseException | None = None
        self._ended = False

    def _stage_next(self, next_pinned: Callable[[], Pinned]) -> None:
        """Queues the copy of the next batch, or remembers the end or the error."""
        try:
            pinned = next_pinned()
        except StopIteration:
            self._ended = True
            return
        except BaseException as error:  # delivered after the batch already staged
            self._pending_error = error
            return
        try:
            with self._backend.use_stream(self._stream):
                on_device = map_tensors(pinned.batch, self._backend.to_device)
                copied = self._backend.new_event()
                copied.record(self._stream)
        except BaseException:
            self._ring.release(pinned.slot)
            raise
        self._ring.release(pinned.slot, copied)
        self._ahead = _Staged(on_device, copied, pinned.finish)

    def next(self, next_pinned: Callable[[], Pinned]) -> Any:
        """Returns the next batch on the device, ready to use on the caller's current stream.

        Args:
            next_pinned: Returns the next :class:`Pinned` batch; raises
                StopIteration at the end, or the error that stops the epoch
                (raised here after the batch already in flight is delivered).
        """
        if self._ahead is None and not self._ended and self._pending_error is None:
            self._stage_next(next_pinned)
        if self._ahead is None:
            if self._pending_error is not None:
                error, self._pending_error = self._pending_error, None
                raise error
            raise StopIteration
        current, self._ahead = self._ahead, None
        consumer = self._backend.current_stream()
        self._backend.wait_event(consumer, current.copied)
        for tensor in iter_tensors(current.batch):
            self._backend.record_stream(tensor, consumer)
        if not self._ended and self._pending_error is None:
            self._stage_next(next_pinned)
        return current.batch if current.finish is None else current.finish(current.batch)

    def reset(self) -> None:
        """Forgets the batch in flight and the end state (a new epoch begins)."""
        self._ahead = None
        self._pending_error = None
        self._ended = False
