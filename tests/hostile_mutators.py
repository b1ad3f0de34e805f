"""Structural mutators for the hostile-store fuzz suite (tests/test_hostile_fuzz.py).

Real JPEG, PNG and WebP files made by Pillow, changed where their decoders
look: frame-header sizes, component counts, sampling factors, quantisation and
Huffman tables, scan headers, segment lengths and marker codes, segments
dropped, repeated, moved or inserted (before the scan and after it), restart
intervals, truncation anywhere, bytes flipped in the compressed data, trailing
data; PNG header fields, chunk lengths, types and order, and zlib data with
its chunk CRC recomputed (or left stale); WebP RIFF and chunk sizes and frame
sizes. Each mutator draws its parameters from hypothesis (``draw`` is
``data.draw``), so a failure shrinks to the smallest change that shows it.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st
from PIL import Image

from datakit.format.headers import sniff_header
from datakit.format.records import PayloadKind, encode_record
from datakit.tools.synthetic import photo_pixels

Draw = Callable[..., Any]
Mutator = Callable[[bytes, Draw], bytes]

SIZE = (52, 36)
"""Every base image's (width, height): one size, so a store of them has batch slots."""

SIDES = st.sampled_from([0, 1, 2, 7, 8, 9, 15, 16, 17, 33, 35, 36, 37, 51, 52, 53, 72, 104, 255, 256, 1000,
                         16383, 16384, 65535]) | st.integers(0, 65535)
"""JPEG and WebP sides: the corner cases and the rest. Any pair over the read-time pixel limit is
refused before decoding; a pair under it (65535 x 1000 is) is decoded, garbage and all."""


def base_payloads() -> dict[str, bytes]:
    """Name -> file bytes of the images every mutation starts from, in store order."""
    pixels = photo_pixels(*SIZE, seed=5)
    image = Image.fromarray(pixels)
    grey16 = Image.fromarray(pixels[..., 0].astype(np.uint16) * 257)
    made = [("jpeg-420", image, "JPEG", {"quality": 85}),
            ("jpeg-444-optimized", image, "JPEG", {"quality": 90, "subsampling": 0, "optimize": True}),
            ("jpeg-progressive", image, "JPEG", {"progressive": True}),
            ("jpeg-grey", image.convert("L"), "JPEG", {}),
            ("jpeg-restarts", image, "JPEG", {"restart_marker_rows": 1}),
            ("jpeg-cmyk", image.convert("CMYK"), "JPEG", {}),
            ("png-rgb", image, "PNG", {}), ("png-palette", image.convert("P"), "PNG", {}),
            ("png-rgba", image.convert("RGBA"), "PNG", {}), ("png-grey16", grey16, "PNG", {}),
            ("webp-lossy", image, "WEBP", {"quality": 80}),
            ("webp-lossless", image, "WEBP", {"lossless": True})]
    payloads = {}
    for name, picture, image_format, options in made:
        buffer = io.BytesIO()
        picture.save(buffer, image_format, **options)
        payloads[name] = buffer.getvalue()
    return payloads


def file_name(position: int, name: str) -> str:
    """The file a base payload is converted from; the names sort in store order."""
    extension = {"jpeg": "jpg", "png": "png", "webp": "webp"}[name.split("-")[0]]
    return f"{position:02d}-{name}.{extension}"


def byte(draw: Draw) -> int:
    return int(draw(st.integers(0, 255)))


def replace(data: bytes, position: int, new: bytes, removed: int | None = None) -> bytes:
    return data[:position] + new + data[position + (len(new) if removed is None else removed):]


# ------------------------------------------------------------------ JPEG


class Segment(NamedTuple):
    """A marker segment: its marker code, where its 0xFF is, and where it ends."""

    marker: int
    start: int
    end: int


def jpeg_layout(data: bytes) -> tuple[list[Segment], int]:
    """The marker segments before the first scan (SOS included) and where its entropy data starts."""
    segments, position = [], 2
    while position + 4 <= len(data) and data[position] == 0xFF:
        marker = data[position + 1]
        (length,) = struct.unpack_from(">H", data, position + 2)
        if position + 2 + length > len(data):
            break
        segments.append(Segment(marker, position, position + 2 + length))
        position += 2 + length
        if marker == 0xDA:
            break
    return segments, position


