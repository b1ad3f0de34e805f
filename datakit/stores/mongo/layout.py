"""How a datakit store is laid out in a MongoDB database (pure data, no I/O).

A store named by ``(database, collection)`` is::

    <collection>            one document per sample:
        {_id: index, key: record_key(index), label, source, data: BinData(record)}
        or, for a record too large for a document (see INLINE_LIMIT):
        {_id, key, label, source, size, gridfs: <id of a file in __datakit_fs__>}
    __datakit_meta__        the sidecar collection, shared by the database's stores,
                            each document tagged with {collection: <collection>}:
        progress:<collection>      settings, running stats, committed count N;
                                   present while the conversion is incomplete
        labels:<part>:<collection> int32 little-endian labels, LABELS_PER_PART each
        manifest:<collection>      Manifest.to_json() text, and its store_id beside it (what
                                   readers check after each query); written last
        writer:<collection>        the running conversion's lease: owner token, pid, host,
                                   acquired and expires (the server's clock, in ms)
    __datakit_fs__.files/.chunks   GridFS bucket for oversized records, each file
                                   tagged {collection, index} in its metadata

The record bytes in ``data`` are the whole record of :mod:`datakit.format.records`
(header, payload, checksum); this backend never looks inside them. See
``docs/mongodb.md`` for the reasoning (exactly-once resume, fork safety).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from datakit.errors import StoreError
from datakit.format.records import record_key
from datakit.stores.conversion_state import PendingRecord
from datakit.stores.labeltable import label_table_bytes

__all__ = [
    "META_COLLECTION",
    "GRIDFS_BUCKET",
    "INLINE_LIMIT",
    "LABELS_PER_PART",
    "progress_id",
    "manifest_id",
    "labels_id",
    "lease_id",
    "sample_document",
    "decode_source",
    "label_parts",
    "join_label_parts",
    "labels_query",
    "manifest_text",
]

META_COLLECTION = "__datakit_meta__"
GRIDFS_BUCKET = "__datakit_fs__"
RESERVED_COLLECTIONS = (META_COLLECTION, GRIDFS_BUCKET)

INLINE_LIMIT = 16 * 1024 * 1024 - 256 * 1024
"""Records above this size go to GridFS: a document may not exceed 16 MiB, and
the rest of the document (key, label, source path) needs room too."""

LABELS_PER_PART = 1 << 20
"""Labels per label document (4 MiB of int32), far below the document limit."""

_INT32 = struct.Struct("<i")


def progress_id(collection: str) -> str:
    return f"progress:{collection}"


def manifest_id(collection: str) -> str:
    return f"manifest:{collection}"


def lease_id(collection: str) -> str:
    return f"writer:{collection}"


def labels_id(collection: str, part: int) -> str:
    return f"labels:{part}:{collection}"


def _encode_source(source: str) -> str | bytes:
    """The source path as BSON can hold it: text, or bytes for undecodable names."""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate-escaped file name
        return source.encode("utf-8", "surrogateescape")
    return source


def decode_source(value: Any) -> str:
    """A stored source path back as the ``str`` the pipeline gave."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return value if isinstance(value, str) else "?"


def sample_document(record: PendingRecord, gridfs_id: Any = None) -> dict[str, Any]:
    """The document of one record; ``gridfs_id`` when its bytes live in GridFS."""
    from bson import Binary

    document: dict[str, Any] = {
        "_id": int(record.index),
        "key": record_key(record.index),
        "label": int(record.label),
        "source": _encode_source(record.source),
    }
    if record.document:
        document["fields"] = record.document
    if gridfs_id is None:
        document["data"] = Binary(record.data)
    else:
        document["gridfs"] = gridfs_id
        document["size"] = len(record.data)
    return document


def label_parts(collection: str, labels: np.ndarray) -> Iterator[dict[str, Any]]:
    """The label documents for ``labels`` (at least one, even when empty): the bytes of
    :func:`~datakit.stores.labeltable.label_table_bytes`, 4 MiB per part."""
    from bson import Binary

    raw = label_table_bytes(labels)
    size = LABELS_PER_PART * _INT32.size
    count = max(1, -(-len(raw) // size))
    for part in range(count):
        yield {"_id": labels_id(collection, part), "collection": collection, "kind": "labels",
               "part": part, "labels": Binary(raw[part * size:(part + 1) * size])}


def join_label_parts(documents: list[dict[str, Any]]) -> bytes | None:
    """The label table's bytes from its documents; ``None`` when parts are missing or malformed
    (:func:`~datakit.stores.labeltable.parse_label_table` checks the size)."""
    numbers = [document.get("part") for document in documents]
    if not all(isinstance(number, int) and not isinstance(number, bool) for number in numbers):
        return None
    parts = sorted(documents, key=lambda document: document["part"])
    if [document["part"] for document in parts] != list(range(len(parts))):
        return None
    chunks = [document.get("labels") for document in parts]
    if not all(isinstance(chunk, (bytes, bytearray)) for chunk in chunks):
        return None
    return b"".join(bytes(chunk) for chunk in chunks)  # type: ignore[arg-type]


def labels_query(collection: str) -> dict[str, Any]:
    """The query that finds a store's label documents in the sidecar collection."""
    return {"collection": collection, "kind": "labels"}


def manifest_text(document: dict[str, Any], where: str) -> bytes:
    """The manifest JSON a store's manifest document holds.

    Raises:
        StoreError: the document holds no manifest text.
    """
    raw = document.get("manifest")
    if not isinstance(raw, str):
        raise StoreError(f"{where}: the manifest document holds no manifest text")
    return raw.encode("utf-8")
