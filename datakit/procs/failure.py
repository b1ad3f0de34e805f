"""Exceptions that cross a process or thread boundary as values: one type for every process datakit starts.

A worker that fails wraps the exception in a :class:`WorkerFailure` and sends it
like any result. The loader's main process calls :meth:`WorkerFailure.reraise`
when it reaches that result, so the error surfaces in the training loop at the
batch it belongs to, with its original type; conversion's reader pool raises
it as a ``ReaderFailed`` (a ``DatakitError``) with the remote traceback. A
worker that dies instead is reported by whoever started it
(:mod:`datakit.loader.workers.fatal` for the loader).
"""

from __future__ import annotations

import contextlib
import pickle
import reprlib
import sys
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["WorkerFailure"]

_indices_repr = reprlib.Repr()
_indices_repr.maxlist = 16
_indices_repr.maxlevel = 2


@dataclass(frozen=True)
class WorkerFailure:
    """An exception raised in another process or thread (where a batch was produced), carried as a value.

    Attributes:
        exc_type: The exception's class, or None when it could not be pickled.
        type_name: The class's qualified name, for messages.
        message: ``str()`` of the exception.
        traceback: The formatted traceback where it was raised.
        where: Where it happened, e.g. ``"DataLoader worker 1 (pid 4242)"``.
        indices: The sample indices of the batch (or chunk) being produced.
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
