"""Conversion's reader processes: an ordered parallel map over chunks of files, without torch.

Reading and verifying images is CPU work that parallelises over processes.
The readers are plain ``multiprocessing`` processes, so a conversion never
imports torch (1.5 s a process). Each reader has a private task pipe and a
private result pipe that the main thread reads itself, with no helper thread
competing with the writes for the GIL; chunk ``i`` goes to reader
``i % readers``, so reading each reader's answers in turn gives them in order
without a reorder buffer. At most ``window`` chunks per reader are in flight.

Readers die with the conversion: they arm the parent-death signal and check
their parent while waiting and while sending
(:class:`datakit.procs.lifeline.ParentLink`), and the main process notices a
reader that died and says which, with its exit code or signal.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from datakit.errors import DatakitError, option
from datakit.procs import channel
from datakit.procs.failure import WorkerFailure
from datakit.procs.lifeline import ParentLink

__all__ = ["ReaderFailed", "ReaderPool"]

_T = TypeVar("_T")
_POLL_SECONDS = 0.5


class ReaderFailed(DatakitError):
    """A reader process died (killed, out of memory), or raised: a bug, since bad files are results."""

    @classmethod
    def from_failure(cls, failure: WorkerFailure) -> ReaderFailed:
        """The error for an exception a reader sent back as a value: where, and its traceback there."""
        return cls(f"{failure.where} failed; this is a bug in datakit:\n{failure.traceback}")


class ReaderPool(Generic[_T]):
    """``readers`` processes running ``work(chunk)`` on chunks, answers in chunk order.

    Args:
        work: Turns one chunk (a list of indices) into its list of results;
            picklable (a module-level function or a ``functools.partial`` of one).
        readers: How many processes.
        window: Chunks in flight per process.
    """

    def __init__(self, work: Callable[[list[int]], list[_T]], readers: int, window: int = 8) -> None:
        self.work = work
        self.readers = readers
        self.window = window

    def map(self, chunks: Iterable[list[int]]) -> Iterator[list[_T]]:
        """Each chunk's results, in the order of ``chunks``."""
        method = "fork" if sys.platform.startswith("linux") else None
        context: Any = multiprocessing.get_context(method)
        link = ParentLink.from_here(context.get_start_method())
        processes, tasks, results = [], [], []
        try:
            for number in range(self.readers):
                task_read, task_write = context.Pipe(duplex=False)
                result_read, result_write = context.Pipe(duplex=False)
                process = context.Process(target=_serve, args=(self.work, link, task_read, result_write),
                                          name=f"datakit-reader-{number}", daemon=True)
                process.start()
                task_read.close()
                result_write.close()
                processes.append(process)
                tasks.append(task_write)
                results.append(result_read)
            yield from self._ordered(iter(chunks), processes, tasks, results)
        finally:
            _stop(processes, tasks, results)

    def _ordered(self, chunks: Iterator[list[int]], processes: list[Any], tasks: list[Connection],
                 results: list[Connection]) -> Iterator[list[_T]]:
        sent = received = 0

        def send_more() -> None:
            nonlocal sent
            while sent - received < self.window * self.readers:
                chunk = next(chunks, None)
                if chunk is None:
                    return
                reader = sent % self.readers
                try:
                    channel.send(tasks[reader], chunk, processes[reader].is_alive)
                except (BrokenPipeError, channel.PeerGoneError):
                    raise _died(processes[reader]) from None
                sent += 1

        send_more()
        while received < sent:
            reader = received % self.readers
            while not results[reader].poll(_POLL_SECONDS):
                if not processes[reader].is_alive():
                    raise _died(processes[reader])
            try:
                answer = channel.receive(results[reader])
            except EOFError:
                raise _died(processes[reader]) from None
            received += 1
            if isinstance(answer, WorkerFailure):
                raise ReaderFailed.from_failure(answer)
            send_more()
            yield answer


def _serve(work: Callable[[list[int]], list[Any]], link: ParentLink, tasks: Connection,
           results: Connection) -> None:
    """A reader process: chunks in, results out, until the task pipe closes or the parent dies."""
    if not link.arm():
        return
    where = f"reader process {os.getpid()}"
    try:
        while True:
            while not tasks.poll(_POLL_SECONDS):
                if not link.alive():
                    return
            chunk = channel.receive(tasks)
            if chunk is None:  # stop
                return
            try:
                answer: Any = work(chunk)
            except Exception:  # sent without the exception's class: it always pickles
                answer = WorkerFailure.capture(where, chunk).without_type()
            channel.send(results, answer, link.alive)
    except (EOFError, BrokenPipeError, ConnectionResetError, channel.PeerGoneError, KeyboardInterrupt):
        return  # the conversion closed its ends, is gone, or was interrupted


def _stop(processes: list[Any], tasks: list[Connection], results: list[Connection]) -> None:
    for task in tasks:
        channel.try_send(task, None)  # a reader waiting for a task stops (forked readers hold each
        # other's pipe ends, so closing ours alone is not an end of file for them)
    for connection in (*tasks, *results):
        connection.close()  # a reader still sending sees a broken pipe
    for process in processes:
        process.join(timeout=2 * _POLL_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()


def _died(process: Any) -> ReaderFailed:
    """The error for a reader process that is gone: its pid, and its exit code or signal."""
    process.join(2 * _POLL_SECONDS)
    exitcode = process.exitcode
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited unexpectedly (exit code {exitcode})"
    return ReaderFailed.advising("reader process {pid} {how}; the conversion stopped (finish it with "
                                 "{resume})", pid=process.pid, how=how, resume=option("resume"))
