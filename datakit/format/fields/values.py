"""A checked record's field values as the field types decode them, for the tools that read whole samples.

Datasets turn a record into torch's and torchvision's types
(:mod:`datakit.datasets.fields`); ``datakit inspect`` and ``datakit export``
need the values themselves, as :mod:`datakit.format.fields` decodes them:
:class:`~datakit.format.fields.images.ImageValue` for images,
:class:`~datakit.format.fields.boxes.BoxesValue`,
:class:`~datakit.format.fields.masks.MasksValue` (or a
:class:`~datakit.format.fields.masks.SemanticMask`), keypoints and arrays as
numpy arrays, numbers, text and JSON as Python values. A field that lies on
an image is decoded on that image's canvas, read from the image's header.
Every failure names the record and the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datakit.errors import CorruptRecordError
from datakit.format.fields.base import Canvas, FieldError, FieldSpec
from datakit.format.fields.images import ImageValue
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.records import NO_LABEL, Record, RecordHeader

__all__ = ["field_values", "primary_image", "image_record"]


def primary_image(record: Record) -> ImageValue:
    """The record's primary image: its payload and what its header says of it."""
    header = record.header
    return ImageValue(record.payload, header.kind, header.width, header.height, header.channels)


def image_record(value: ImageValue, version: int) -> Record:
    """A record of the image ``value`` alone, which :mod:`datakit.format.decoding` decodes as any record's
    image (a second image of a sample is stored like a payload, with its own header)."""
    header = RecordHeader(value.kind, NO_LABEL, value.width, value.height, value.channels, len(value.payload),
                          version)
    return Record(header, memoryview(value.payload))


def field_values(record: Record, schema: Schema, key: str,
                 names: Sequence[str] | None = None) -> dict[str, Any]:
    """The values of ``record``'s stored fields (``names`` of them, or all), by field name.

    The primary image is its :func:`primary_image`; a ``label`` field has no
    value here (the record's header and the store's label table hold it); a
    missing optional value is ``None``.

    Raises:
        CorruptRecordError: a value is not one of its type (naming the field),
            or a required one is missing.
        KeyError: a name is no field of the schema.
    """
    positions = {spec.name: position for position, spec in enumerate(schema.stored)}
    wanted = [schema.field(name) for name in (schema.names if names is None else names)]
    values: dict[str, Any] = {}
    for spec in wanted:
        if spec.name not in positions:
            continue  # the label
        try:
            values[spec.name] = _value(record, schema, spec, positions)
        except FieldError as exc:
            raise CorruptRecordError(key, f"field {spec.name!r}: {exc}") from None
    return values


def _value(record: Record, schema: Schema, spec: FieldSpec, positions: dict[str, int]) -> Any:
    if spec is schema.primary_image:
        return primary_image(record)
    data = _stored(record, positions[spec.name])
    if data is None:
        if not spec.optional:
            raise FieldError("missing, but the field is not optional")
        return None
    return FIELD_TYPES[spec.type].decode(data, spec, _canvas(record, schema, spec, positions))


def _stored(record: Record, position: int) -> memoryview | None:
    """The bytes of the stored value at ``position``: a version-3 record's, or the payload of an older one."""
    if not record.stored:
        if position:
            raise FieldError("the record holds its image alone (format version "
                             f"{record.header.version}), not the store's fields")
        return record.payload
    return record.stored[position]


def _canvas(record: Record, schema: Schema, spec: FieldSpec, positions: dict[str, int]) -> Canvas | None:
    """``(height, width)`` of the image ``spec`` lies on, from that image's header (None: no canvas)."""
    if not FIELD_TYPES[spec.type].on_canvas:
        return None
    image = schema.canvas_field(spec)
    if image is schema.primary_image:
        return (record.header.height, record.header.width)
    data = _stored(record, positions[image.name])
    if data is None:
        raise FieldError(f"it lies on the image {image.name!r}, which this sample does not have")
    found = FIELD_TYPES["image"].decode(data, image, None)
    return (found.height, found.width)
