"""A store's records as an export reads them: in index order, a window at a time, each checksum verified.

Every format reads the store the same way: each record once, in order, a
window of records per read, its checksum verified as it is decoded (a bad
record stops the export, named by its key). An encoded image is written as
its stored bytes, the file it was converted from; raw pixels as a PNG.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np

from datakit.format.records import Record, decode_record, record_key
from datakit.stores.contract import StoreReader

__all__ = ["records", "image_file", "WINDOW"]

WINDOW = 1024
"""Records per read."""


def records(reader: StoreReader) -> Iterator[tuple[int, Record]]:
    """Every ``(index, record)``, in index order, its checksum verified.

    Raises:
        CorruptRecordError: a record fails its checksum or is not one (named by key).
    """
    length = len(reader)
    for start in range(0, length, WINDOW):
        indices = list(range(start, min(length, start + WINDOW)))
        for index, data in zip(indices, reader.get_many(indices), strict=True):
            yield index, decode_record(data, record_key(index))


def image_file(record: Record, raw: bool) -> bytes:
    """The file bytes of a record's image: its stored bytes, or (a raw store's) its pixels as a PNG."""
    if not raw:
        return bytes(record.payload)
    from PIL import Image

    height, width, channels = record.header.shape
    pixels = np.frombuffer(record.payload, dtype=np.uint8).reshape(height, width, channels)
    buffer = io.BytesIO()
    Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels).save(buffer, format="PNG")
    return buffer.getvalue()