def pick_segment(data: bytes, draw: Draw, markers: set[int] | None = None) -> Segment | None:
    segments = [s for s in jpeg_layout(data)[0] if markers is None or s.marker in markers]
    return draw(st.sampled_from(segments)) if segments else None


def jpeg_frame_size(data: bytes, draw: Draw) -> bytes:
    sof = pick_segment(data, draw, {0xC0, 0xC1, 0xC2})
    if sof is None:
        return data
    return replace(data, sof.start + 5, struct.pack(">HH", draw(SIDES), draw(SIDES)))


def jpeg_frame_field(data: bytes, draw: Draw) -> bytes:
    """Precision, component count, or a component's id, sampling factors or quantisation table."""
    sof = pick_segment(data, draw, {0xC0, 0xC1, 0xC2})
    if sof is None:
        return data
    offset = draw(st.sampled_from([4, 9] + list(range(10, sof.end - sof.start))))
    return replace(data, sof.start + offset, bytes([byte(draw)]))


def jpeg_table_byte(data: bytes, draw: Draw) -> bytes:
    """A byte of a quantisation or Huffman table: its class and id, a count, a code, a value."""
    table = pick_segment(data, draw, {0xDB, 0xC4})
    if table is None or table.end - table.start <= 4:
        return data
    return replace(data, draw(st.integers(table.start + 4, table.end - 1)), bytes([byte(draw)]))


def jpeg_scan_header(data: bytes, draw: Draw) -> bytes:
    sos = pick_segment(data, draw, {0xDA})
    if sos is None or sos.end - sos.start <= 4:
        return data
    return replace(data, draw(st.integers(sos.start + 4, sos.end - 1)), bytes([byte(draw)]))


def jpeg_segment_length(data: bytes, draw: Draw) -> bytes:
    segment = pick_segment(data, draw)
    if segment is None:
        return data
    true = segment.end - segment.start - 2
    length = draw(st.sampled_from([0, 1, 2, true - 1, true + 1, 65535]) | st.integers(0, 65535))
    return replace(data, segment.start + 2, struct.pack(">H", length))


def jpeg_marker_code(data: bytes, draw: Draw) -> bytes:
    segment = pick_segment(data, draw)
    if segment is None:
        return data
    return replace(data, segment.start + 1, bytes([byte(draw)]))


def jpeg_segment_order(data: bytes, draw: Draw) -> bytes:
    """A segment dropped, repeated, or swapped with another."""
    segments = jpeg_layout(data)[0]
    if not segments:
        return data
    first, second = draw(st.sampled_from(segments)), draw(st.sampled_from(segments))
    piece = data[first.start:first.end]
    action = draw(st.sampled_from(["drop", "repeat", "swap"]))
    if action == "drop":
        return data[:first.start] + data[first.end:]
    if action == "repeat":
        return data[:first.end] + piece + data[first.end:]
    low, high = sorted((first, second))
    if low == high:
        return data
    return (data[:low.start] + data[high.start:high.end] + data[low.end:high.start]
            + data[low.start:low.end] + data[high.end:])


INSERTED_MARKERS = [0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC8, 0xCC, 0xD0, 0xD7, 0xD8, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD,
                    0xE0, 0xE1, 0xEE, 0xFE, 0x01, 0x02, 0xBF, 0xF0]


def jpeg_inserted_segment(data: bytes, draw: Draw) -> bytes:
    """A segment of any kind put between two others, or after the scan (before the end marker)."""
    segments, _ = jpeg_layout(data)
    places = [s.end for s in segments[:-1]] + [max(len(data) - 2, 2)]
    place = draw(st.sampled_from(places))
    code = draw(st.sampled_from(INSERTED_MARKERS) | st.integers(0, 255))
    payload = draw(st.binary(max_size=24))
    length = draw(st.sampled_from([len(payload) + 2]) | st.integers(0, 65535))
    return replace(data, place, bytes([0xFF, code]) + struct.pack(">H", length) + payload, removed=0)


