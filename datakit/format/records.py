"""The record codec: how one sample is laid out as bytes in a store.

A record is a fixed 32-byte header followed by the payload. The header carries
everything needed to use the payload without trusting it: a magic tag, the
format version, the payload kind, the label, the image geometry, the payload
length and a CRC-32 that covers the header fields and the payload. Nothing is
pickled, so reading a hostile store can fail but never execute code. The
layout is documented in ``docs/format.md``; change both together.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from datakit.errors import CorruptRecordError, IncompatibleStoreError

__all__ = [
    "KEY_DIGITS",
    "NO_LABEL",
    "record_key",
    "FORMAT_VERSION",
    "SINGLE_LABEL_VERSION",
    "MULTI_LABEL_VERSION",
    "FIELDS_VERSION",
    "NULL_LENGTH",
    "HEADER_SIZE",
    "RAW_CHANNELS",
    "PayloadKind",
    "RecordHeader",
    "Record",
    "encode_record",
    "seal_record",
    "seal_fields_record",
    "decode_record",
    "decode_raw_batch",
    "RawBatch",
    "check_format_version",
]

FORMAT_VERSION = 3
"""The newest record and manifest format this datakit reads."""
SINGLE_LABEL_VERSION = 1
"""Single-label stores are still written in version 1, so older datakits read them."""
MULTI_LABEL_VERSION = 2
"""Version 2 marks a multi-label store: the header's label is the record's first class,
its multi-hot vector is in the store's label table (``docs/format.md``)."""
FIELDS_VERSION = 3
"""Version 3 marks a store with fields beyond one image and its label (:mod:`datakit.format.fields`):
its payload is a directory of the stored values' lengths, then the values, the primary image first."""
NULL_LENGTH = 0xFFFFFFFF
"""A directory length that says the sample has no value for the field (an optional one)."""
KEY_DIGITS = 10
"""Record keys are the sample index, zero-padded to this many digits."""

NO_LABEL = -1
"""Every record's label in an unlabelled store (``label_kind: "none"``), as torchvision's unlabelled
splits give it (STL10's ``unlabeled``); never a label in any other store."""

_MAGIC = b"DKR\x00"
RAW_CHANNELS = 3
"""Raw payloads are RGB: a header that says otherwise is corrupt, whatever its sizes add up to."""

# magic, version, kind, channels, label, width, height, payload length, crc32
_HEADER = struct.Struct("<4sHBBiIIQI")
_CHECKED_PREFIX = _HEADER.size - 4  # the CRC covers every header byte before itself
HEADER_SIZE = _HEADER.size


class PayloadKind(enum.IntEnum):
    """What the payload bytes are."""

    ENCODED = 0
    """The source file's bytes, untouched (JPEG, PNG, ...)."""
    RAW = 1
    """Decoded RGB pixels: ``height * width * 3`` uint8 values, row-major HWC."""

    @property
    def label(self) -> str:
        return self.name.lower()


_KINDS = {kind.value: kind for kind in PayloadKind}


