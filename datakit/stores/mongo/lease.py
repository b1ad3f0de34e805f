"""The writer lease of a MongoDB store: one conversion at a time, and none forever.

A conversion claims its store with a lease document in the sidecar collection
(``writer:<collection>``, see :mod:`datakit.stores.mongo.layout`): a random
owner token, its pid and host, when it was acquired and when it expires.
Nothing on a server notices that a client was killed, so a lease is only good
until it expires; the writer renews it from a background thread every third
of its length, and again before each commit. A second writer is refused while
the lease is current, and takes it over once it has expired: a conversion
killed with ``kill -9`` on another host blocks its ``--resume`` for one lease
length at most. On the holder's own host there is no need to wait: the lease
also names the holder's process space (the boot and the pid namespace, so a
pid means the same process to both), and a writer there whose pid is gone has
its lease taken over at once. A live process with that pid (one that reused
it, say) is waited for, as any holder is: mistaking a live writer for a dead
one would let two conversions write one store.

Times are the server's (``localTime`` of the ``hello`` command), so clients
on hosts whose clocks disagree still agree on when a lease expires. Every
change is one single-document update conditioned on the owner token or on the
expiry, which MongoDB applies atomically.

The lease lasts :data:`DEFAULT_LEASE_SECONDS`, or what the environment
variable ``DATAKIT_MONGO_LEASE_SECONDS`` says (the tests use a few seconds).
"""

from __future__ import annotations

import calendar
import contextlib
import datetime
import functools
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from datakit.errors import StoreError, option
from datakit.stores.conversion_state import WriterIdentity
from datakit.stores.mongo.connection import MongoConnection

__all__ = ["DEFAULT_LEASE_SECONDS", "LEASE_SECONDS_VARIABLE", "WriterLease", "lease_seconds",
           "current_holder"]

DEFAULT_LEASE_SECONDS = 60.0
LEASE_SECONDS_VARIABLE = "DATAKIT_MONGO_LEASE_SECONDS"
_DUPLICATE_KEY = 11000


def lease_seconds() -> float:
    """The lease length: ``DATAKIT_MONGO_LEASE_SECONDS``, else :data:`DEFAULT_LEASE_SECONDS`.

    Raises:
        StoreError: the variable is set to anything but a positive number.
    """
    value = os.environ.get(LEASE_SECONDS_VARIABLE)
    if value is None:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise StoreError(f"{LEASE_SECONDS_VARIABLE}={value!r} is not a positive number of seconds")
    return seconds


def server_time_ms(connection: MongoConnection) -> int:
    """The server's clock in milliseconds since the epoch (the client's, if the server has none)."""
    hello = connection.call(lambda: connection.client.admin.command("hello"))
    local_time = hello.get("localTime")
    if not isinstance(local_time, datetime.datetime):
        return int(time.time() * 1000)
    return calendar.timegm(local_time.utctimetuple()) * 1000 + local_time.microsecond // 1000


def current_holder(connection: MongoConnection, document: dict[str, Any] | None) -> WriterIdentity | None:
    """Who holds the lease ``document``, or ``None`` when there is none or it has expired."""
    if document is None:
        return None
    expires = document.get("expires")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        return None
    if expires <= server_time_ms(connection) or _died_here(document):
        return None
    return _identity(document)


