"""A writer lock on a directory that dies with the process holding it.

A store directory holds ``datakit-writer.lock`` while a conversion writes it:
the writer keeps an exclusive ``flock`` on the file for its lifetime and
writes its pid and host into it. The kernel drops the lock when the process
exits, however it exits (``kill -9`` included), so a killed conversion never
blocks its ``--resume``; the stale file it leaves is harmless, since only the
lock counts, never the file's existence.

Details that make it hold:

* ``flock`` belongs to the open file, and a forked child shares it: reader
  processes forked during a conversion would keep the lock alive after their
  parent was killed. The descriptor is closed in every child right after
  ``fork`` (``os.register_at_fork``); the parent's own descriptor keeps the lock.
* The holder deletes the file when it is done, while still holding the lock.
  A process that opened the file just before then gets its lock on a deleted
  file, so after locking, the file at the path must still be the one locked,
  else it starts again.
* :func:`lock_holder` tests the lock with a shared, non-blocking ``flock`` and
  lets go at once. A writer arriving at that instant would see the lock taken,
  so :meth:`DirectoryLock.acquire` retries for a moment before refusing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time

from datakit.errors import StoreError
from datakit.stores.conversion_state import WriterIdentity

__all__ = ["LOCK_NAME", "DirectoryLock", "lock_holder"]

LOCK_NAME = "datakit-writer.lock"
_PATIENCE = 0.5  # seconds a writer retries a lock that may only be a probe's
_RETRY = 0.01

_UNKNOWN = WriterIdentity(0, "an unknown host")  # a holder that has not written its identity yet

_held_in_this_process: set[int] = set()


def _close_after_fork() -> None:
    for descriptor in _held_in_this_process:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    _held_in_this_process.clear()


os.register_at_fork(after_in_child=_close_after_fork)


class DirectoryLock:
    """The writer lock of one directory.

    Args:
        directory: the directory; it must exist.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_NAME)
        self._descriptor: int | None = None
        self._pid: int | None = None

    def acquire(self) -> WriterIdentity | None:
        """Take the lock.

        Returns:
            ``None`` when this process now holds it; else the identity of the
            process that does.
        """
        deadline = time.monotonic() + _PATIENCE
        while True:
            try:
                descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot create the writer lock ({exc.strerror or exc})") \
                    from None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_identity(descriptor)
                os.close(descriptor)
                if time.monotonic() >= deadline:
                    return holder or _UNKNOWN
                time.sleep(_RETRY)
                continue
            if not _still_at_path(descriptor, self.path):  # its holder deleted it as we opened it
                os.close(descriptor)
                continue
            identity = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, identity, 0)
            self._descriptor, self._pid = descriptor, os.getpid()
            _held_in_this_process.add(descriptor)
            return None

    def release(self) -> None:
        """Delete the file and let go of the lock; nothing in a forked child."""
        descriptor = self._descriptor
        if descriptor is None or self._pid != os.getpid():
            return
        self._descriptor = None
        _held_in_this_process.discard(descriptor)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(descriptor)


def lock_holder(directory: str) -> WriterIdentity | None:
    """The process holding ``directory``'s writer lock, or ``None`` when nobody does."""
    try:
        descriptor = os.open(os.path.join(directory, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_identity(descriptor) or _UNKNOWN
    except OSError:
        return None
    finally:
        os.close(descriptor)  # also lets go of a shared lock taken above
    return None


def _still_at_path(descriptor: int, path: str) -> bool:
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(descriptor)
    return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)


def _read_identity(descriptor: int) -> WriterIdentity | None:
    """The pid and host a holder wrote; ``None`` before it wrote them, or when unreadable."""
    try:
        data = json.loads(os.pread(descriptor, 4096, 0))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid, host = data.get("pid"), data.get("host")
    if not (isinstance(pid, int) and isinstance(host, str)):
        return None
    return WriterIdentity(pid, host)
