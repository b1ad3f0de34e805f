"""Pinning batches in page-locked memory, on a thread of its own.

The pin thread sits between the workers and the main thread: it receives each
result from the worker pool, runs the settle and pin stages of the iterator's
:class:`~datakit.loader.transport.stages.BatchStages` on it (a pinned copy, or a
copy into a reused pinned buffer when batches go on to a device, see
:mod:`datakit.loader.transport.staging`), and queues it for the main thread. Failures,
including the pool's "a worker died", travel to the main thread as values.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from datakit.loader.workers.messages import Result, ThreadFailed
from datakit.procs.failure import WorkerFailure

__all__ = ["pin_loop"]


def pin_loop(
    receive: Callable[[float], tuple[int, Result] | None],
    pin: Callable[[int, Any], Any],
    out: queue.Queue[Any],
    done: threading.Event,
    poll_interval: float,
    setup: Callable[[], None] = lambda: None,
) -> None:
    """Moves results from the workers to the main thread, pinning each batch.

    Args:
        receive: The pool's receive: ``timeout -> (worker_id, (task_id, payload)) | None``.
        pin: ``(task_id, payload) -> what the main thread gets``: the batch
            pinned; failures and end markers as they are. Called for every
            result, so that it can also release what the result held.
        out: Queue to the main thread; gets ``(worker_id, task_id, payload)``
            or a :class:`~datakit.loader.workers.messages.ThreadFailed`.
        done: Set by the main thread to stop this loop.
        poll_interval: Seconds between checks of ``done`` while waiting.
        setup: Called once first, on this thread (binds the CUDA device).
    """
    try:
        setup()
    except BaseException as error:
        _put(out, ThreadFailed(error), done, poll_interval)
        return
    while not done.is_set():
        try:
            received = receive(poll_interval)
        except BaseException as error:  # e.g. a worker died: the main thread raises it
            _put(out, ThreadFailed(error), done, poll_interval)
            return
        if received is None:
            continue
        worker_id, (task_id, payload) = received
        try:
            payload = pin(task_id, payload)
        except Exception:
            payload = WorkerFailure.capture("the DataLoader pin memory thread")
        if not _put(out, (worker_id, task_id, payload), done, poll_interval):
            return


def _put(out: queue.Queue[Any], item: Any, done: threading.Event, poll_interval: float) -> bool:
    """Puts with a timeout, giving up when ``done`` is set; returns whether it was put."""
    while not done.is_set():
        try:
            out.put(item, timeout=poll_interval)
            return True
        except queue.Full:
            continue
    return False