def jpeg_restart_interval(data: bytes, draw: Draw) -> bytes:
    sos = pick_segment(data, draw, {0xDA})
    if sos is None:
        return data
    interval = draw(st.sampled_from([0, 1, 2, 3, 100, 65535]) | st.integers(0, 65535))
    return replace(data, sos.start, b"\xff\xdd\x00\x04" + struct.pack(">H", interval), removed=0)


def jpeg_scan_bytes(data: bytes, draw: Draw) -> bytes:
    """Bytes of the entropy-coded data flipped, or a marker put in it."""
    start = jpeg_layout(data)[1]
    if start >= len(data) - 2:
        return data
    position = draw(st.integers(start, len(data) - 3))
    if draw(st.booleans()):
        changed = bytearray(data)
        for offset in range(draw(st.integers(1, 4))):
            if position + offset < len(data) - 2:
                changed[position + offset] ^= draw(st.integers(1, 255))
        return bytes(changed)
    code = draw(st.sampled_from([0x00, 0xD0, 0xD3, 0xD7, 0xD9, 0xDA, 0xC4, 0xFF]) | st.integers(0, 255))
    return replace(data, position, bytes([0xFF, code]), removed=0)


def truncated(data: bytes, draw: Draw) -> bytes:
    """Cut anywhere; perhaps with an end-of-image marker (or other bytes) put back after the cut."""
    cut = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    return cut + draw(st.sampled_from([b"", b"", b"\xff\xd9", b"\x00\x00\xff\xd9", b"\xff"]))


def trailing(data: bytes, draw: Draw) -> bytes:
    """Bytes after the end of the file: harmless, unless the end is gone."""
    tail = draw(st.binary(min_size=1, max_size=64) | st.sampled_from([b"\xff\xd9", b"\xff\xd8\xff\xd9"]))
    return (data[:-2] if draw(st.booleans()) else data) + tail


JPEG_MUTATORS: dict[str, Mutator] = {
    "frame size": jpeg_frame_size, "frame field": jpeg_frame_field, "table byte": jpeg_table_byte,
    "scan header": jpeg_scan_header, "segment length": jpeg_segment_length, "marker code": jpeg_marker_code,
    "segment order": jpeg_segment_order, "inserted segment": jpeg_inserted_segment,
    "restart interval": jpeg_restart_interval, "scan bytes": jpeg_scan_bytes, "truncated": truncated,
    "trailing": trailing,
}


# ------------------------------------------------------------------ PNG


class Chunk(NamedTuple):
    start: int
    kind: bytes
    end: int


def png_chunks(data: bytes) -> list[Chunk]:
    chunks, position = [], 8
    while position + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, position)
        if position + 12 + length > len(data):
            break
        chunks.append(Chunk(position, data[position + 4:position + 8], position + 12 + length))
        position += 12 + length
    return chunks


def with_crc(chunk: bytes) -> bytes:
    """A chunk (length, type, data, old CRC) with its CRC recomputed."""
    return chunk[:-4] + struct.pack(">I", zlib.crc32(chunk[4:-4]))


def png_header_field(data: bytes, draw: Draw) -> bytes:
    """IHDR's width, height, bit depth, colour type, compression, filter or interlace byte."""
    field = draw(st.sampled_from(["width", "height", "depth", "colour", "compression", "filter",
                                  "interlace"]))
    if field in ("width", "height"):
        value = struct.pack(">I", draw(SIDES | st.sampled_from([2**31 - 1, 2**31, 2**32 - 1])))
        offset = 16 if field == "width" else 20
    else:
        value = bytes([draw(st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16]) | st.integers(0, 255))])
        offset = {"depth": 24, "colour": 25, "compression": 26, "filter": 27, "interlace": 28}[field]
    changed = replace(data, offset, value)
    return changed if draw(st.booleans()) else replace(changed, 8, with_crc(changed[8:33]))


def png_chunk_bytes(data: bytes, draw: Draw) -> bytes:
    """Bytes of a chunk's data (zlib data, palette, ...) changed, the CRC recomputed or stale."""
    chunks = [c for c in png_chunks(data) if c.end - c.start > 12]
    if not chunks:
        return data
    chunk = draw(st.sampled_from(chunks))
    changed = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        changed[draw(st.integers(chunk.start + 8, chunk.end - 5))] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        changed[chunk.start:chunk.end] = with_crc(bytes(changed[chunk.start:chunk.end]))
    return bytes(changed)


