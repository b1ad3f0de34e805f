"""Pixel depth and pixel buffers at conversion time.

The report and the manifest count the source images with more than 8 bits
per sample (16-bit PNGs and TIFFs, float images), which every reader scales
to 8 bits (:func:`datakit.format.decoding.rgb_pixels`, the one place that rule lives,
shared with read-time decoding). A 16-bit PNG is told from its header's bit
depth, since Pillow opens it as 8-bit RGB; other formats from Pillow's mode
or TIFF tags. Decoded pixels are framed here for ``format="raw"`` records.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from datakit.format.decoding import HIGH_BIT_DEPTH_MODES
from datakit.format.records import HEADER_SIZE

__all__ = ["is_16_bit_png", "has_deep_samples", "framed_pixels", "FramedPixels", "framed_array"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_BITS_PER_SAMPLE = 258  # the TIFF tag


def is_16_bit_png(data: memoryview) -> bool:
    """Whether ``data`` is a PNG with 16 bits per sample (its IHDR bit depth)."""
    start = bytes(data[:25])
    return start[:8] == _PNG_SIGNATURE and start[12:16] == b"IHDR" and len(start) == 25 and start[24] == 16


def has_deep_samples(image: Image.Image) -> bool:
    """Whether Pillow's image has more than 8 bits per sample, in its mode or its TIFF tags."""
    if image.mode in HIGH_BIT_DEPTH_MODES:
        return True
    tags = getattr(image, "tag_v2", None)
    bits = tags.get(_BITS_PER_SAMPLE) if tags is not None else None  # 16-bit RGB reads as "RGB"
    if isinstance(bits, int):
        bits = (bits,)
    return isinstance(bits, tuple) and any(isinstance(value, int) and value > 8 for value in bits)


def framed_pixels(pixels: np.ndarray) -> bytearray:
    """Decoded pixels copied once, after room for a record header
    (:func:`~datakit.format.records.seal_record` then makes them the record without copying them again)."""
    framed = bytearray(HEADER_SIZE + pixels.nbytes)
    np.frombuffer(framed, dtype=np.uint8, offset=HEADER_SIZE).reshape(pixels.shape)[...] = pixels
    return framed



class FramedPixels(bytearray):
    """Raw RGB pixels (``height x width x 3``, uint8) after room for a record header, as a source
    reader hands them over (a pickled pixel array): stored as a raw record, not checked as a file.
    Made by :func:`framed_array`."""

    height: int = 0
    width: int = 0


def framed_array(pixels: np.ndarray) -> FramedPixels:
    """``(height, width, 3)`` uint8 pixels copied once after room for a record header."""
    framed = FramedPixels(HEADER_SIZE + pixels.nbytes)
    np.frombuffer(framed, dtype=np.uint8, offset=HEADER_SIZE).reshape(pixels.shape)[...] = pixels
    framed.height, framed.width = int(pixels.shape[0]), int(pixels.shape[1])
    return framed
