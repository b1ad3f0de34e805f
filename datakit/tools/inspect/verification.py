"""``datakit inspect --verify``: every record read, checked and decoded, each bad one named with its reason.

A record is checked as every read path checks it (present, its checksum,
its header against the label table and the manifest's sizes:
:func:`datakit.format.manifest.check_record`) and its image fully decoded.
In a field store every field of every record is decoded too, by its type
(:func:`datakit.format.fields.values.field_values`), and held to what reads
do not check each time: a boxes field's labels are category ids of the
field (:func:`~datakit.format.fields.boxes.check_categories`), a label map
decodes to its image's size, a further image decodes. A bad record's reason
names the field at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datakit.format.decoding import record_to_array
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.boxes import BoxesValue, check_categories
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import SemanticMask
from datakit.format.fields.schema import Schema
from datakit.format.fields.values import field_values, image_record
from datakit.format.manifest import check_record
from datakit.format.records import Record, decode_record, record_key
from datakit.stores.contract import StoreReader

__all__ = ["verify_records", "check_fields"]


def verify_records(reader: StoreReader,
                   progress: Callable[[int, int], None] | None = None) -> list[dict[str, str]]:
    """Check every record: present, checksum, what its header says (label, size: as reads check
    it, :func:`datakit.format.manifest.check_record`), a full image decode, and in a field store
    every field (:func:`check_fields`).

    ``progress(done, total)`` is called before the first record and after each one.

    Returns:
        One ``{"key", "reason"}`` dict per bad record; empty when all is well.
    """
    manifest = reader.manifest
    schema = manifest.sample_fields
    labels = reader.labels()
    bad: list[dict[str, str]] = []
    expected = 0
    report = progress or _ignore
    report(0, manifest.length)
    for index, data in reader.iter_records():
        while expected < index:  # a gap: records that should be there are not
            bad.append({"key": record_key(expected), "reason": "missing"})
            expected += 1
        expected = index + 1
        key = record_key(index)
        try:
            record = decode_record(data, key)
            check_record(record, key, index, manifest, labels)
            record_to_array(record)
            if not schema.is_classification:
                check_fields(record, schema, key)
        except Exception as exc:  # every failure is a finding, not a crash
            bad.append({"key": key, "reason": getattr(exc, "reason", None) or str(exc)})
        report(min(expected, manifest.length), manifest.length)
    bad.extend({"key": record_key(index), "reason": "missing"} for index in range(expected, manifest.length))
    report(manifest.length, manifest.length)
    return bad


def check_fields(record: Record, schema: Schema, key: str) -> None:
    """Decode every field of ``record`` and check what a read does not.

    Raises:
        CorruptRecordError: a value does not decode (naming the field).
        FieldError: a box's label is no category of its field, a label map or a further image does not
            decode; the message names the field.
    """
    values = field_values(record, schema, key)
    for spec in schema.stored[1:]:
        value = values[spec.name]
        try:
            _check_value(value, spec, record.header.version)
        except Exception as exc:  # what Pillow raises for an image it cannot decode is any exception
            raise FieldError(f"field {spec.name!r}: {exc}") from None


def _check_value(value: Any, spec: FieldSpec, version: int) -> None:
    if isinstance(value, BoxesValue) and value.labels is not None:
        check_categories(np.asarray(value.labels), spec)
    elif isinstance(value, SemanticMask):
        value.dense()
    elif isinstance(value, ImageValue):
        record_to_array(image_record(value, version))


def _ignore(done: int, total: int) -> None:
    """The progress callback when nobody asked for one."""
