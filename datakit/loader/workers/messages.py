"""The messages exchanged between the loader's main process and its workers.

Each worker has two one-way pipes: tasks (main to worker) and results (worker
to main). Messages are small so that neither pipe fills: batches travel as
tensors in shared memory, so only handles are pickled.

Main to worker:

* ``(task_id, indices)``: fetch and collate these indices (a list of indices
  with auto-batching, a single index without; placeholders for iterable
  datasets).
* ``(task_id, SlotTask(indices, slot))``: read this batch into a shared-memory
  slot (see :mod:`datakit.loader.transport.slots`), or a ragged slot's arena
  (:mod:`datakit.loader.transport.ragged`).
* :class:`Resume`: a new epoch begins (persistent workers); rebuild the
  dataset iterator and accept tasks again.
* :data:`STOP`: leave the loop and exit.

Worker to main:

* ``(task_id, payload)`` where ``payload`` is the batch, a
  :class:`BatchInSlot` (the batch is in its slot), a :class:`BatchInArena`
  (its tensors are in a ragged slot's arena), a
  :class:`~datakit.procs.failure.WorkerFailure`, or :class:`Exhausted` when an
  iterable dataset ran out in this worker.

The pin thread forwards results to the main thread as
``(worker_id, task_id, payload)``; its own failure arrives as :class:`ThreadFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from datakit.loader.workers.batch_contract import BatchInfo

__all__ = ["STOP", "Resume", "SlotTask", "BatchInSlot", "BatchInArena", "Exhausted", "ThreadFailed", "Result"]

STOP: Final = None
"""Sentinel telling a worker to exit."""

Result = tuple[int, Any]
"""``(task_id, payload)``."""


@dataclass(frozen=True)
class Resume:
    """Starts a new epoch in a persistent worker.

    Attributes:
        epoch: The loader's epoch that starts (it keys
            :func:`~datakit.loader.resume.epoch_seed.epoch_seed` in the worker).
        shared_seed: The pass's seed for an ``IterDataPipe``'s random pipes; None otherwise.
    """

    epoch: int
    shared_seed: int | None = None


@dataclass(frozen=True)
class SlotTask:
    """Main to worker: fetch ``indices`` into shared-memory slot ``slot``.

    Attributes:
        indices: The batch's sample indices.
        slot: The slot reserved for this task.
    """

    indices: list[int]
    slot: int

    def __repr__(self) -> str:  # how failures name the task: by its indices, as usual
        return repr(self.indices)


@dataclass(frozen=True)
class BatchInSlot:
    """Worker to main: the batch is in ``slot``, its first ``count`` rows.

    Attributes:
        slot: The slot the task named.
        count: Samples written (the batch's length).
        info: The batch's indices and epoch seed, for the dataset's batch
            steps that run after the slot (``finish_batch``).
        rest: the part of the batch that travels beside the slot (dict samples'
            other fields, :class:`~datakit.loader.workers.batch_contract.SlotRest`), or None.
    """

    slot: int
    count: int
    info: BatchInfo | None = None
    rest: Any = None


@dataclass(frozen=True)
class BatchInArena:
    """Worker to main: the batch's tensors are in ragged slot ``slot``'s arena.

    Attributes:
        slot: The slot the task named.
        batch: The collated batch with each tensor written into the arena
            replaced by where it lies there
            (:class:`~datakit.loader.transport.ragged.ArenaTensor`); a tensor
            that did not fit is itself, sent the ordinary way.
    """

    slot: int
    batch: Any


@dataclass(frozen=True)
class Exhausted:
    """An iterable dataset has no more samples in this worker (this epoch)."""


@dataclass(frozen=True)
class ThreadFailed:
    """The pin thread stopped on an error, to be raised in the main thread.

    Attributes:
        error: The exception it caught.
    """

    error: BaseException
