"""Decoding a record's payload into pixels: PIL, numpy, tensor, or channel planes in place.

Datasets, inspection and the benchmarks decode here; conversion only uses
:func:`decode_colour_jpeg` to verify source files (:mod:`datakit.conversion.images.checks`).
Every path gives Pillow's pixels: JPEGs with three components go to
libjpeg-turbo through simplejpeg, which is Pillow's decoder with Pillow's
settings at about twice the speed; greyscale JPEGs and those simplejpeg
refuses to datakit's own libjpeg-turbo binding, with the same settings; and
everything else to Pillow itself.

Every path also gives the same answer for the same record, which the
hostile-store fuzzing holds them to (``docs/reliability.md``): the PIL output
is made from the array; a JPEG with one or three components is accepted or
refused by libjpeg-turbo's one rule (:mod:`datakit.format.jpeg`: warnings about
corrupt data tolerated, as in Pillow; data cut before the end-of-image marker
refused), not by Pillow's own parser; an image over the read-time pixel limit
is refused before anything is allocated for it (:mod:`datakit.format.bounds`);
and an image of another size than its record header says is corrupt.
Images with more than 8 bits per sample (16-bit and float greyscale, which
Pillow's ``convert("RGB")`` would clip to white or black) are scaled to 8
bits by :func:`rgb_pixels`, the one place that rule lives: conversion uses it
too, so a raw store and an encoded one give the same pixels.
torch is imported only by :func:`record_to_tensor`, so that conversion,
which decodes to verify, never pays for it.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from datakit.format.bounds import check_pixels
from datakit.format.headers import ImageHeader, sniff_header
from datakit.format.jpeg import UnsupportedColourSpace, decode_image, region_decoding_available
from datakit.format.records import PayloadKind, Record, RecordHeader

try:  # a libjpeg-turbo binding twice as fast as Pillow's JPEG decoder (a dependency)
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - a platform without its wheels: Pillow decodes everything
    _simplejpeg = None

if TYPE_CHECKING:
    import torch

__all__ = [
    "HIGH_BIT_DEPTH_MODES",
    "ImageShapeError",
    "HeaderSizeError",
    "PixelScaleError",
    "check_header_size",
    "rgb_pixels",
    "record_to_pil",
    "record_to_array",
    "record_to_tensor",
    "record_planes_into",
    "decode_jpeg_planes_into",
    "decode_jpeg_into",
    "decode_colour_jpeg",
]


class ImageShapeError(ValueError):
    """A record decoded to an image of another size than its batch slot.

    Attributes:
        shape: the ``(H, W, channels)`` the record decoded to.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(f"image of shape {shape}")
        self.shape = shape


class HeaderSizeError(ValueError):
    """A record's image is not of the size its header says (a store that lies about its images)."""


def check_header_size(width: int, height: int, header: RecordHeader) -> None:
    """Refuse an image of ``width`` x ``height`` in a record whose header says otherwise.

    Raises:
        HeaderSizeError: the sizes differ.
    """
    if (width, height) != (header.width, header.height):
        raise HeaderSizeError(f"the image is {width}x{height}, but its record header says "
                              f"{header.width}x{header.height}")


HIGH_BIT_DEPTH_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I", "F"})
"""Pillow's modes for greyscale samples wider than 8 bits: 16-bit unsigned, 32-bit
signed and 32-bit float. (Pillow itself reduces 16-bit RGB and RGBA files to their
high bytes, as mode ``RGB`` and ``RGBA``.)"""


class PixelScaleError(ValueError):
    """An image whose pixel values have no 8-bit scale datakit can tell; the message says why."""


def rgb_pixels(image: Image.Image) -> np.ndarray:
    """Any image Pillow opened, as ``(H, W, 3)`` uint8 RGB pixels (a fresh array).

    8-bit images are Pillow's ``convert("RGB")``. Wider greyscale samples are
    scaled, never clipped:

    * 16-bit (modes ``I;16*``, and ``I`` with values in 0..65535): the high
      byte, ``value >> 8`` (what Pillow does with 16-bit RGB files).
    * float (mode ``F``): values in [0, 1] times 255, else values in
      [0, 255] as they are, rounded to the nearest integer.

    Raises:
        PixelScaleError: float values outside both ranges, or not finite, or
            32-bit integers outside 0..65535: datakit does not guess a scale.
    """
    if image.mode not in HIGH_BIT_DEPTH_MODES:
        pixels: np.ndarray = np.array(image if image.mode == "RGB" else image.convert("RGB"))
        return pixels
    grey = _eight_bit_grey(image)
    rgb: np.ndarray = np.repeat(grey[..., None], 3, axis=-1)
    return rgb


def _eight_bit_grey(image: Image.Image) -> np.ndarray:
    values: np.ndarray = np.asarray(image)
    if image.mode == "F":
        if not np.isfinite(values).all():
            raise PixelScaleError("float pixels that are not finite (NaN or infinity); convert the "
                                  "image to 8 or 16 bits first")
        low, high = float(values.min()), float(values.max())
        if low >= 0 and high <= 1:
            values = values * 255
        elif not (low >= 0 and high <= 255):
            raise PixelScaleError(
                f"float pixels from {low:g} to {high:g}, outside [0, 1] and [0, 255]: datakit does not "
                "guess their scale; convert the image to 8 or 16 bits first")
        rounded: np.ndarray = np.rint(values).astype(np.uint8)
        return rounded
    if image.mode == "I" and (values.min() < 0 or values.max() > 0xFFFF):
        raise PixelScaleError(f"32-bit integer pixels from {values.min()} to {values.max()}, outside "
                              "0..65535: convert the image to 8 or 16 bits first")
    return (values >> 8).astype(np.uint8)


