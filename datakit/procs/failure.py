"""Exceptions that cross a process or thread boundary as values, and the loader's fatal messages.

A worker that fails wraps the exception in a :class:`WorkerFailure` and sends it
like any result; the main process calls :meth:`WorkerFailure.reraise` when it
reaches that result, so the error surfaces in the training loop at the batch it
belongs to, with its original type.

A worker that dies, or a main process that runs out of file descriptors, is
reported with torch's own words first (users and tools search for them), then
datakit's detail: :func:`describe_worker_exit`, :func:`too_many_open_files`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import reprlib
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["WorkerFailure", "describe_worker_exit", "too_many_open_files", "TOO_MANY_OPEN_FILES"]

# torch's text (torch/utils/data/dataloader.py, _try_get_data), word for word.
TOO_MANY_OPEN_FILES = (
    "Too many open files. Communication with the workers is no longer possible. Please increase the "
    "limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"
)

# Files that must still open for the process not to count as out of descriptors (torch's margin).
_FD_MARGIN = 10

_indices_repr = reprlib.Repr()
_indices_repr.maxlist = 16
_indices_repr.maxlevel = 2


@dataclass(frozen=True)
class WorkerFailure:
    """An exception raised where a batch was produced, carried as a value.

    Attributes:
        exc_type: The exception's class, or None when it could not be pickled.
        type_name: The class's qualified name, for messages.
        message: ``str()`` of the exception.
        traceback: The formatted traceback where it was raised.
        where: Where it happened, e.g. ``"DataLoader worker 1 (pid 4242)"``.
        indices: The sample indices of the batch being produced.
        pickled: The exception itself, pickled in the worker, for types that
            cannot be rebuilt from a message alone (such as
            ``CorruptRecordError(key, reason)``); None when it does not pickle.
    """

    exc_type: type[BaseException] | None
    type_name: str
    message: str
    traceback: str
    where: str
    indices: Any = None
    pickled: bytes | None = None

    @classmethod
    def capture(cls, where: str, indices: Any = None) -> WorkerFailure:
        """Captures the exception being handled (call inside ``except``).

        Args:
            where: Where it happened.
            indices: The sample indices being fetched, if any.
        """
        exc_type, exc, tb = sys.exc_info()
        assert exc_type is not None and exc is not None, (
            "capture() must be called while handling an exception"
        )
        return cls(
            exc_type=exc_type,
            type_name=f"{exc_type.__module__}.{exc_type.__qualname__}",
            message=str(exc),
            traceback="".join(traceback.format_exception(exc_type, exc, tb)),
            where=where,
            indices=indices,
            pickled=_pickled(exc),
        )

    def without_type(self) -> WorkerFailure:
        """Returns a copy that does not reference the exception class (always picklable)."""
        return WorkerFailure(
            None, self.type_name, self.message, self.traceback, self.where, _safe(self.indices), None
        )

    def describe(self) -> str:
        """The full message: original message, where, which indices, and the remote traceback."""
        indices = (
            "" if self.indices is None else f" while fetching indices {_indices_repr.repr(self.indices)}"
        )
        return (
            f"{self.message}\n\n"
            f"Caught {self.type_name} in {self.where}{indices}.\n"
            f"Original traceback:\n{self.traceback}"
        )

    def reraise(self) -> NoReturn:
        """Raises the exception again, with its original type when that is possible.

        The type is rebuilt with the full description as its single argument.
        A type that cannot be rebuilt that way is raised as the worker's own
        exception object (unpickled, so its attributes survive) with the
        description added as a note; only when that fails too does a
        ``RuntimeError`` carry the description.
        """
        text = self.describe()
        error: BaseException
        if self.exc_type is None:
            error = RuntimeError(text)
        else:
            try:
                # KeyError shows repr() of its argument; keep the description readable.
                error = self.exc_type(_ReadableText(text) if issubclass(self.exc_type, KeyError) else text)
            except Exception:  # the type needs other constructor arguments
                error = self._original_with_note(text)
        for name, value in (("worker_where", self.where), ("indices", self.indices)):
            with contextlib.suppress(AttributeError):
                setattr(error, name, value)
        raise error


    def _original_with_note(self, text: str) -> BaseException:
        if self.pickled is not None:
            try:
                original = pickle.loads(self.pickled)  # our own worker's exception, not stored data
            except Exception:
                original = None
            if isinstance(original, BaseException):
                if hasattr(original, "add_note"):  # Python 3.11+
                    original.add_note(text.partition("\n\n")[2])
                return original
        return RuntimeError(text)


def _pickled(exc: BaseException) -> bytes | None:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # only keep what will also unpickle in the main process
    except Exception:
        return None
    return data


class _ReadableText(str):
    """A str whose repr is itself (for exceptions that print repr of their message)."""

    def __repr__(self) -> str:
        return str(self)


def _safe(indices: Any) -> Any:
    """Indices as plain ints/lists when possible, else their repr."""
    try:
        if isinstance(indices, (list, tuple)):
            return [int(i) for i in indices]
        return int(indices)
    except (TypeError, ValueError):
        return _indices_repr.repr(indices)


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
