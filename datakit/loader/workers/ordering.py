"""Task accounting for a multi-worker loader: no I/O, no processes.

:class:`TaskLedger` decides which worker gets the next task, bounds the number
of tasks in flight (``prefetch_factor * num_workers``), and turns results that
arrive in any order back into the sampler's order (or hands them out as they
come with ``in_order=False``). It follows torch's send/receive bookkeeping
step for step, because which worker gets which task decides the batches of an
iterable dataset, and datakit must yield the same batches as torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Delivery", "TaskLedger", "WAIT", "END"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A result to hand to the consumer now.

    Attributes:
        task_id: The task it answers.
        worker_id: The worker that produced it.
        payload: The batch, or a failure to raise.
    """

    task_id: int
    worker_id: int
    payload: Any


class _Marker:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


WAIT: Final = _Marker("WAIT")
"""The next result in order has not arrived: receive one."""

END: Final = _Marker("END")
"""Every task sent has been delivered or skipped: the epoch is over (if no more can be sent)."""


class TaskLedger:
    """Bookkeeping of tasks sent to workers and results received from them.

    Usage, per epoch: call :meth:`reset`; to send, call :meth:`choose_worker`
    and then :meth:`record_sent`; to receive, call :meth:`next_ready` and, when
    it says :data:`WAIT`, receive a result and pass it to
    :meth:`record_result` (or :meth:`record_exhausted`). Each delivery frees a
    slot for one more task.

    Args:
        num_workers: How many workers share the tasks.
        prefetch_factor: Tasks in flight per worker.
        in_order: Deliver in task order; otherwise as results arrive.
    """

    def __init__(self, num_workers: int, prefetch_factor: int, in_order: bool = True) -> None:
        if num_workers <= 0 or prefetch_factor <= 0:
            raise ValueError("TaskLedger needs num_workers > 0 and prefetch_factor > 0")
        self.num_workers = num_workers
        self.capacity = prefetch_factor * num_workers
        self.in_order = in_order
        self.reset()

    def reset(self, first_task_id: int = 0) -> None:
        """Starts a new epoch; results of older tasks will be ignored.

        Args:
            first_task_id: The id of the first task of this epoch; must be
                greater than every id used before, so stale results are recognised.
        """
        self.first_task_id = first_task_id
        self.next_send = first_task_id
        self.next_deliver = first_task_id
        self.outstanding = 0  # sent, result not yet received
        self.active = [True] * self.num_workers
        self.worker_load = [0] * self.num_workers  # sent, not yet delivered
        self._assigned: dict[int, int] = {}  # task id -> worker, result not yet delivered
        self._arrived: dict[int, Any] = {}  # task id -> payload, waiting for its turn
        self._cursor = 0

    def has_room(self) -> bool:
        """True while fewer than ``capacity`` tasks are in flight."""
        return self.outstanding < self.capacity

    def choose_worker(self) -> int | None:
        """Picks the worker for the next task, round robin over active workers.

        With ``in_order=False`` a worker is skipped while it already holds its
        share of the capacity. Advances the round robin even when no worker is
        chosen, as torch does.

        Returns:
            A worker id, or None when no worker can take the task.
        """
        assert self.has_room(), "choose_worker() called with the pipeline full"
        active_count = sum(self.active)
        for _ in range(self.num_workers):
            worker = self._cursor
            self._cursor = (self._cursor + 1) % self.num_workers
            if not self.active[worker]:
                continue
            if self.in_order or self.worker_load[worker] < self.capacity // active_count:
                return worker
        return None

    def record_sent(self, worker_id: int) -> int:
        """Records a task sent to ``worker_id``.

        Returns:
            The task's id.
        """
        task_id = self.next_send
        self.next_send += 1
        self._assigned[task_id] = worker_id
        self.worker_load[worker_id] += 1
        self.outstanding += 1
        return task_id

    def next_ready(self) -> Delivery | _Marker:
        """The next result to deliver, :data:`WAIT` or :data:`END`.

        Skips tasks already delivered out of order and tasks whose worker was
        retired without answering them.
        """
        while self.next_deliver < self.next_send:
            task_id = self.next_deliver
            if task_id in self._arrived:
                self.next_deliver += 1
                return self._deliver(task_id, self._arrived.pop(task_id))
            worker = self._assigned.get(task_id)
            if worker is not None and self.active[worker]:
                return WAIT
            self._assigned.pop(task_id, None)
            self.next_deliver += 1
        return END

    def is_current(self, task_id: int) -> bool:
        """True when ``task_id`` belongs to this epoch and awaits its result."""
        return task_id in self._assigned and task_id not in self._arrived

    def record_result(self, task_id: int, payload: Any) -> Delivery | None:
        """Records a result.

        Returns:
            A delivery when the result may be handed out now; None when it is
            buffered until its turn, or when it is stale (an older epoch).
        """
        if not self.is_current(task_id):
            return None
        self.outstanding -= 1
        if task_id == self.next_deliver:
            self.next_deliver += 1
            return self._deliver(task_id, payload)
        if not self.in_order:
            return self._deliver(task_id, payload)
        self._arrived[task_id] = payload
        return None

    def record_exhausted(self, task_id: int, worker_id: int) -> None:
        """Records that ``worker_id`` answered ``task_id`` with "no more data" and retires it."""
        if self.is_current(task_id):
            self.outstanding -= 1
        self.active[worker_id] = False

    def _deliver(self, task_id: int, payload: Any) -> Delivery:
        worker = self._assigned.pop(task_id)
        self.worker_load[worker] -= 1
        return Delivery(task_id, worker, payload)