def record_to_pil(record: Record) -> Image.Image:
    """The record's image as an RGB PIL image: :func:`record_to_array`'s pixels, so that the two
    accept and refuse the same records."""
    return Image.fromarray(record_to_array(record))


def record_to_array(record: Record) -> np.ndarray:
    """The record's image as an ``(H, W, 3)`` uint8 array (a fresh, writable copy).

    Raises:
        ValueError: the payload does not decode, or not to the header's size; its
            subclasses say why (:class:`HeaderSizeError`, :class:`PixelScaleError`,
            :class:`~datakit.format.bounds.ImageTooLarge`).
        Exception: whatever Pillow raises for a payload that is no image it knows.
    """
    header = record.header
    if header.kind is PayloadKind.RAW:
        flat = np.frombuffer(record.payload, dtype=np.uint8)
        copy: np.ndarray = flat.reshape(header.height, header.width, header.channels).copy()
        return copy
    data = bytes(record.payload)
    image_header = sniff_header(data)
    if image_header is not None:
        check_pixels(image_header[1], image_header[2])
    pixels = decode_colour_jpeg(data, image_header)
    if pixels is None:
        with Image.open(io.BytesIO(record.payload)) as image:
            image.load()
            pixels = rgb_pixels(image)  # for RGB, one copy: skips convert()'s
    check_header_size(pixels.shape[1], pixels.shape[0], header)
    return pixels


def record_to_tensor(record: Record) -> torch.Tensor:
    """The record's image as a ``(3, H, W)`` uint8 tensor (a channel-first view of a fresh array)."""
    import torch

    return torch.from_numpy(record_to_array(record)).permute(2, 0, 1)


def record_planes_into(record: Record, out: np.ndarray) -> None:
    """Decode the record's image into ``out``, a ``(3, H, W)`` uint8 batch slot.

    A colour JPEG of the slot's size is decoded straight into the planes
    (:func:`decode_jpeg_planes_into`); raw pixels and every other image are
    decoded to ``(H, W, 3)`` and copied in channel-first.

    Raises:
        ImageShapeError: the image is not RGB of the slot's size; ``out`` is untouched.
        Exception: whatever the decoder raises for a payload it cannot decode.
    """
    header = record.header
    pixels: np.ndarray
    if header.kind is PayloadKind.RAW:
        pixels = np.frombuffer(record.payload, dtype=np.uint8).reshape(header.shape)
    elif out.shape[1:] == (header.height, header.width) and decode_jpeg_planes_into(record.payload, out):
        return
    else:
        pixels = record_to_array(record)
    if pixels.shape != (out.shape[1], out.shape[2], 3):
        raise ImageShapeError(pixels.shape)
    np.copyto(out, pixels.transpose(2, 0, 1))


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
    check_pixels(header[1], header[2])
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


def decode_jpeg_into(data: bytes | memoryview,
                     allocate: Callable[[tuple[int, int, int]], np.ndarray]) -> np.ndarray | None:
    """A three-component JPEG decoded by libjpeg-turbo into ``allocate((H, W, 3))``, which it returns.

    The same decoder and settings as :func:`decode_colour_jpeg`'s, so the
    pixels are its; the memory is the caller's (a loader's shared memory).

    Returns:
        None, with nothing allocated, for any other image, or, after
        allocating, when the decoder refuses the file: the caller then decodes
        the general way, which names any problem.
    """
    if _simplejpeg is None:
        return None
    header = sniff_header(data)
    if header is None or header[0] != "JPEG" or header[3] != 3:
        return None
    check_pixels(header[1], header[2])
    out = allocate((header[2], header[1], 3))
    try:
        _simplejpeg.decode_jpeg(data, colorspace="RGB", buffer=out)
    except ValueError:  # warnings are errors there: the general way decides
        return None
    return out


_scratch = threading.local()


def _rgbx_scratch(height: int, width: int) -> np.ndarray:
    """A reused ``(height, width, 4)`` buffer, one per thread: a fresh one per image
    would be page-faulted in every time."""
    buffer: np.ndarray | None = getattr(_scratch, "rgbx", None)
    if buffer is None or buffer.shape != (height, width, 4):
        buffer = _scratch.rgbx = np.empty((height, width, 4), dtype=np.uint8)
    return buffer


def decode_colour_jpeg(data: bytes | memoryview, header: ImageHeader | None) -> np.ndarray | None:
    """A JPEG of one or three components decoded by libjpeg-turbo; None for any other image.

    simplejpeg calls the same libjpeg-turbo as Pillow with the same settings
    (accurate integer IDCT, fancy upsampling), so the pixels are Pillow's, at
    about twice the speed; it takes the three-component JPEGs that decode
    without a warning. The rest, greyscale JPEGs and those libjpeg warns about,
    go to datakit's own binding (:func:`datakit.format.jpeg.decode_image`),
    which decides by the rule every read path follows: libjpeg's errors and
    data cut before the end-of-image marker refuse the file, its warnings about
    corrupt data do not (as in Pillow). CMYK and YCCK JPEGs go to Pillow, whose
    colour conversion is the reference. Without the binding (built without
    libjpeg's headers), Pillow decodes whatever simplejpeg does not.

    Raises:
        ValueError: libjpeg-turbo refuses the file (the message says why).
    """
    if header is None or header[0] != "JPEG" or header[3] not in (1, 3):
        return None
    if _simplejpeg is not None and header[3] == 3:
        try:
            pixels: np.ndarray = _simplejpeg.decode_jpeg(data, colorspace="RGB")
            return pixels
        except ValueError:  # warnings are errors there: the rule above decides
            pass
    if not region_decoding_available():
        return None
    try:
        return decode_image(data, header[1], header[2])
    except UnsupportedColourSpace:  # three components in a colour space libjpeg cannot turn into RGB
        return None
