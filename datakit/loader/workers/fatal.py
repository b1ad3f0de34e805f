"""The loader's fatal errors, in torch's words: a worker that died, a process out of file descriptors.

A worker that dies, or a main process that runs out of file descriptors, is
reported with torch's own words first (users and tools search for them), then
datakit's detail: :func:`describe_worker_exit`, :func:`too_many_open_files`.
An exception raised *in* a worker is no fatal error: it travels as a value
(:class:`datakit.procs.failure.WorkerFailure`).
"""

from __future__ import annotations

import errno
import os
import signal

__all__ = ["describe_worker_exit", "too_many_open_files", "TOO_MANY_OPEN_FILES"]

# torch's text (torch/utils/data/dataloader.py, _try_get_data), word for word.
TOO_MANY_OPEN_FILES = (
    "Too many open files. Communication with the workers is no longer possible. Please increase the "
    "limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"
)

# Files that must still open for the process not to count as out of descriptors (torch's margin).
_FD_MARGIN = 10


def describe_worker_exit(worker_id: int, pid: int | None, exitcode: int | None) -> str:
    """The message for a worker that exited without being told to.

    torch's sentence comes first, as torch words it (its signal handler's
    ``strsignal`` name, or the exit code), so that searches and log matchers
    written for torch find it; datakit's detail follows: the worker's index,
    the signal's symbolic name and what to try.
    """
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        text = f"DataLoader worker (pid {pid}) is killed by signal: {signal.strsignal(number) or name}. "
        if number == getattr(signal, "SIGBUS", None):
            text += (
                "It is possible that dataloader's workers are out of shared memory. "
                "Please try to raise your shared memory limit. "
            )
        return (
            text + f"(datakit: worker {worker_id} was killed by {name} ({number}). If it was killed by "
            "SIGKILL, the machine may be out of memory (the OOM killer); try fewer workers, a smaller "
            "batch or prefetch_factor.)"
        )
    if exitcode:
        return (
            f"DataLoader worker (pid {pid}) exited unexpectedly with exit code {exitcode}. Details are "
            "lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace. "
            f"(datakit: worker {worker_id}.)"
        )
    state = "exited unexpectedly with exit code 0" if exitcode == 0 else "is no longer reachable"
    return f"DataLoader worker (pid(s) {pid}) exited unexpectedly (datakit: worker {worker_id} {state}.)"


def too_many_open_files() -> RuntimeError | None:
    """torch's advice as an error when this process is out of file descriptors, else None.

    Call it when receiving a batch failed: each tensor a worker sends arrives
    as a file descriptor, and at the limit the receive fails with the
    meaningless ``received 0 items of ancdata``. As torch does, the check is
    whether a few more files can still be opened.
    """
    opened: list[int] = []
    try:
        for _ in range(_FD_MARGIN):
            opened.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as error:
        if error.errno == errno.EMFILE:
            return RuntimeError(TOO_MANY_OPEN_FILES)
    finally:
        for descriptor in opened:
            os.close(descriptor)
    return None
