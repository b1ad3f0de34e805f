"""A store's label table as both backends keep it: one stored value, checked when read back.

A single-label store keeps one int32 little-endian class index per record; a
multi-label store one row of ``len(classes)`` uint8 0/1 flags per record. An
append only ever makes the table longer, so a reader of an older manifest reads
the first rows (see :meth:`~datakit.stores.contract.StoreReader.labels`).
"""

from __future__ import annotations

import numpy as np

from datakit.errors import StoreError
from datakit.format.manifest import NO_LABEL, Manifest

__all__ = ["label_table_bytes", "label_table_size", "parse_label_table"]


def label_table_bytes(labels: np.ndarray) -> bytes:
    """A store's label table as stored: int32 little-endian class indices for a 1-D
    ``labels``, or the rows of a 2-D multi-hot ``labels`` as uint8 bytes."""
    array = np.asarray(labels)
    return array.astype(np.uint8 if array.ndim == 2 else "<i4").tobytes()


def label_table_size(manifest: Manifest) -> int:
    """The bytes of the label table of a store with ``manifest``."""
    return manifest.length * (len(manifest.classes) if manifest.multi_label else 4)


def parse_label_table(raw: bytes | None, manifest: Manifest, where: str) -> np.ndarray:
    """The label table read back: a 1-D int64 array of class indices (each ``-1`` in an
    unlabelled store), or for a multi-label store a ``(length, len(classes))`` uint8 array of 0 and 1.

    Raises:
        StoreError: the table is missing, has the wrong size, or holds values
            outside the classes.
    """
    classes = len(manifest.classes)
    if manifest.multi_label:
        if raw is None or len(raw) != manifest.length * classes:
            raise StoreError(f"{where}: the label table does not match the manifest")
        table = np.frombuffer(raw, dtype=np.uint8).reshape(manifest.length, classes)
        if table.size and table.max() > 1:
            raise StoreError(f"{where}: the multi-label table holds values other than 0 and 1")
        copied: np.ndarray = table.copy()
        return copied  # writable, as torch wants when it wraps a row
    if raw is None or len(raw) % 4 or len(raw) // 4 != manifest.length:
        raise StoreError(f"{where}: the label table does not match the manifest")
    labels = np.frombuffer(raw, dtype="<i4")
    if manifest.unlabelled and len(labels) and (labels != NO_LABEL).any():
        raise StoreError(f"{where}: the label table of an unlabelled store holds labels other than "
                         f"{NO_LABEL}")
    if not manifest.unlabelled and len(labels) and (labels.min() < 0 or labels.max() >= classes):
        raise StoreError(f"{where}: the label table holds labels outside the classes")
    return labels.astype(np.int64)
