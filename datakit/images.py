"""Reading images safely: checks for conversion, decoding for datasets.

Conversion treats every source file as untrusted. :func:`read_source_image`
either returns the bytes to store, or raises :class:`BadImage` with a reason
a person can act on; a broken file never stops a conversion. Pillow's
decompression-bomb warning is promoted to an error so a tiny file that
inflates to gigabytes is skipped rather than decoded.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from datakit.headers import ImageHeader, sniff_header

try:  # a libjpeg-turbo binding twice as fast as Pillow's JPEG decoder (a dependency)
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - a platform without its wheels: Pillow decodes everything
    _simplejpeg = None
from datakit.records import HEADER_SIZE, PayloadKind, Record

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "BadImage",
    "SourceImage",
    "read_source_image",
    "record_to_pil",
    "record_to_array",
    "decode_jpeg_planes_into",
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
        pixels = _decode_colour_jpeg(data, header)  # a full decode: the fast way to verify
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
    except Image.DecompressionBombWarning as exc:
        raise BadImage(f"possible decompression bomb: {exc}") from None
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
        raise BadImage(f"{width}x{height} exceeds the limit of {max_pixels} pixels "
                       "(a possible decompression bomb)")


def _describe(exc: Exception) -> str:
    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can identify"
    message = str(exc) or type(exc).__name__
    if "truncated" in message:
        return f"truncated image ({message})"
    return f"cannot decode: {message}"


def record_to_pil(record: Record) -> Image.Image:
    """The record's image as an RGB PIL image."""
    header = record.header
    if header.kind is PayloadKind.RAW:
        return Image.fromarray(record_to_array(record))
    with Image.open(io.BytesIO(record.payload)) as image:
        converted: Image.Image = image.convert("RGB")
    return converted


def record_to_array(record: Record) -> np.ndarray:
    """The record's image as an ``(H, W, 3)`` uint8 array (a fresh, writable copy)."""
    header = record.header
    if header.kind is PayloadKind.RAW:
        flat = np.frombuffer(record.payload, dtype=np.uint8)
        copy: np.ndarray = flat.reshape(header.height, header.width, header.channels).copy()
        return copy
    data = bytes(record.payload)
    pixels = _decode_colour_jpeg(data, sniff_header(data))
    if pixels is not None:
        return pixels
    with Image.open(io.BytesIO(record.payload)) as image:
        image.load()
        if image.mode == "RGB":
            return np.array(image)  # one copy: skips convert()'s
        return np.array(image.convert("RGB"))


def decode_jpeg_planes_into(data: bytes | memoryview, out: np.ndarray) -> bool:
    """Decode a colour JPEG into ``out``, a ``(3, H, W)`` uint8 array, one plane per channel.

    libjpeg-turbo writes interleaved pixels only, and numpy transposes
    ``(H, W, 3)`` into ``(3, H, W)`` one byte at a time (55 µs for a 256x256
    image here). Decoding to 4-byte RGBX pixels instead lets each plane be cut
    out of the pixels, read as little-endian uint32, with one vectorised
    shift-and-narrow (26 µs for the three). The pixels are the same: the
    same decoder, the same colour conversion, only the output layout differs.

    Returns:
        False, with ``out`` untouched, when ``data`` is not a three-component
        JPEG of ``out``'s size or the decoder refuses it: the caller then
        decodes the general way, which names any problem.
    """
    if _simplejpeg is None or out.ndim != 3 or out.shape[0] != 3:
        return False
    header = sniff_header(data)
    if header is None or header[0] != "JPEG" or header[3] != 3 or out.shape[1:] != (header[2], header[1]):
        return False
    rgbx = _rgbx_scratch(header[2], header[1])
    try:
        _simplejpeg.decode_jpeg(data, colorspace="RGBX", buffer=rgbx)
    except ValueError:
        return False
    pixels = rgbx.view("<u4")[..., 0]  # R in the low byte, then G, B, X
    np.copyto(out[0], pixels, casting="unsafe")  # narrowing keeps the low byte
    np.right_shift(pixels, 8, out=out[1], casting="unsafe")
    np.right_shift(pixels, 16, out=out[2], casting="unsafe")
    return True


_scratch = threading.local()


def _rgbx_scratch(height: int, width: int) -> np.ndarray:
    """A reused ``(height, width, 4)`` buffer, one per thread: a fresh one per image
    would be page-faulted in every time."""
    buffer: np.ndarray | None = getattr(_scratch, "rgbx", None)
    if buffer is None or buffer.shape != (height, width, 4):
        buffer = _scratch.rgbx = np.empty((height, width, 4), dtype=np.uint8)
    return buffer


def _decode_colour_jpeg(data: bytes | memoryview, header: ImageHeader | None) -> np.ndarray | None:
    """A colour JPEG decoded by libjpeg-turbo through simplejpeg, else None.

    simplejpeg calls the same libjpeg-turbo as Pillow with the same settings
    (accurate integer IDCT, fancy upsampling), so the pixels are Pillow's, at
    about twice the speed. Only three-component JPEGs take this path: for
    greyscale and CMYK files Pillow's own colour conversion is the reference,
    and any file simplejpeg rejects goes to Pillow, which names the problem
    (or, for the few oddities libjpeg only warns about, accepts it).
    """
    if _simplejpeg is None:
        return None
    if header is None or header[0] != "JPEG" or header[3] != 3:
        return None
    try:
        pixels: np.ndarray = _simplejpeg.decode_jpeg(data, colorspace="RGB")
    except ValueError:
        return None
    return pixels
