"""Starting, talking to, watching and stopping the worker processes.

:class:`WorkerPool` owns the processes and their pipes. It never blocks
without a timeout: :meth:`WorkerPool.receive` waits on every result pipe *and*
every process sentinel at once, so a worker that dies (OOM killer, SIGKILL,
segfault) is reported as soon as it dies, with its pid and signal, instead of
leaving the loader waiting for a result that will never come.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from datakit.loader.workers.fatal import describe_worker_exit
from datakit.loader.workers.messages import STOP, Result
from datakit.loader.workers.worker import WorkerConfig, worker_loop
from datakit.procs import channel
from datakit.procs.lifeline import ParentLink

__all__ = ["WorkerPool", "WorkerDiedError", "resolve_context"]

# Linux lets a pipe buffer grow to /proc/sys/fs/pipe-max-size (1 MiB by default). Bigger
# buffers let a worker send a non-tensor batch, and the main process send a full
# prefetch window of index lists, without waiting for the other side to read.
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20

# How long shutdown waits for a worker to exit by itself before terminating it.
_JOIN_SECONDS = 1.0


class WorkerDiedError(RuntimeError):
    """A worker process exited without being told to."""


def resolve_context(context: Any) -> Any:
    """The multiprocessing context that starts the workers: ``context``, else the default start
    method, else ``fork`` on Linux (as torch, whatever Python's own default there)."""
    if context is not None:
        return context
    method = multiprocessing.get_start_method(allow_none=True)
    if method is None and sys.platform.startswith("linux"):
        method = "fork"
    return multiprocessing.get_context(method)


def _grow_pipe(connection: Connection) -> None:
    with contextlib.suppress(OSError):  # best effort: the default buffer only costs some waiting
        fcntl.fcntl(connection.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)


class WorkerPool:
    """The worker processes of one loader iterator and their pipes.

    Args:
        config: Given to every worker.
        context: The multiprocessing context that starts them.
    """

    def __init__(self, config: WorkerConfig, context: Any) -> None:
        self.num_workers = config.num_workers
        self._stop = context.Event()
        self._task_writers: list[Connection] = []
        self._result_readers: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._retired: set[int] = set()  # told to exit: their exit is not an error
        self._closed = False
        # The workers are this process's children; a forked copy of the pool (in a child of this
        # process, such as a worker of torch's DataLoader) must not stop them or join them.
        self._owner = os.getpid()
        self._turn = 0
        try:
            for worker_id in range(config.num_workers):
                self._start_worker(config, context, worker_id)
        except BaseException:
            self.shutdown()
            raise

    def _start_worker(self, config: WorkerConfig, context: Any, worker_id: int) -> None:
        task_reader, task_writer = context.Pipe(duplex=False)
        result_reader, result_writer = context.Pipe(duplex=False)
        _grow_pipe(task_writer)
        _grow_pipe(result_writer)
        parent = ParentLink.from_here(context.get_start_method())
        process = context.Process(
            target=worker_loop,
            args=(config, worker_id, task_reader, result_writer, self._stop, parent),
            name=f"datakit-loader-worker-{worker_id}",
            daemon=True,
        )
        self._task_writers.append(task_writer)
        self._result_readers.append(result_reader)
        self._processes.append(process)
        try:
            process.start()
        finally:
            # The worker holds its own copies; closing ours makes EOF visible to both sides.
            task_reader.close()
            result_writer.close()

    @property
    def pids(self) -> list[int | None]:
        """The workers' process ids."""
        return [process.pid for process in self._processes]

    @property
    def processes(self) -> list[multiprocessing.process.BaseProcess]:
        """The workers' ``Process`` objects, in worker order; a new list, so the pool's cannot change."""
        return list(self._processes)

    def send(self, worker_id: int, message: Any) -> None:
        """Sends a message to a worker.

        Task messages are small and their number is bounded by the prefetch
        depth, so this does not wait for the worker in practice; if the pipe
        is full it waits for room while checking that the worker is alive.

        Raises:
            WorkerDiedError: The worker is gone.
        """
        process = self._processes[worker_id]
        try:
            channel.send(self._task_writers[worker_id], message, process.is_alive)
        except (BrokenPipeError, ConnectionResetError, channel.PeerGoneError) as error:
            raise self._died(worker_id) from error

    def retire(self, worker_id: int) -> None:
        """Tells a worker to exit (its dataset is exhausted); its exit is then expected."""
        self._retired.add(worker_id)
        channel.try_send(self._task_writers[worker_id], STOP)

    def receive(self, timeout: float) -> tuple[int, Result] | None:
        """Waits up to ``timeout`` seconds for one result from any worker.

        Results already in a pipe are returned before a death is reported, so
        nothing a worker sent before dying is lost.

        Returns:
            ``(worker_id, (task_id, payload))``, or None on timeout.

        Raises:
            WorkerDiedError: A worker that was not retired has exited.
        """
        watched: dict[Any, int] = {}
        for worker_id, reader in enumerate(self._result_readers):
            if not reader.closed:
                watched[reader] = worker_id
            if worker_id not in self._retired:
                watched[self._processes[worker_id].sentinel] = worker_id
        ready = multiprocessing.connection.wait(list(watched), timeout)
        if not ready:
            return None
        readable = [watched[item] for item in ready if isinstance(item, Connection)]
        if readable:
            # Rotate which worker goes first so that a fast worker cannot starve the others.
            readable.sort(key=lambda worker_id: (worker_id - self._turn) % self.num_workers)
            worker_id = readable[0]
            self._turn = (worker_id + 1) % self.num_workers
            reader = self._result_readers[worker_id]
            try:
                return worker_id, channel.receive(reader)
            except (EOFError, OSError) as error:
                reader.close()
                if worker_id in self._retired:
                    return None
                raise self._died(worker_id) from error
        worker_id = watched[ready[0]]
        raise self._died(worker_id)

    def _died(self, worker_id: int) -> WorkerDiedError:
        process = self._processes[worker_id]
        process.join(timeout=_JOIN_SECONDS)
        return WorkerDiedError(describe_worker_exit(worker_id, process.pid, process.exitcode))

    def shutdown(self) -> None:
        """Stops every worker and closes every pipe; safe to call more than once.

        Workers are asked to stop, given a moment to exit, then terminated and
        finally killed, so no process outlives the pool.

        In a process forked from the pool's owner (which inherits the pool and
        the finaliser that calls this), only that process's copies of the pipes
        are closed: the workers, their stop event and their task pipes are the
        owner's, still in use there.
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner:
            for connection in (*self._result_readers, *self._task_writers):
                connection.close()
            return
        self._stop.set()
        for writer in self._task_writers:
            channel.try_send(writer, STOP)
        # Closing our read ends unblocks a worker stuck sending a large result.
        for connection in (*self._result_readers, *self._task_writers):
            connection.close()
        started = [process for process in self._processes if process.pid is not None]
        deadline = time.monotonic() + _JOIN_SECONDS
        for process in started:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in started:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + _JOIN_SECONDS
        for process in started:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
