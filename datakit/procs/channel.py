"""Sending on a pipe without waiting blind, and receiving without extra copies.

A write to a full pipe blocks until the reader drains it. :func:`send`
writes without blocking as much as the pipe takes, then waits for room in
slices of ``poll_interval``, and between slices asks whether the other side is
still there. Messages on the loader's pipes are usually small (batches travel
in shared memory), so the write completes at once; a larger one completes as
the reader drains it, fails with ``BrokenPipeError`` when the reader closes its
end, or gives up (half sent) when the reader is gone.

:func:`receive` reads what ``Connection.send_bytes`` framed (a 4-byte size,
or -1 and an 8-byte size, then the bytes) straight into one buffer of the
right size. ``Connection.recv`` gathers the bytes through an ``io.BytesIO``
and copies them out again, which for the conversion's records of a few
dozen kilobytes costs about three times the time of this (28 against 10 µs
of the main process per 28 KB record, measured on this project's 2-core
machine).
"""

from __future__ import annotations

import os
import select
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["PeerGoneError", "send", "try_send", "receive"]


class PeerGoneError(ConnectionError):
    """The other end of the pipe stopped listening while we waited to send."""


def send(
    connection: Connection,
    message: Any,
    peer_alive: Callable[[], bool],
    poll_interval: float = 0.5,
) -> None:
    """Sends ``message`` as the pipe makes room for it, checking ``peer_alive`` while waiting.

    Args:
        connection: The writing end.
        message: Anything picklable.
        peer_alive: Returns False when the reader is gone (or we are shutting down).
        poll_interval: Seconds between liveness checks.

    Raises:
        PeerGoneError: ``peer_alive()`` returned False while waiting for room
            (perhaps with part of the message written: the pipe is then unusable).
        BrokenPipeError: The reader closed its end.
        Exception: Whatever pickling ``message`` raised (nothing was written then).
    """
    # Pickle first: a failure here leaves the pipe untouched. Protocol 5 (not yet the default)
    # carries a bytearray as its bytes; protocol 4 makes a bytes copy to rebuild it from.
    data = ForkingPickler.dumps(message, protocol=5)
    # The frame Connection.send_bytes writes (receive reads it), written without blocking:
    # a blocking write of more than the room left would wait for the reader with no
    # liveness check, for good if the reader was killed while others hold its end.
    size = len(data)
    header = struct.pack("!i", size) if size <= 0x7FFFFFFF else struct.pack("!iQ", -1, size)
    fd = connection.fileno()
    os.set_blocking(fd, False)
    try:
        for part in (header, data):
            view = memoryview(part)
            while view:
                try:
                    view = view[os.write(fd, view) :]
                    continue
                except BlockingIOError:
                    pass
                _, writable, _ = select.select([], [fd], [], poll_interval)
                if not writable and not peer_alive():
                    raise PeerGoneError("the reader of this pipe is gone")
    finally:
        os.set_blocking(fd, True)


def try_send(connection: Connection, message: Any) -> bool:
    """Sends a small message only if the pipe has room now; never waits.

    For best-effort notices (``STOP`` at shutdown) whose absence is covered
    otherwise (the stop event, closed pipes, terminate).

    Returns:
        Whether the message was sent.
    """
    try:
        _, writable, _ = select.select([], [connection.fileno()], [], 0)
        if writable:
            connection.send(message)
            return True
    except (OSError, ValueError):  # closed, or the reader is gone
        pass
    return False


def receive(connection: Connection) -> Any:
    """Reads and unpickles one message sent with ``send_bytes`` (as :func:`send` does).

    Blocks until the whole message is there; call it when the pipe is readable.

    Raises:
        EOFError: The writer closed its end (before or inside a message).
        OSError: Reading failed.
    """
    fd = connection.fileno()
    (size,) = struct.unpack("!i", _read_exactly(fd, 4))
    if size == -1:  # the framing of messages over 2 GiB
        (size,) = struct.unpack("!Q", _read_exactly(fd, 8))
    return ForkingPickler.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        count = os.readv(fd, [view[done:]])
        if count == 0:
            raise EOFError(f"the pipe closed {done} bytes into a {size}-byte read")
        done += count
    return buffer