def png_chunk_layout(data: bytes, draw: Draw) -> bytes:
    """A chunk's length or type changed, or a chunk dropped or repeated."""
    chunks = png_chunks(data)
    if not chunks:
        return data
    chunk = draw(st.sampled_from(chunks))
    action = draw(st.sampled_from(["length", "type", "drop", "repeat"]))
    if action == "length":
        return replace(data, chunk.start, struct.pack(">I", draw(st.integers(0, 2**32 - 1))))
    if action == "type":
        return replace(data, chunk.start + 4 + draw(st.integers(0, 3)), bytes([byte(draw)]))
    if action == "drop":
        return data[:chunk.start] + data[chunk.end:]
    return data[:chunk.end] + data[chunk.start:chunk.end] + data[chunk.end:]


PNG_MUTATORS: dict[str, Mutator] = {
    "header field": png_header_field, "chunk bytes": png_chunk_bytes, "chunk layout": png_chunk_layout,
    "truncated": truncated, "trailing": trailing,
}


# ------------------------------------------------------------------ WebP


def webp_sizes(data: bytes, draw: Draw) -> bytes:
    """The RIFF size, the chunk's size, or its fourcc."""
    field = draw(st.sampled_from([4, 16, 12]))
    if field == 12:
        return replace(data, 12, draw(st.sampled_from([b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"JUNK"])))
    return replace(data, field, struct.pack("<I", draw(st.integers(0, 2**32 - 1))))


def webp_frame(data: bytes, draw: Draw) -> bytes:
    """The frame's size fields: VP8's 14-bit sides and scales, VP8L's packed sides and version."""
    if data[12:16] == b"VP8 ":  # frame tag (3), start code (3), then width and height, 16 bits each
        return replace(data, 26, struct.pack("<HH", draw(SIDES), draw(SIDES)))
    return replace(data, 21, bytes(draw(st.binary(min_size=4, max_size=4))))


def webp_bytes(data: bytes, draw: Draw) -> bytes:
    if len(data) <= 20:
        return data
    changed = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        changed[draw(st.integers(20, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(changed)


WEBP_MUTATORS: dict[str, Mutator] = {
    "sizes": webp_sizes, "frame": webp_frame, "bytes": webp_bytes, "truncated": truncated,
    "trailing": trailing,
}

MUTATORS = {"jpeg": JPEG_MUTATORS, "png": PNG_MUTATORS, "webp": WEBP_MUTATORS}


# ------------------------------------------------------------------ records


def payload_record(payload: bytes, label: int, draw: Draw, channels: int = 3) -> bytes:
    """A record of a mutated payload, its checksum recomputed; the header's size is the original
    one, what the payload's own header says (so that decoders see it), or any."""
    sniffed = sniff_header(payload)
    choice = draw(st.sampled_from(["sniffed", "sniffed", "original", "any"]))
    width, height = SIZE
    if choice == "sniffed" and sniffed is not None:
        width, height = sniffed[1], sniffed[2]
    elif choice == "any":
        width, height = draw(SIDES), draw(SIDES)
    return encode_record(payload, kind=PayloadKind.ENCODED, label=label, width=width, height=height,
                         channels=channels)


def raw_header_record(label: int, draw: Draw) -> bytes:
    """A raw record with any channel count and sizes that add up (or not), its checksum holding."""
    channels = draw(st.sampled_from([0, 1, 2, 3, 4]) | st.integers(0, 255))
    width, height = draw(st.sampled_from([SIZE, (1, 1), (0, 36), (52, 0)]))
    length = width * height * channels if draw(st.booleans()) else draw(st.integers(0, 64))
    return crafted_header(1, channels, label, width, height, bytes([byte(draw)]) * length)


def crafted_header(kind: int, channels: int, label: int, width: int, height: int, payload: bytes,
                   version: int = 1) -> bytes:
    """Any header, laid out by hand (encode_record refuses what is not a valid record), checksum holding."""
    prefix = struct.pack("<4sHBBiIIQ", b"DKR\0", version, kind, channels, label, width, height, len(payload))
    return prefix + struct.pack("<I", zlib.crc32(payload, zlib.crc32(prefix))) + payload
