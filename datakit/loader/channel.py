"""Sending on a pipe without waiting blind.

A write to a full pipe blocks until the reader drains it. :func:`send` first
waits, in slices of ``poll_interval``, until the pipe has room, and between
slices asks whether the other side is still there; only then does it write.
Messages on the loader's pipes are small (batches travel in shared memory),
so once there is room the write completes at once; a larger one completes as
the reader drains it, or fails with ``BrokenPipeError`` when the reader closes
its end.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["PeerGoneError", "send", "try_send"]


class PeerGoneError(ConnectionError):
    """The other end of the pipe stopped listening while we waited to send."""


def send(
    connection: Connection,
    message: Any,
    peer_alive: Callable[[], bool],
    poll_interval: float = 0.5,
) -> None:
    """Sends ``message`` once the pipe has room, checking ``peer_alive`` while waiting.

    Args:
        connection: The writing end.
        message: Anything picklable.
        peer_alive: Returns False when the reader is gone (or we are shutting down).
        poll_interval: Seconds between liveness checks.

    Raises:
        PeerGoneError: ``peer_alive()`` returned False before there was room.
        BrokenPipeError: The reader closed its end.
        Exception: Whatever pickling ``message`` raised (nothing was written then).
    """
    data = ForkingPickler.dumps(message)  # pickle first: a failure here leaves the pipe untouched
    fd = connection.fileno()
    while True:
        _, writable, _ = select.select([], [fd], [], poll_interval)
        if writable:
            connection.send_bytes(data)
            return
        if not peer_alive():
            raise PeerGoneError("the reader of this pipe is gone")


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
