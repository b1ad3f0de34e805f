"""Reading a source file's bytes: regular files only, and every read bounded.

An image folder, a label file or a Hugging Face row may name anything the
file system holds: a FIFO, whose ``open`` waits for a writer that never
comes; ``/dev/zero``, whose size reads as 0 and whose bytes never end; a
50 GB disk image named ``x.jpg``. :func:`read_framed` reads regular files
only, checked before opening and again (``fstat``) after an ``open`` that
cannot wait (``O_NONBLOCK``), and never more bytes than the file's size
allows, nor than the pixel limit's worth (:func:`file_size_limit`), so that
a conversion skips such a file by name instead of hanging or running out of
memory (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from contextvars import ContextVar

from datakit.format.records import HEADER_SIZE

__all__ = ["BadImage", "DEFAULT_MAX_PIXELS", "BYTES_PER_PIXEL", "read_framed", "file_size_limit",
           "pixel_limit_for_reads"]

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own default limit (``Image.MAX_IMAGE_PIXELS``), fixed here so every
worker process applies the same limit whatever the parent changed."""

BYTES_PER_PIXEL = 8
"""Bytes a source file may have per pixel of the pixel limit (:func:`file_size_limit`)."""

_MAX_PIXELS: ContextVar[int] = ContextVar("datakit_read_max_pixels", default=DEFAULT_MAX_PIXELS)
"""The pixel limit :func:`read_framed` sizes its bound by (:func:`pixel_limit_for_reads`)."""

_FILE_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
               stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class BadImage(Exception):
    """A source file that cannot be stored; the message says why."""


def read_framed(path: str) -> bytearray:
    """The file's bytes, read straight into place after room for a record header.

    Only a regular file is read: a FIFO (whose ``open`` waits for a writer),
    a device (``/dev/zero`` never ends; its size reads as 0), a socket or a
    folder is refused before it is opened, and again after (``fstat`` of what
    was opened, without waiting: ``O_NONBLOCK``), in case it changed in between.
    Every read is bounded: by the file's own size, and by
    :func:`file_size_limit` (the pixel limit's worth of bytes), so that a
    file that grows while it is read cannot fill the memory either.

    Raises:
        BadImage: the file is missing, unreadable, not a regular file, or
            larger than the limit (the message says which).
    """
    max_pixels = _MAX_PIXELS.get()
    limit = file_size_limit(max_pixels)
    try:
        _check_regular(os.stat(path))  # before opening: opening a device may already do something
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with open(descriptor, "rb", buffering=0) as handle:
            status = os.fstat(descriptor)
            _check_regular(status)
            if status.st_size > limit:
                raise BadImage(_too_big(status.st_size, limit, max_pixels))
            framed = _read_into(handle, status.st_size, limit)
    except OSError as exc:
        raise BadImage(f"unreadable: {exc.strerror or exc}") from None
    if len(framed) - HEADER_SIZE > limit:
        raise BadImage(_too_big(len(framed) - HEADER_SIZE, limit, max_pixels))
    return framed


def file_size_limit(max_pixels: int) -> int:
    """The most bytes a source file may have: :data:`BYTES_PER_PIXEL` for each pixel the
    pixel limit allows (an uncompressed 16-bit RGBA file), plus 1 MiB for its metadata."""
    return max_pixels * BYTES_PER_PIXEL + (1 << 20)


@contextlib.contextmanager
def pixel_limit_for_reads(max_pixels: int) -> Iterator[None]:
    """:func:`read_framed` bounds files by ``max_pixels`` (the conversion's ``--max-pixels``) meanwhile."""
    token = _MAX_PIXELS.set(max_pixels)
    try:
        yield
    finally:
        _MAX_PIXELS.reset(token)


def _check_regular(status: os.stat_result) -> None:
    if not stat.S_ISREG(status.st_mode):
        kind = _FILE_KINDS.get(stat.S_IFMT(status.st_mode), "a special file")
        raise BadImage(f"not a regular file ({kind})")


def _read_into(handle: io.FileIO, size: int, limit: int) -> bytearray:
    """``size`` bytes after the room for a header; fewer if the file shrank, more (up to one byte
    over ``limit``, which the caller refuses) if it grew while being read."""
    framed = bytearray(HEADER_SIZE + size)
    with memoryview(framed) as view:
        filled = HEADER_SIZE
        while filled < len(framed):
            count = handle.readinto(view[filled:])
            if not count:
                break
            filled += count
    del framed[filled:]  # the file shrank while being read
    while filled - HEADER_SIZE <= limit:  # or grew: read on, a bounded amount
        more = handle.read(min(1 << 20, limit + 1 - (filled - HEADER_SIZE)))
        if not more:
            break
        framed += more
        filled += len(more)
    return framed


def _too_big(size: int, limit: int, max_pixels: int) -> str:
    return (f"{size} bytes, more than the {limit} a file may have at --max-pixels {max_pixels} "
            f"({BYTES_PER_PIXEL} bytes a pixel); raise the limit with --max-pixels")