def _process_space() -> str | None:
    """What makes a pid name the same process to two processes on one host: the boot and the pid
    namespace (containers sharing a host name may not share pids); ``None`` where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as stream:
            boot = stream.read().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"
    except OSError:  # not Linux
        return None


def _died_here(document: dict[str, Any]) -> bool:
    """Whether the lease's holder ran in this process space (host, boot, pid namespace) and its
    process is gone. Anything unknown counts as alive."""
    pid = document.get("pid")
    if document.get("host") != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return False
    if pid <= 0 or pid == os.getpid() or document.get("space") != _process_space():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A process that exited and that its parent has not reaped yet (it still has a pid)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stream:
            return stream.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


class WriterLease:
    """This process's lease on one store.

    Args:
        connection: the writer's connection.
        meta: returns the sidecar collection (with the writer's write concern).
        lease: the lease document's ``_id``.
        collection: the store's collection, as the lease document names it.
        seconds: the lease length.
    """

    def __init__(self, connection: MongoConnection, meta: Callable[[], Any], lease: str, collection: str,
                 seconds: float) -> None:
        self._connection = connection
        self._meta = meta
        self._id = lease
        self._collection = collection
        self._length_ms = max(1, int(seconds * 1000))
        self._owner = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: str | None = None

    def acquire(self) -> tuple[WriterIdentity, int] | None:
        """Take the lease, or take over an expired one.

        Returns:
            ``None`` when this process holds the lease now; else who holds it
            and in how many milliseconds it expires unless renewed.
        """
        call = self._connection.call
        for _ in range(3):  # a lease released or broken between two steps is tried again
            now = server_time_ms(self._connection)
            fields = {"collection": self._collection, "kind": "writer", "owner": self._owner,
                      "pid": os.getpid(), "host": socket.gethostname(), "space": _process_space(),
                      "acquired": now, "expires": now + self._length_ms}
            if call(functools.partial(self._insert, {"_id": self._id, **fields})):
                break
            if call(functools.partial(self._take_over_expired, now, fields)):
                break
            document = call(functools.partial(self._meta().find_one, {"_id": self._id}))
            if document is None:
                continue
            if document.get("owner") == self._owner:  # a retried write of ours had gone through
                break
            expires = document.get("expires")
            if not _is_number(expires) or _died_here(document):  # not datakit's, or its holder is gone
                stranger = {"_id": self._id, "owner": document.get("owner")}
                call(functools.partial(self._meta().delete_one, stranger))
                continue
            return _identity(document), max(0, int(expires) - now)
        else:
            raise StoreError(f"the writer lease {self._id!r} changed hands three times while being "
                             "taken; try again")
        self._thread = threading.Thread(target=self._renew_regularly, name=f"datakit lease {self._id}",
                                        daemon=True)
        self._thread.start()
        return None

    def _take_over_expired(self, now: int, fields: dict[str, Any]) -> bool:
        result = self._meta().update_one({"_id": self._id, "expires": {"$lt": now}}, {"$set": fields})
        return bool(result.matched_count)

    def _insert(self, document: dict[str, Any]) -> bool:
        from pymongo.errors import DuplicateKeyError

        try:
            self._meta().insert_one(document)
        except DuplicateKeyError:
            return False
        return True

    def confirm(self) -> None:
        """Renew the lease now, before a commit.

        Raises:
            StoreError: the lease was lost: it expired unrenewed and another
                conversion took the store over. This one must stop writing.
        """
        if self._lost is None and not self._renew():
            self._lost = "another conversion took it over"
        if self._lost is not None:
            raise StoreError.advising(
                "this conversion lost its writer lease on {collection!r} ({lost}, after it went "
                "{seconds:g} s unrenewed); it stopped writing. Let the other conversion finish, or stop it "
                "and rerun with {resume}", collection=self._collection, lost=self._lost,
                seconds=self._length_ms / 1000, resume=option("resume"))

    def _renew(self) -> bool:
        now = server_time_ms(self._connection)
        result = self._connection.call(lambda: self._meta().update_one(
            {"_id": self._id, "owner": self._owner}, {"$set": {"expires": now + self._length_ms}}))
        return bool(result.matched_count)

    def _renew_regularly(self) -> None:
        interval = self._length_ms / 3000
        while not self._stop.wait(interval):
            try:
                if not self._renew():
                    self._lost = "another conversion took it over"
                    return
            except Exception:  # the server is away: the next tick tries again, and commits check
                continue

    def release(self) -> None:
        """Stop renewing and give the lease back (best effort: an unreachable server lets it expire)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with contextlib.suppress(StoreError):  # else it expires by itself
            self._connection.call(lambda: self._meta().delete_one({"_id": self._id, "owner": self._owner}))


def _identity(document: dict[str, Any]) -> WriterIdentity:
    pid, host = document.get("pid"), document.get("host")
    return WriterIdentity(pid if isinstance(pid, int) and not isinstance(pid, bool) else 0,
                          host if isinstance(host, str) else "an unknown host")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
