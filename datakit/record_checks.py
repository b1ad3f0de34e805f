"""What a record's header must agree with in its store: the label table and the manifest's sizes.

A record's checksum proves only that its bytes are the ones written, and a
hostile store writes its own checksums. So before a record is decoded, its
header is checked against what the store promises elsewhere: its label (or,
in a multi-label store, its first class; in an unlabelled store, -1 and
nothing else) against the label table that
samplers and class statistics use, and its image size against the manifest's
size ranges, from which ``datakit.DataLoader`` sizes its batch slots. Every
read path and ``inspect --verify`` make the same checks here, so a record
that fails one is refused by all of them (a :class:`CorruptRecordError`
naming its key), including ``output="bytes"``.
"""

from __future__ import annotations

import numpy as np

from datakit.errors import CorruptRecordError
from datakit.manifest import NO_LABEL, Manifest
from datakit.records import MULTI_LABEL_VERSION, Record

__all__ = ["check_record"]


def check_record(record: Record, key: str, position: int, manifest: Manifest, targets: np.ndarray) -> None:
    """Refuse a record whose header disagrees with the store's label table or size ranges.

    Args:
        record: the decoded record (its checksum already checked).
        key: its key, named in the error.
        position: its index in the store.
        manifest: the store's manifest.
        targets: the store's label table, as datasets hold it (one label per
            record, or a multi-hot row per record in a multi-label store).

    Raises:
        CorruptRecordError: the header disagrees.
    """
    header = record.header
    if manifest.multi_label:  # the header holds the first class of the multi-hot row
        row = targets[position]
        if (header.version < MULTI_LABEL_VERSION or not 0 <= header.label < len(row)
                or not row[header.label] or row[:header.label].any()):
            raise CorruptRecordError(key, f"its label {header.label} (format version {header.version}) "
                                          f"disagrees with the store's multi-label table ({row.tolist()})")
    elif manifest.unlabelled and header.label != NO_LABEL:
        raise CorruptRecordError(key, f"its label {header.label} is a class in an unlabelled store (every "
                                      f"label is {NO_LABEL})")
    elif header.label != targets[position]:
        raise CorruptRecordError(key, f"its label {header.label} disagrees with the store's label table "
                                      f"({targets[position]})")
    widths, heights = manifest.stats.width_range, manifest.stats.height_range
    if not (widths and widths[0] <= header.width <= widths[1] and heights[0] <= header.height <= heights[1]):
        raise CorruptRecordError(key, f"its header says {header.width}x{header.height}, outside the "
                                      f"manifest's sizes (widths {widths}, heights {heights})")
