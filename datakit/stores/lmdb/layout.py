"""How a datakit store is laid out in an LMDB environment, and the walks a transaction makes over it.

The environment's main database (keys are bytes)::

    0000000000 .. 0000000041   records (datakit.format.records), key = record_key(index)
    __src__/0000000000 ...     int32 label + UTF-8 source path of each record
    __progress__               JSON: conversion settings and running totals
                               (present while the conversion is incomplete)
    __labels__                 the label table (datakit.stores.labeltable)
    __len__                    number of records, ASCII decimal
    __keys__                   JSON key scheme
    __manifest__               JSON manifest; written in the final commit

Digits sort before ``_``, so the records form one contiguous key range, and
the source entries another. While a conversion writes the store, the
directory also holds its writer lock (``datakit-writer.lock``, see
:mod:`datakit.stores.lmdb.lock`).
"""

from __future__ import annotations

import json
import struct

import lmdb

from datakit.errors import StoreError, option
from datakit.format.records import KEY_DIGITS, record_key
from datakit.format.stats import Stats
from datakit.stores.conversion_state import ConversionSettings

__all__ = [
    "MANIFEST",
    "PROGRESS",
    "LABELS",
    "LEN",
    "KEYS",
    "DATA_FILES",
    "FOREIGN",
    "source_key",
    "encode_source",
    "decode_source",
    "progress_json",
    "load_progress",
    "is_foreign",
    "source_entries",
    "keys_from",
]

MANIFEST = b"__manifest__"
PROGRESS = b"__progress__"
LABELS = b"__labels__"
LEN = b"__len__"
KEYS = b"__keys__"
DATA_FILES = ("data.mdb", "lock.mdb")
FOREIGN = ("an LMDB environment with neither a datakit manifest nor a conversion in progress; it was not "
           "written by `datakit convert`")
"""Why an environment that holds someone else's entries is not a datakit store."""

_SOURCE_PREFIX = b"__src__/"
_LABEL = struct.Struct("<i")


def source_key(index: int) -> bytes:
    """The key of record ``index``'s source entry."""
    return _SOURCE_PREFIX + record_key(index).encode("ascii")


def encode_source(label: int, source: str) -> bytes:
    """A source entry: the record's label, then its source path."""
    return _LABEL.pack(label) + source.encode("utf-8", "surrogateescape")


def decode_source(value: bytes, key: bytes, path: str) -> tuple[int, str]:
    """The label and source path of a source entry.

    Raises:
        StoreError: the entry is too short to hold a label.
    """
    if len(value) < _LABEL.size:
        raise StoreError.advising("{path}: source entry {key!r} is truncated ({size} bytes); reconvert with "
                                  "{overwrite}", path=path, key=key.decode("ascii", "replace"),
                                  size=len(value), overwrite=option("overwrite"))
    (label,) = _LABEL.unpack_from(value)
    return label, value[_LABEL.size:].decode("utf-8", "surrogateescape")


def progress_json(settings: ConversionSettings, stats: Stats) -> bytes:
    """The progress entry of a conversion under ``settings`` that committed ``stats``."""
    return json.dumps({"settings": settings.to_dict(), "stats": stats.to_dict()}).encode("utf-8")


def load_progress(raw: bytes | None) -> object:
    """The progress entry parsed: ``None`` when there is none, and the bytes as they are
    when they are not JSON (:func:`~datakit.stores.conversion_state.parse_progress` refuses them)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        return bytes(raw)


def is_foreign(txn: lmdb.Transaction) -> bool:
    """Whether an environment holds entries but neither a manifest nor conversion progress:
    someone else's data. (An empty one is a conversion killed before its first commit.)"""
    return txn.get(MANIFEST) is None and txn.get(PROGRESS) is None and bool(txn.cursor().first())


def source_entries(txn: lmdb.Transaction, start: int, stop: int, path: str) -> list[tuple[int, str]]:
    """The label and source path of records ``start .. stop - 1``, in one transaction.

    The list ends early at the first record whose entry is missing: its
    length says how far the entries go on without a gap. Each entry is looked
    up by its key rather than walked to with a cursor: LMDB checks the pages a
    lookup descends through, while a cursor that steps onto a damaged page can
    abort the process on one of LMDB's assertions.
    """
    entries: list[tuple[int, str]] = []
    for index in range(start, stop):
        key = source_key(index)
        value = txn.get(key)
        if value is None:
            break
        entries.append(decode_source(bytes(value), key, path))
    return entries


def keys_from(txn: lmdb.Transaction, start: int) -> list[bytes]:
    """The keys of records ``start`` and up, and of their source entries: what an append
    committed after a manifest of ``start`` records (to discard it)."""
    keys: list[bytes] = []
    cursor = txn.cursor()
    if cursor.set_range(record_key(start).encode("ascii")):
        for key in cursor.iternext(keys=True, values=False):
            if len(key) != KEY_DIGITS or not bytes(key).isdigit():
                break
            keys.append(bytes(key))
    if cursor.set_range(source_key(start)):
        for key in cursor.iternext(keys=True, values=False):
            if not bytes(key).startswith(_SOURCE_PREFIX):
                break
            keys.append(bytes(key))
    return keys
