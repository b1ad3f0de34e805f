"""Reading the EXIF orientation of a JPEG or PNG from its bytes, without Pillow.

Phones store photos as the sensor saw them and record in the EXIF
``Orientation`` tag (0x0112) how to turn them upright. Conversion counts the
images whose orientation is not 1 and, with ``exif_transpose``, stores them
upright. At tens of thousands of images per second, opening each file with
Pillow only to read one tag would cost more than the conversion; these lines
find the tag where Pillow does (the first ``Exif`` APP1 segment of a JPEG,
the ``eXIf`` chunk of a PNG before its image data) and read it the same way.
Other formats go through Pillow anyway and ask it (:func:`orientation_of`).
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["ORIENTATION_TAG", "UNKNOWN", "orientation_in_bytes", "orientation_of"]

ORIENTATION_TAG = 0x0112
UNKNOWN = 0
"""What :func:`orientation_in_bytes` returns for a format it does not read."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01}
_SHORT, _LONG = 3, 4


def orientation_in_bytes(data: bytes | bytearray | memoryview) -> int:
    """The EXIF orientation (1..8) of a JPEG or PNG; 1 without one; :data:`UNKNOWN` for other formats.

    A value outside 1..8, or a damaged EXIF block, reads as 1, as Pillow's
    ``ImageOps.exif_transpose`` treats it (it leaves such an image as it is).
    """
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    if data[:len(_PNG_SIGNATURE)] == _PNG_SIGNATURE:
        return _png(data)
    return UNKNOWN


def orientation_of(image: Any) -> int:
    """The EXIF orientation (1..8) of an image Pillow opened; 1 without a valid one."""
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except Exception:  # a damaged EXIF block: Pillow would not turn the image either
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _jpeg(data: bytes | bytearray | memoryview) -> int:
    position, end = 2, len(data)
    while position + 4 <= end:
        if data[position] != 0xFF:
            return 1
        marker = data[position + 1]
        if marker == 0xFF:
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # the image data starts: no EXIF before it
            return 1
        (length,) = struct.unpack_from(">H", data, position + 2)
        if length < 2:
            return 1
        body = bytes(data[position + 4:position + 2 + length])
        if marker == 0xE1 and body[:6] == b"Exif\x00\x00":
            return _tiff(body[6:])
        position += 2 + length
    return 1


def _png(data: bytes | bytearray | memoryview) -> int:
    position, end = len(_PNG_SIGNATURE), len(data)
    while position + 8 <= end:
        length, kind = struct.unpack_from(">I4s", data, position)
        if kind == b"IDAT" or kind == b"IEND":
            return 1
        if kind == b"eXIf":
            body = bytes(data[position + 8:position + 8 + length])
            return _tiff(body[6:] if body[:6] == b"Exif\x00\x00" else body)
        position += 12 + length
    return 1


def _tiff(block: bytes) -> int:
    """The orientation in IFD0 of an EXIF block (a TIFF header and its directories)."""
    if len(block) < 8 or block[:2] not in (b"II", b"MM"):
        return 1
    order = "<" if block[:2] == b"II" else ">"
    magic, directory = struct.unpack_from(order + "HI", block, 2)
    if magic != 42 or directory + 2 > len(block):
        return 1
    (count,) = struct.unpack_from(order + "H", block, directory)
    for entry in range(directory + 2, min(directory + 2 + 12 * count, len(block) - 11), 12):
        tag, kind, number = struct.unpack_from(order + "HHI", block, entry)
        if tag != ORIENTATION_TAG:
            continue
        if number < 1 or kind not in (_SHORT, _LONG):
            return 1
        (value,) = struct.unpack_from(order + ("H" if kind == _SHORT else "I"), block, entry + 8)
        return value if 1 <= value <= 8 else 1
    return 1
