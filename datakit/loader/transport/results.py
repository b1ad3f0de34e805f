"""Where a multi-process pass's results come from: the workers' pipes or the pin thread, within the timeout.

Without pinning the main thread receives from the
:class:`~datakit.loader.workers.pool.WorkerPool` itself and settles each result (a
batch in a shared slot is copied out of it). With ``pin_memory``, ``device``
or a dataset's finish step to run on the host, a pin thread
(:func:`~datakit.loader.transport.pinning.pin_loop`) receives, settles (finishes) and
pins, and hands results to the main thread through a queue.
Either way the main thread waits in slices of :data:`POLL_SECONDS`, checking
``DataLoader(timeout=...)``'s deadline and that the pin thread is alive.

:class:`WorkerResources` is what an iterator must release when it goes away
(the pool and the pin thread); it holds no reference to the iterator, and
neither does the pin thread, so a finalizer can release it once the iterator
is gone.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from datakit.loader.transport.pinning import pin_loop
from datakit.loader.transport.stages import BatchStages
from datakit.loader.workers.fatal import too_many_open_files
from datakit.loader.workers.messages import ThreadFailed
from datakit.loader.workers.pool import WorkerDiedError, WorkerPool

__all__ = ["POLL_SECONDS", "WorkerResources", "ResultSource"]

# Seconds between liveness checks while waiting for a result.
POLL_SECONDS = 0.5


@dataclass
class WorkerResources:
    """What must be released when an iterator goes away; holds no reference to the iterator."""

    pool: WorkerPool
    done: threading.Event = field(default_factory=threading.Event)
    pin_thread: threading.Thread | None = None
    closed: bool = False

    def close(self) -> None:
        """Stops the pin thread (waiting a few seconds for it), then the workers; once."""
        if self.closed:
            return
        self.closed = True
        self.done.set()
        if self.pin_thread is not None and self.pin_thread is not threading.current_thread():
            self.pin_thread.join(timeout=10 * POLL_SECONDS)
        self.pool.shutdown()


class ResultSource:
    """The results of one iterator's workers, ``(worker_id, task_id, payload)``, each settled (and pinned).

    Starts the pin thread when the batch stages pin; it runs until
    ``resources.done`` is set.

    Args:
        resources: The iterator's pool and stop event; the pin thread is recorded there.
        stages: The iterator's batch stages (settle, and pin on the pin thread).
        timeout: ``DataLoader(timeout=...)`` as given: seconds without a
            result before :meth:`next` gives up; 0 waits forever.
    """

    def __init__(self, resources: WorkerResources, stages: BatchStages, timeout: float) -> None:
        self._resources = resources
        self._stages = stages
        self._timeout = float(timeout)
        self._timeout_as_given = timeout  # torch's message shows it as given: "1 seconds"
        self._results: queue.Queue[Any] | None = None
        if stages.threaded:
            self._results = queue.Queue()
            thread = threading.Thread(
                target=pin_loop,
                args=(
                    # nothing bound to the iterator: the thread must not keep it alive
                    resources.pool.receive,
                    stages.settle_and_pin,
                    self._results,
                    resources.done,
                    POLL_SECONDS,
                    stages.bind_thread,
                ),
                name="datakit-loader-pin",
                daemon=True,
            )
            resources.pin_thread = thread
            thread.start()

    def next(self) -> tuple[int, int, Any]:
        """The next result from any worker: ``(worker_id, task_id, payload)``.

        Raises:
            RuntimeError: ``timeout`` passed, a worker died, or the pin thread failed.
        """
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = (
                POLL_SECONDS
                if deadline is None
                else max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
            )
            try:
                item = self._receive_once(wait)
            except WorkerDiedError:
                raise
            except Exception as error:
                advice = too_many_open_files()  # receiving fails obscurely at the descriptor limit
                if advice is not None:
                    raise advice from error
                raise
            if item is not None:
                return item
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"DataLoader timed out after {self._timeout_as_given} seconds")

    def _receive_once(self, wait: float) -> tuple[int, int, Any] | None:
        if self._results is None:
            received = self._resources.pool.receive(wait)
            if received is None:
                return None
            worker_id, (task_id, payload) = received
            return worker_id, task_id, self._stages.settle(task_id, payload)
        try:
            item = self._results.get(timeout=wait)
        except queue.Empty:
            thread = self._resources.pin_thread
            if thread is not None and not thread.is_alive():
                raise RuntimeError("DataLoader pin memory thread exited unexpectedly") from None
            return None
        if isinstance(item, ThreadFailed):
            raise item.error
        worker_id, task_id, payload = item
        return worker_id, task_id, payload
