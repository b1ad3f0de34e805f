"""Checking source images for conversion.

Conversion treats every source file as untrusted. :func:`read_source_image`
either returns the bytes to store, or raises :class:`BadImage` with a reason
a person can act on; a broken file never stops a conversion. Pillow's
decompression-bomb warning is promoted to an error so a tiny file that
inflates to gigabytes is skipped rather than decoded. Decoding stored records
for datasets is :mod:`datakit.decode`'s job; a full check decodes colour JPEGs
with its fast decoder.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from datakit.decode import decode_colour_jpeg
from datakit.headers import sniff_header
from datakit.records import HEADER_SIZE, PayloadKind

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "BadImage",
    "SourceImage",
    "read_source_image",
]

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own default limit (``Image.MAX_IMAGE_PIXELS``), fixed here so every
worker process applies the same limit whatever the parent changed."""


class BadImage(Exception):
    """A source file that cannot be stored; the message says why."""


@dataclass(frozen=True)
class SourceImage:
    """What conversion stores for one image.

    Attributes:
        framed: the bytes to store (the file itself, or raw RGB pixels) after
            :data:`~datakit.records.HEADER_SIZE` bytes of room, so that
            :func:`~datakit.records.seal_record` makes them the record
            without copying them again.
        kind: which of the two the payload is.
        width, height, channels: the geometry; for ``ENCODED`` payloads,
            ``channels`` is the number of bands of the file's own mode.
        image_format: Pillow's name of the file format (``"JPEG"``, ``"PNG"``).
    """

    framed: bytearray
    kind: PayloadKind
    width: int
    height: int
    channels: int
    image_format: str

    @property
    def payload(self) -> memoryview:
        """The bytes to store, without the room in front."""
        return memoryview(self.framed)[HEADER_SIZE:]


def read_source_image(path: str, *, kind: PayloadKind, verify: bool,
                      max_pixels: int = DEFAULT_MAX_PIXELS) -> SourceImage:
    """Read one source file and check it is an image.

    Args:
        path: the file.
        kind: store the file's bytes (``ENCODED``) or decoded RGB pixels (``RAW``).
        verify: decode the whole image, not only its header. Always done for ``RAW``.
        max_pixels: refuse images with more pixels than this.

    Raises:
        BadImage: the file is unreadable, empty, not an image, truncated,
            corrupt or too large.
    """
    framed = _read_framed(path)
    data = memoryview(framed)[HEADER_SIZE:]
    if not data:
        raise BadImage("empty file (0 bytes)")
    header = sniff_header(data)
    if header is not None:
        image_format, width, height, channels = header
        _check_pixels(width, height, max_pixels)
        if kind is PayloadKind.ENCODED and not verify:
            return SourceImage(framed, kind, width, height, channels, image_format)
        pixels = decode_colour_jpeg(data, header)  # a full decode: the fast way to verify
        if pixels is not None:
            if kind is PayloadKind.RAW:
                return SourceImage(_framed_pixels(pixels), kind, width, height, 3, image_format)
            return SourceImage(framed, kind, width, height, channels, image_format)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                _check_pixels(width, height, max_pixels)
                image_format = image.format or "unknown"
                channels = len(image.getbands())
                if kind is PayloadKind.RAW:
                    pixels = np.asarray(image.convert("RGB"))
                    return SourceImage(_framed_pixels(pixels), kind, width, height, 3, image_format)
                if verify:
                    image.load()
    except BadImage:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise BadImage(f"possible decompression bomb ({exc}); raise the limit with --max-pixels") from None
    except Exception as exc:  # Pillow raises many types for hostile input
        raise BadImage(_describe(exc)) from None
    return SourceImage(framed, kind, width, height, channels, image_format)


def _framed_pixels(pixels: np.ndarray) -> bytearray:
    """Decoded pixels copied once, after room for a record header."""
    framed = bytearray(HEADER_SIZE + pixels.nbytes)
    np.frombuffer(framed, dtype=np.uint8, offset=HEADER_SIZE).reshape(pixels.shape)[...] = pixels
    return framed


def _read_framed(path: str) -> bytearray:
    """The file's bytes, read straight into place after room for a record header."""
    try:
        with open(path, "rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            framed = bytearray(HEADER_SIZE + size)
            with memoryview(framed) as view:
                filled = HEADER_SIZE
                while filled < len(framed):
                    count = handle.readinto(view[filled:])
                    if not count:
                        break
                    filled += count
            del framed[filled:]  # the file shrank while being read
            framed += handle.read()  # or grew
    except OSError as exc:
        raise BadImage(f"unreadable: {exc.strerror or exc}") from None
    return framed


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise BadImage(f"{width}x{height} is more than {max_pixels} pixels (possible decompression bomb); "
                       "raise the limit with --max-pixels")


def _describe(exc: Exception) -> str:
    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can identify"
    message = str(exc) or type(exc).__name__
    if "truncated" in message:
        return f"truncated image ({message})"
    return f"cannot decode: {message}"
