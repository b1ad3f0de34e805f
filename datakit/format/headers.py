"""Reading an image's size from its first bytes, without Pillow, for JPEG and PNG.

``datakit convert --no-verify`` promises a header check only, and at tens of
thousands of images per second Pillow's full ``Image.open`` (which parses every
JPEG table) costs more than reading the file. These few lines read what the
conversion records (format, width, height, bands) for the two formats that
make up nearly every dataset; anything unusual returns ``None`` and the caller
falls back to Pillow, so a hostile file costs speed, never correctness.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = ["ImageHeader", "sniff_header", "jpeg_scan_start"]

ImageHeader = tuple[str, int, int, int]
"""``(format, width, height, bands)``, with Pillow's format names and band counts."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_BANDS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> bands of Pillow's mode
# Start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) do not.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn and TEM carry no length
_JPEG_BANDS = {1: 1, 3: 3, 4: 4}
_OUT_OF_DATA = -1  # not a marker: the segments ran past the end of the data


def sniff_header(data: bytes | bytearray | memoryview) -> ImageHeader | None:
    """The format, size and bands of a JPEG or PNG file, or ``None`` if unsure."""
    if data[:len(_PNG_SIGNATURE)] == _PNG_SIGNATURE:
        return _png(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def _png(data: bytes | bytearray | memoryview) -> ImageHeader | None:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width, height, _depth, colour_type = struct.unpack_from(">IIBB", data, 16)
    bands = _PNG_BANDS.get(colour_type)
    if bands is None or width == 0 or height == 0:
        return None
    return ("PNG", width, height, bands)


def _jpeg(data: bytes | bytearray | memoryview) -> ImageHeader | None:
    for marker, position, _ in _jpeg_segments(data):
        if marker in _JPEG_SOF:
            if position + 10 > len(data):
                return None
            height, width, components = struct.unpack_from(">HHB", data, position + 5)
            bands = _JPEG_BANDS.get(components)
            if bands is None or width == 0 or height == 0:
                return None
            return ("JPEG", width, height, bands)
    return None


def jpeg_scan_start(data: bytes | bytearray | memoryview) -> int | None:
    """Where a JPEG's first scan's entropy-coded data starts (after its SOS segment), or None if unsure.

    ``datakit convert --no-verify`` looks for the end-of-image marker after it:
    a file cut short (a partial download, a full disk) has none there. A file
    that ends inside its marker segments, before any scan, gives ``len(data)``.
    """
    if data[:2] != b"\xff\xd8":
        return None
    for marker, position, length in _jpeg_segments(data):
        if marker == 0xDA:
            return position + 2 + length
        if marker == _OUT_OF_DATA:
            return len(data)
    return None


def _jpeg_segments(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int, int]]:
    """``(marker, position, length)`` of each marker segment after SOI, by the lengths they
    declare, up to the first SOS (included); stops early at anything unexpected, and after
    ``(_OUT_OF_DATA, position, 0)`` when the data ends before a SOS."""
    position = 2
    end = len(data)
    while True:
        if position + 4 > end:
            yield _OUT_OF_DATA, position, 0
            return
        if data[position] != 0xFF:
            return
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        if marker == 0xD9:  # end of image before any scan
            return
        (length,) = struct.unpack_from(">H", data, position + 2)
        if length < 2:
            return
        yield marker, position, length
        if marker == 0xDA:
            return
        position += 2 + length
