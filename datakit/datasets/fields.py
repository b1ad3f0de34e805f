"""A field store's record as a sample: the fields asked for, decoded into torch's and torchvision's types.

Only the fields asked for are decoded (a caption-only pass over an image-text
store never decodes a JPEG). Images come as the dataset's ``output`` says,
numbers and text as Python values, JSON as what :func:`json.loads` gives,
arrays as tensors; boxes, masks and keypoints as torchvision's ``tv_tensors``
where torchvision imports (:mod:`datakit.datasets.tv_types`), with a boxes
field's per-box labels and extras under their own keys (``labels``,
``iscrowd``, ``area``, ``ids``), as torchvision's detection samples hold them.
Every failure is a :class:`~datakit.errors.CorruptRecordError` naming the
record and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from datakit.datasets.tv_types import tv_tensors
from datakit.errors import CorruptRecordError
from datakit.format.fields.base import Canvas, FieldError, FieldSpec
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import MasksValue
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.records import Record, RecordHeader

__all__ = ["FieldDecoder", "sample_keys"]

ImageDecoder = Callable[[Record, str], Any]
"""Turns an image (as a record) into the dataset's ``output``; given the record's key for errors."""


class FieldDecoder:
    """Decodes the fields a dataset was asked for from a checked record.

    Args:
        schema: the store's fields.
        wanted: the field names to return, in order (``None``: every field).

    Raises:
        KeyError: a wanted field the store does not have (the message lists its fields).
    """

    def __init__(self, schema: Schema, wanted: Sequence[str] | None) -> None:
        self.schema = schema
        names = list(schema.names if wanted is None else wanted)
        self.specs = [schema.field(name) for name in names]
        self._position = {spec.name: position for position, spec in enumerate(schema.stored)}

    def sample(self, record: Record, key: str, label: Any, image: ImageDecoder) -> dict[str, Any]:
        """The sample of ``record`` as a dict, keys in the order the fields were asked for."""
        sample: dict[str, Any] = {}
        for spec in self.specs:
            try:
                self._add(sample, spec, record, key, label, image)
            except FieldError as exc:
                raise CorruptRecordError(key, f"field {spec.name!r}: {exc}") from None
        return sample

    def _add(self, sample: dict[str, Any], spec: FieldSpec, record: Record, key: str, label: Any,
             image: ImageDecoder) -> None:
        if spec.type == "label":
            sample[spec.name] = label
            return
        if spec is self.schema.primary_image:
            sample[spec.name] = image(record, key)
            return
        data = record.stored[self._position[spec.name]]
        if data is None:
            if not spec.optional:
                raise FieldError("missing, but the field is not optional")
            sample[spec.name] = None
            return
        value = FIELD_TYPES[spec.type].decode(data, spec, self._canvas(spec, record))
        _put(sample, spec, value, self._canvas(spec, record), record, key, image)

    def _canvas(self, spec: FieldSpec, record: Record) -> Canvas | None:
        """The ``(height, width)`` of the image ``spec`` annotates, read from its header."""
        if not FIELD_TYPES[spec.type].on_canvas:
            return None
        image = self.schema.canvas_field(spec)
        if image is self.schema.primary_image:
            return (record.header.height, record.header.width)
        data = record.stored[self._position[image.name]]
        if data is None:
            raise FieldError(f"it lies on the image {image.name!r}, which this sample does not have")
        found = FIELD_TYPES["image"].decode(data, image, None)
        return (found.height, found.width)


def _put(sample: dict[str, Any], spec: FieldSpec, value: Any, canvas: Canvas | None, record: Record, key: str,
         image: ImageDecoder) -> None:
    """Add the decoded ``value`` of ``spec`` to ``sample`` in torch's and torchvision's types
    (torchvision is tried only for the types it has: boxes, masks, keypoints)."""
    types = tv_tensors() if spec.type in ("boxes", "masks", "keypoints") else None
    if isinstance(value, ImageValue):
        header = RecordHeader(value.kind, -1, value.width, value.height, value.channels, len(value.payload),
                              record.header.version)
        sample[spec.name] = image(Record(header, memoryview(value.payload)), key)
    elif isinstance(value, BoxesValue):
        _put_boxes(sample, spec, value, canvas, types)
    elif isinstance(value, MasksValue):
        dense = torch.from_numpy(value.dense())
        sample[spec.name] = types.Mask(dense) if types is not None else dense
    elif spec.type == "masks":  # a label map
        labels = value.dense()
        dense = torch.from_numpy(labels.astype(np.int64) if labels.dtype == np.uint16 else labels)
        sample[spec.name] = types.Mask(dense) if types is not None else dense
    elif spec.type == "keypoints":
        points = torch.from_numpy(value)
        sample[spec.name] = points if types is None or not hasattr(types, "KeyPoints") else \
            types.KeyPoints(points[..., :2], canvas_size=canvas)
        sample[f"{spec.name}_visibility"] = points[..., 2]
    elif spec.type == "ndarray":
        sample[spec.name] = torch.from_numpy(value)
    else:
        sample[spec.name] = value


def _put_boxes(sample: dict[str, Any], spec: FieldSpec, value: BoxesValue, canvas: Canvas | None,
               types: Any) -> None:
    coords = torch.from_numpy(value.coords)
    if types is not None:
        sample[spec.name] = types.BoundingBoxes(coords, format=spec.options["format"], canvas_size=canvas)
    else:
        sample[spec.name] = coords
    if spec.options["labels"] is not None:
        sample[spec.options["labels"]] = torch.from_numpy(value.labels)
    for extra in spec.options["extras"]:
        sample[extra] = torch.from_numpy(getattr(value, extra))


def sample_keys(schema: Schema, wanted: Sequence[str] | None) -> list[str]:
    """The keys a sample of these fields has (a boxes field adds its labels and extras; keypoints their
    visibility)."""
    keys: list[str] = []
    for name in (schema.names if wanted is None else wanted):
        spec = schema.field(name)
        keys.append(name)
        if spec.type == "boxes":
            keys += ([spec.options["labels"]] if spec.options["labels"] is not None else [])
            keys += list(spec.options["extras"])
        elif spec.type == "keypoints":
            keys.append(f"{name}_visibility")
    return keys
