"""A field store's record as a sample: the fields asked for, decoded into torch's and torchvision's types.

Only the fields asked for are decoded (a caption-only pass over an image-text
store never decodes a JPEG). Images come as the dataset's ``output`` says,
numbers and text as Python values, JSON as what :func:`json.loads` gives,
arrays as tensors; boxes, masks and keypoints as torchvision's ``tv_tensors``
where torchvision imports (:mod:`datakit.datasets.tv_types`), with a boxes
field's per-box labels and extras under their own keys (``labels``,
``iscrowd``, ``area``, ``ids``), as torchvision's detection samples hold them.
Every failure is a :class:`~datakit.errors.CorruptRecordError` naming the
record and the field. For a ``datakit.vision`` pipeline that moves the
sample's targets, masks are left undecoded (:class:`LazyMasks`) until the
pipeline's crop says which of their pixels the output shows.
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
from datakit.format.fields.masks import MasksValue, SemanticMask
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.records import Record, RecordHeader
from datakit.vision.targets.mask_maps import place_masks
from datakit.vision.targets.steps import Step

__all__ = ["FieldDecoder", "LazyMasks", "sample_keys"]

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

    def sample(self, record: Record, key: str, label: Any, image: ImageDecoder,
               lazy_masks: bool = False) -> dict[str, Any]:
        """The sample of ``record`` as a dict, keys in the order the fields were asked for; with
        ``lazy_masks``, masks as :class:`LazyMasks`."""
        sample: dict[str, Any] = {}
        for spec in self.specs:
            try:
                self._add(sample, spec, record, key, label, image, lazy_masks)
            except FieldError as exc:
                raise CorruptRecordError(key, f"field {spec.name!r}: {exc}") from None
        return sample

    def _add(self, sample: dict[str, Any], spec: FieldSpec, record: Record, key: str, label: Any,
             image: ImageDecoder, lazy_masks: bool) -> None:
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
        if lazy_masks and spec.type == "masks":
            sample[spec.name] = LazyMasks(value, key, spec.name)
            return
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
    elif spec.type == "masks":
        sample[spec.name] = LazyMasks(value, key, spec.name).dense()
    elif spec.type == "keypoints":
        points = torch.from_numpy(value)
        sample[spec.name] = points if types is None or not hasattr(types, "KeyPoints") else \
            types.KeyPoints(points[..., :2], canvas_size=canvas)
        sample[f"{spec.name}_visibility"] = points[..., 2]
    elif spec.type == "ndarray":
        sample[spec.name] = torch.from_numpy(value)
    else:
        sample[spec.name] = value


class LazyMasks:
    """A masks field not decoded yet: decoded whole, or for a placement only where its output shows it.

    What :class:`~datakit.vision.targets.sample.PlaceableMasks` describes:
    instance masks decode only the columns a region spans
    (:meth:`MasksValue.dense`), then only the rows and columns the
    placement's maps reach are gathered (:mod:`datakit.vision.targets.mask_maps`);
    a label map (a PNG) is decoded whole, then sampled the same way. Either
    comes as a ``tv_tensors.Mask`` where torchvision imports, else a plain
    tensor: instances uint8 ``(N, H, W)``, label maps uint8 or int64 ``(H, W)``.

    Args:
        value: the decoded field value.
        key: the record's key, for errors.
        name: the field's name, for errors.
    """

    def __init__(self, value: MasksValue | SemanticMask, key: str, name: str) -> None:
        self.value = value
        self.key, self.name = key, name
        self._labels: torch.Tensor | None = None

    @property
    def canvas(self) -> Canvas:
        """The ``(height, width)`` the masks lie on."""
        return (self.value.height, self.value.width)

    def read(self, region: tuple[int, int, int, int]) -> torch.Tensor:
        """The masks in ``region`` ``(top, left, height, width)`` of their canvas, as a plain tensor."""
        top, left, height, width = region
        try:
            if isinstance(self.value, MasksValue):
                return torch.from_numpy(self.value.dense(region))
            if self._labels is None:
                labels = self.value.dense()
                wide = labels.dtype == np.uint16  # torch has no uint16 masks: class ids as int64
                self._labels = torch.from_numpy(labels.astype(np.int64) if wide else labels)
        except (ValueError, OSError) as exc:  # a PNG that does not decode, a size that does not match
            raise CorruptRecordError(self.key, f"field {self.name!r}: {exc}") from None
        return self._labels[top:top + height, left:left + width]

    def dense(self) -> Any:
        """The masks, decoded whole, in the sample's type."""
        return _as_mask(self.read((0, 0, *self.canvas)))

    def placed(self, source: Canvas, steps: Sequence[Step]) -> Any:
        """The masks after ``steps`` from the image's canvas ``source``, in the sample's type.

        Raises:
            ValueError: the masks lie on another canvas than the image (named).
        """
        if tuple(source) != self.canvas:
            raise ValueError(f"record {self.key!r}: field {self.name!r} lies on a {self.canvas[1]}x"
                             f"{self.canvas[0]} canvas, its image is {source[1]}x{source[0]}")
        return _as_mask(place_masks(self.read, self.canvas, steps))


def _as_mask(dense: torch.Tensor) -> Any:
    types = tv_tensors()
    return types.Mask(dense) if types is not None else dense


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
