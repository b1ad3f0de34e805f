"""channel.send waits for room in the pipe and gives up when the reader is gone;
channel.receive reads what it framed."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from datakit.procs import channel


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


def test_send_of_a_message_larger_than_the_pipe_gives_up_midway_when_the_peer_is_gone():
    # A blocking write would wait for the reader forever, with no liveness check,
    # when the reader was killed but another process still holds its end.
    reader, writer = multiprocessing.Pipe(duplex=False)
    outcome: list[BaseException | None] = []

    def sender() -> None:
        try:
            channel.send(writer, bytes(8 << 20), peer_alive=lambda: False, poll_interval=0.01)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    thread.join(timeout=10)
    stuck = thread.is_alive()
    reader.close()  # frees a sender stuck in a blocking write (it then fails with EPIPE)
    thread.join(timeout=10)
    writer.close()
    assert not stuck, "send blocked in a write to a pipe nobody reads"
    assert len(outcome) == 1 and isinstance(outcome[0], channel.PeerGoneError)


def test_send_of_a_large_message_completes_as_the_reader_drains_it():
    reader, writer = multiprocessing.Pipe(duplex=False)
    message = bytes(range(256)) * (12 << 12)  # 12 MiB
    received: list[object] = []
    thread = threading.Thread(target=lambda: received.append(channel.receive(reader)), daemon=True)
    thread.start()
    channel.send(writer, message, peer_alive=lambda: True, poll_interval=0.01)
    thread.join(timeout=30)
    assert received == [message]
    assert os.get_blocking(writer.fileno())  # left as it was: Connection.send still works
    writer.send("after")
    assert reader.recv() == "after"
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


def _send_from_a_child(messages) -> tuple[multiprocessing.connection.Connection, multiprocessing.Process]:
    reader, writer = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.get_context("fork").Process(target=_send_all, args=(writer, messages))
    process.start()
    writer.close()
    return reader, process


def _send_all(writer, messages) -> None:
    for message in messages:
        channel.send(writer, message, peer_alive=lambda: True)
    writer.close()


def test_receive_reads_what_send_wrote_small_and_larger_than_the_pipe():
    big = os.urandom(3 << 20)  # several times the pipe's buffer: arrives in many reads
    messages = [(0, "small"), (1, [big, b"", big[:100]]), (2, {"nested": (big[:70_000], 7)})]
    reader, process = _send_from_a_child(messages)
    try:
        assert [channel.receive(reader) for _ in messages] == messages
        with pytest.raises(EOFError):  # the writer has closed: no further message
            channel.receive(reader)
    finally:
        process.join()
        reader.close()


def test_receive_of_a_message_cut_short_raises_eof():
    reader, writer = multiprocessing.Pipe(duplex=False)
    os.write(writer.fileno(), (1000).to_bytes(4, "big") + b"only part of it")
    writer.close()
    with pytest.raises(EOFError, match="15 bytes into a 1000-byte read"):
        channel.receive(reader)
    reader.close()
