"""channel.send waits for room in the pipe and gives up when the reader is gone."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from datakit.loader import channel


def fill(connection) -> None:
    """Writes into the pipe until it is full."""
    fd = connection.fileno()
    os.set_blocking(fd, False)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)


def test_send_delivers_when_there_is_room():
    reader, writer = multiprocessing.Pipe(duplex=False)
    channel.send(writer, (1, [2, 3]), peer_alive=lambda: True)
    assert reader.recv() == (1, [2, 3])


def test_send_to_a_full_pipe_gives_up_when_the_peer_is_gone():
    reader, writer = multiprocessing.Pipe(duplex=False)
    fill(writer)
    checks = []

    def peer_alive() -> bool:
        checks.append(True)
        return len(checks) < 3

    with pytest.raises(channel.PeerGoneError):
        channel.send(writer, "late", peer_alive, poll_interval=0.01)
    assert len(checks) == 3
    reader.close()
    writer.close()


def test_send_to_a_closed_reader_raises_broken_pipe():
    reader, writer = multiprocessing.Pipe(duplex=False)
    reader.close()
    with pytest.raises(BrokenPipeError):
        channel.send(writer, "nobody", peer_alive=lambda: True)


def test_try_send_never_waits():
    reader, writer = multiprocessing.Pipe(duplex=False)
    assert channel.try_send(writer, "now")
    assert reader.recv() == "now"
    fill(writer)
    assert not channel.try_send(writer, "later")
    reader.close()
    assert not channel.try_send(writer, "nobody")
    writer.close()
    assert not channel.try_send(writer, "closed")