class RecordHeader(NamedTuple):
    """The parsed header of one record (a named tuple: readers build one per sample)."""

    kind: PayloadKind
    label: int
    width: int
    height: int
    channels: int
    payload_length: int
    version: int = SINGLE_LABEL_VERSION

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(height, width, channels)`` of the image."""
        return (self.height, self.width, self.channels)


class Record(NamedTuple):
    """A decoded record: its header and a view of its payload (the primary image's bytes).

    In a version-3 record ``stored`` holds a view of every stored value, in the
    schema's stored order (:attr:`datakit.format.fields.schema.Schema.stored`;
    the first is ``payload``), ``None`` for a sample without an optional
    value; it is empty in the records of earlier versions.
    """

    header: RecordHeader
    payload: memoryview
    stored: tuple[memoryview | None, ...] = ()


def encode_record(
    payload: bytes,
    *,
    kind: PayloadKind,
    label: int,
    width: int,
    height: int,
    channels: int,
    multi_label: bool = False,
) -> bytes:
    """Lay out one record: header, then payload, with a CRC over both (``multi_label``:
    a record of a multi-label store, format version 2)."""
    prefix = _checked_prefix(len(payload), kind, label, width, height, channels, multi_label)
    crc = zlib.crc32(payload, zlib.crc32(prefix))
    return b"".join((prefix, struct.pack("<I", crc), payload))


def seal_record(
    framed: bytearray,
    *,
    kind: PayloadKind,
    label: int,
    width: int,
    height: int,
    channels: int,
    multi_label: bool = False,
) -> bytearray:
    """Make ``framed`` a record in place: its first :data:`HEADER_SIZE` bytes are
    room for the header, the rest is the payload, which is not copied.

    The bytes are those :func:`encode_record` would give for the payload.
    """
    payload = memoryview(framed)[HEADER_SIZE:]
    prefix = _checked_prefix(len(payload), kind, label, width, height, channels, multi_label)
    framed[:_CHECKED_PREFIX] = prefix
    struct.pack_into("<I", framed, _CHECKED_PREFIX, zlib.crc32(payload, zlib.crc32(prefix)))
    return framed


def seal_fields_record(
    image: bytes | bytearray | memoryview,
    values: Sequence[bytes | None],
    *,
    kind: PayloadKind,
    label: int,
    width: int,
    height: int,
    channels: int,
) -> bytearray:
    """A version-3 record: the primary ``image`` (described by ``kind`` .. ``channels``) and the
    other stored ``values`` in the schema's stored order, ``None`` for a missing optional value.

    Raises:
        ValueError: too many values, or one too large for the directory.
    """
    if len(values) + 1 > 0xFFFF:
        raise ValueError(f"{len(values) + 1} values is more than a record's directory holds")
    if any(len(value) >= NULL_LENGTH for value in (image, *values) if value is not None):
        raise ValueError("a value of 4 GiB or more does not fit a record")
    lengths = [len(image), *(NULL_LENGTH if value is None else len(value) for value in values)]
    directory = _DIRECTORY.pack(len(lengths), 0) + struct.pack(f"<{len(lengths)}I", *lengths)
    framed = bytearray(HEADER_SIZE)
    framed += directory
    framed += image
    for value in values:
        if value is not None:
            framed += value
    payload = memoryview(framed)[HEADER_SIZE:]
    if kind is PayloadKind.RAW and (channels != RAW_CHANNELS or len(image) != width * height * channels):
        raise ValueError(f"raw pixels of {len(image)} bytes are not {height}x{width}x{RAW_CHANNELS}")
    prefix = _HEADER.pack(_MAGIC, FIELDS_VERSION, kind, channels, label, width, height, len(payload),
                          0)[:_CHECKED_PREFIX]
    framed[:_CHECKED_PREFIX] = prefix
    struct.pack_into("<I", framed, _CHECKED_PREFIX, zlib.crc32(payload, zlib.crc32(prefix)))
    payload.release()
    return framed


def _checked_prefix(length: int, kind: PayloadKind, label: int, width: int, height: int,
                    channels: int, multi_label: bool = False) -> bytes:
    """The header up to the CRC, which covers it."""
    if kind is PayloadKind.RAW and channels != RAW_CHANNELS:
        raise ValueError(f"raw payloads hold {RAW_CHANNELS} channels (RGB), not {channels}")
    if kind is PayloadKind.RAW and length != width * height * channels:
        raise ValueError(
            f"raw payload of {length} bytes does not match shape "
            f"{height}x{width}x{channels}"
        )
    version = MULTI_LABEL_VERSION if multi_label else SINGLE_LABEL_VERSION
    header = _HEADER.pack(_MAGIC, version, kind, channels, label, width, height, length, 0)
    return header[:_CHECKED_PREFIX]


def decode_record(data: bytes | memoryview, key: str) -> Record:
    """Parse and verify one record.

    Args:
        data: the stored bytes. A memoryview is not copied, so the payload
            stays valid only as long as the buffer it points into.
        key: the record's key, named in any error.

    Raises:
        CorruptRecordError: the bytes are not a well-formed record, the
            checksum does not match, or raw pixels are not 3 channels of the header's size.
        IncompatibleStoreError: the record was written by a newer format.
    """
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise CorruptRecordError(key, f"{len(view)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, kind, channels, label, width, height, length, crc = _HEADER.unpack_from(view)
    if magic != _MAGIC:
        raise CorruptRecordError(key, "not a datakit record (bad magic bytes)")
    check_format_version(version, f"record {key!r}")
    payload = view[HEADER_SIZE:]
    if length != len(payload):
        raise CorruptRecordError(key, f"header says {length} payload bytes, found {len(payload)}")
    if zlib.crc32(payload, zlib.crc32(view[:_CHECKED_PREFIX])) != crc:
        raise CorruptRecordError(key, "checksum mismatch")
    payload_kind = _KINDS.get(kind)
    if payload_kind is None:
        raise CorruptRecordError(key, f"unknown payload kind {kind}")
    stored: tuple[memoryview | None, ...] = ()
    if version >= FIELDS_VERSION:
        stored = _split_values(payload, key)
        payload = stored[0]  # type: ignore[assignment]  # the primary image, never missing
        length = len(payload)
    if payload_kind is PayloadKind.RAW and channels != RAW_CHANNELS:
        raise CorruptRecordError(key, f"raw records hold {RAW_CHANNELS} channels (RGB); its header says "
                                      f"{channels}")
    if payload_kind is PayloadKind.RAW and width * height * channels != length:
        raise CorruptRecordError(
            key, f"raw payload of {length} bytes does not match {height}x{width}x{channels}"
        )
    header = RecordHeader(payload_kind, label, width, height, channels, length, version)
    return Record(header, payload, stored)


def _split_values(payload: memoryview, key: str) -> tuple[memoryview | None, ...]:
    """The values of a version-3 payload, each a view; every length checked against the bytes first."""
    if len(payload) < _DIRECTORY.size:
        raise CorruptRecordError(key, "its payload ends before its directory")
    count, flags = _DIRECTORY.unpack_from(payload)
    start = _DIRECTORY.size + 4 * count
    if count == 0 or flags or start > len(payload):
        raise CorruptRecordError(key, f"a directory of {count} values (flags {flags}) its bytes cannot hold")
    lengths = struct.unpack_from(f"<{count}I", payload, _DIRECTORY.size)
    if lengths[0] == NULL_LENGTH:
        raise CorruptRecordError(key, "it has no primary image")
    total = sum(length for length in lengths if length != NULL_LENGTH)
    if start + total != len(payload):
        raise CorruptRecordError(key, f"its directory adds up to {start + total} bytes, the payload has "
                                      f"{len(payload)}")
    values: list[memoryview | None] = []
    for length in lengths:
        if length == NULL_LENGTH:
            values.append(None)
            continue
        values.append(payload[start:start + length])
        start += length
    return tuple(values)


def check_format_version(version: int, what: str) -> None:
    """Refuse data written by a format this datakit does not know."""
    if not 1 <= version <= FORMAT_VERSION:
        raise IncompatibleStoreError(
            f"{what} uses format version {version}; this datakit reads versions 1 to "
            f"{FORMAT_VERSION}. Upgrade datakit or reconvert the source folder."
        )


_DIRECTORY = struct.Struct("<HH")  # version 3: the number of values, then flags (0)

_HEADER_FIELDS = np.dtype([("magic", "S4"), ("version", "<u2"), ("kind", "u1"), ("channels", "u1"),
                           ("label", "<i4"), ("width", "<u4"), ("height", "<u4"), ("length", "<u8"),
                           ("crc", "<u4")])
assert _HEADER_FIELDS.itemsize == HEADER_SIZE


def decode_raw_batch(records: Sequence[bytes | memoryview], shape: tuple[int, int, int]) -> RawBatch | None:
    """Check a whole batch of raw-pixel records of one shape at once; None if any is not one.

    Reading a batch of small raw records one by one spends more time in the
    per-record Python (unpacking the header, building the record, the checks)
    than in the bytes. Records of one image shape all have the same length, so
    the batch is one ``(count, record length)`` array: the headers are checked
    as columns, and only the checksums are computed record by record. Every
    check of :func:`decode_record` is made; on any failure the caller reads
    the batch record by record, which names the record at fault.

    Args:
        records: the stored bytes of each record.
        shape: the ``(height, width, channels)`` every record should have.

    Returns:
        The labels and the pixels, ``(count, height, width, channels)``, views of one new buffer.
    """
    height, width, channels = shape
    length = height * width * channels
    if any(len(record) != HEADER_SIZE + length for record in records):
        return None
    rows = np.frombuffer(b"".join(records), dtype=np.uint8).reshape(len(records), HEADER_SIZE + length)
    headers = rows[:, :HEADER_SIZE].copy().view(_HEADER_FIELDS)[:, 0]
    if not (np.all(headers["magic"] == _MAGIC) and np.all((headers["version"] >= 1)
                                                          & (headers["version"] < FIELDS_VERSION))
            and np.all(headers["kind"] == PayloadKind.RAW) and np.all(headers["channels"] == channels)
            and np.all(headers["width"] == width) and np.all(headers["height"] == height)
            and np.all(headers["length"] == length)):
        return None
    for row, expected in zip(rows, headers["crc"].tolist(), strict=True):
        data = row.data
        if zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[:_CHECKED_PREFIX])) != expected:
            return None
    return RawBatch(headers["label"].astype(np.int64), rows[:, HEADER_SIZE:].reshape(len(records), *shape))


class RawBatch(NamedTuple):
    """A checked batch of raw records: ``labels`` (int64) and ``pixels`` (count, H, W, C)."""

    labels: np.ndarray
    pixels: np.ndarray


def record_key(index: int) -> str:
    """The key of the record holding sample ``index``."""
    return f"{index:0{KEY_DIGITS}d}"
