"""A sample's fields in a reader process: read from the source, boxes checked, encoded, measured, sealed.

A source with fields beyond an image and a label hands the reading stage an
``EntryFields`` beside its ``EntryBytes`` (:mod:`datakit.conversion.sources.entries`):
it gives each entry's values, opened lazily in the process that reads. Here
each value is encoded by its type (:mod:`datakit.format.fields`) once the
image it lies on is known: a value that needs that image's size (COCO
polygons become masks of its canvas) is an :class:`OnCanvas`. Boxes outside
their image, of no size or with NaN coordinates are kept as given, or
clipped, dropped with their masks and keypoints, or refused, as
``--boxes`` says (:data:`BOX_POLICIES`). Anything a field cannot hold skips
the sample, named with the field (:class:`~datakit.conversion.images.checks.BadImage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from datakit.conversion.images.checks import BadImage, ImageOptions, SourceImage, check_source_image
from datakit.conversion.sources.entries import EntryFields, SourceEntry, SourceFolder
from datakit.errors import SourceError, option
from datakit.format.fields.base import Canvas, FieldError, FieldSpec
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import MasksValue
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.fields.stats import measure
from datakit.format.records import HEADER_SIZE, seal_fields_record

__all__ = ["BOX_POLICIES", "OnCanvas", "FieldOptions", "SealedFields", "seal_with_fields",
           "xyxy_of", "from_xyxy", "refuse_moving_images"]

BOX_POLICIES = ("keep", "clip", "drop", "refuse")
"""What ``--boxes`` does with a box outside its image, of no size, or with a NaN coordinate."""
_DOCUMENT_TYPES = ("int", "float", "str", "json")


@runtime_checkable
class OnCanvas(Protocol):
    """A value that needs the size of the image it lies on (COCO's polygons, rasterised into masks)."""

    def on(self, canvas: Canvas) -> Any:
        """The value on an image of ``(height, width)``."""
        ...


@dataclass(frozen=True)
class FieldOptions:
    """How the reader processes encode a source's fields.

    Attributes:
        schema: the store's fields.
        source: where the values come from.
        boxes: one of :data:`BOX_POLICIES`.
    """

    schema: Schema
    source: EntryFields
    boxes: str = "keep"


@dataclass(frozen=True)
class SealedFields:
    """A sample with its fields, sealed: the record, the measurements the manifest adds up, and the plain
    values (numbers, text, JSON) a MongoDB document keeps beside the record, to be queried."""

    record: bytearray
    stats: dict[str, dict[str, Any]]
    document: dict[str, Any]


def seal_with_fields(image: SourceImage, entry: SourceEntry, label: int, options: FieldOptions,
                     image_options: ImageOptions) -> SealedFields:
    """The version-3 record of ``image`` and the entry's other fields.

    Raises:
        BadImage: a value is missing, cannot be read or encoded, or a box breaks ``--boxes refuse``.
    """
    schema = options.schema
    values = dict(options.source.values(entry))
    canvases = {schema.primary_image.name: (image.height, image.width)}
    resolved: dict[str, Any] = {}
    for spec in schema.stored[1:]:
        try:
            resolved[spec.name] = _resolve(spec, values.get(spec.name), image_options, canvases, schema)
        except (FieldError, BadImage) as exc:
            raise BadImage(f"field {spec.name!r}: {exc}") from None
    mended = _apply_box_policy(schema, resolved, canvases, options.boxes)
    encoded: list[bytes | None] = []
    stats: dict[str, dict[str, Any]] = {}
    document: dict[str, Any] = {}
    for spec in schema.stored[1:]:
        value = resolved[spec.name]
        canvas = _canvas(spec, canvases, schema)
        try:
            encoded.append(None if value is None else FIELD_TYPES[spec.type].encode(value, spec, canvas))
        except FieldError as exc:
            raise BadImage(f"field {spec.name!r}: {exc}") from None
        stats[spec.name] = {**measure(spec, value, canvas), **mended.get(spec.name, {})}
        if spec.type in _DOCUMENT_TYPES and value is not None:
            document[spec.name] = value
    record = seal_fields_record(image.payload, encoded, kind=image.kind, label=label, width=image.width,
                                height=image.height, channels=image.channels)
    return SealedFields(record, stats, document)


def refuse_moving_images(folder: SourceFolder, max_side: int | None, exif_transpose: bool) -> None:
    """Refuse to resize or turn the images of a source whose boxes, masks or keypoints would stay where
    they were (``max_side``, ``exif_transpose`` change the primary image alone).

    Raises:
        SourceError: naming the option and the fields.
    """
    annotated = [spec.name for spec in (folder.schema.fields if folder.schema is not None else ())
                 if spec.type in ("boxes", "masks", "keypoints")]
    changes = [each for each, given in ((option("max_side", max_side), max_side is not None),
                                        (option("exif_transpose"), exif_transpose)) if given]
    if annotated and changes:
        raise SourceError.advising(
            "{change} would change the images of {root} but not their {fields}, which would no longer frame "
            "what they framed; convert without it", change=changes[0], root=folder.root,
            fields=", ".join(annotated))


def _resolve(spec: FieldSpec, value: Any, image_options: ImageOptions, canvases: dict[str, Canvas],
             schema: Schema) -> Any:
    """A value ready to encode: present where the field needs one, an image checked, on its canvas."""
    if value is None:
        if not spec.optional:
            raise FieldError("the sample has no value, and the field is not optional")
        return None
    if spec.type == "image":
        framed = bytearray(HEADER_SIZE) + bytes(value)
        extra = check_source_image(framed, replace(image_options, exif_transpose=False, max_side=None))
        canvases[spec.name] = (extra.height, extra.width)
        return ImageValue(bytes(extra.payload), extra.kind, extra.width, extra.height, extra.channels)
    if isinstance(value, OnCanvas):
        canvas = _canvas(spec, canvases, schema)
        if canvas is None:
            raise FieldError("its image has no value in this sample")
        return value.on(canvas)
    return value


def _canvas(spec: FieldSpec, canvases: Mapping[str, Canvas], schema: Schema) -> Canvas | None:
    if not FIELD_TYPES[spec.type].on_canvas:
        return None
    return canvases.get(schema.canvas_field(spec).name)


def _apply_box_policy(schema: Schema, values: dict[str, Any], canvases: Mapping[str, Canvas],
                      policy: str) -> dict[str, dict[str, int]]:
    """Keep, clip, drop (with the masks and keypoints of the same instances) or refuse the boxes that
    lie outside their image, have no size, or a NaN coordinate; per boxes field, how many boxes were
    ``clipped`` (moved inside their image) or ``dropped``, for the field's statistics."""
    mended: dict[str, dict[str, int]] = {}
    if policy == "keep":
        return mended
    for spec in schema.fields:
        boxes = values.get(spec.name)
        canvas = _canvas(spec, canvases, schema)
        if spec.type != "boxes" or not isinstance(boxes, BoxesValue) or canvas is None or not len(boxes):
            continue
        corners = xyxy_of(boxes.coords, spec.options["format"])
        height, width = canvas
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(corners).all(axis=1) & (corners[:, 2] > corners[:, 0])
                    & (corners[:, 3] > corners[:, 1]) & (corners[:, 0] >= 0) & (corners[:, 1] >= 0)
                    & (corners[:, 2] <= width) & (corners[:, 3] <= height))
        if not bad.any():
            continue
        if policy == "refuse":
            first = int(np.flatnonzero(bad)[0])
            named = f"annotation {int(boxes.ids[first])}" if boxes.ids is not None else f"box {first}"
            raise BadImage(f"field {spec.name!r}: {named} {corners[first].tolist()} lies outside the "
                           f"{width}x{height} image or has no size (--boxes refuse)")
        if policy == "clip":
            clipped = np.column_stack((corners[:, 0].clip(0, width), corners[:, 1].clip(0, height),
                                       corners[:, 2].clip(0, width), corners[:, 3].clip(0, height)))
            values[spec.name] = replace(boxes, coords=from_xyxy(clipped, spec.options["format"]))
            moved = np.isfinite(corners).all(axis=1) & (clipped != corners).any(axis=1)
            mended[spec.name] = {"clipped": int(moved.sum())}
        else:
            _drop(schema, values, spec.name, ~bad)
            mended[spec.name] = {"dropped": int(bad.sum())}
    return mended


def _drop(schema: Schema, values: dict[str, Any], name: str, kept: np.ndarray) -> None:
    """Keep the ``kept`` instances of the boxes ``name``, and of the masks and keypoints of the same ones."""
    boxes = values[name]
    values[name] = BoxesValue(boxes.coords[kept], *(None if getattr(boxes, extra) is None
                                                    else np.asarray(getattr(boxes, extra))[kept]
                                                    for extra in ("labels", "iscrowd", "area", "ids")))
    for spec in schema.fields:
        linked = values.get(spec.name)
        if spec.options.get("boxes") != name or linked is None:
            continue
        if isinstance(linked, MasksValue):
            runs = [each for each, keep in zip(linked.runs, kept, strict=True) if keep]
            values[spec.name] = MasksValue(linked.height, linked.width, runs)
        elif spec.type == "keypoints":
            values[spec.name] = np.asarray(linked)[kept]


def xyxy_of(coords: np.ndarray, format: str) -> np.ndarray:
    """Boxes of ``format`` as corners ``(x1, y1, x2, y2)``, float64."""
    boxes = np.array(coords, dtype=np.float64).reshape(-1, 4)  # a copy
    if format == "XYXY":
        return np.asarray(boxes)
    if format == "XYWH":
        return np.column_stack((boxes[:, :2], boxes[:, :2] + boxes[:, 2:]))
    half = boxes[:, 2:] / 2
    return np.column_stack((boxes[:, :2] - half, boxes[:, :2] + half))


def from_xyxy(corners: np.ndarray, format: str) -> np.ndarray:
    """Corners back in ``format``."""
    if format == "XYXY":
        return np.asarray(corners, dtype=np.float64)
    size = corners[:, 2:] - corners[:, :2]
    if format == "XYWH":
        return np.column_stack((corners[:, :2], size))
    return np.column_stack((corners[:, :2] + size / 2, size))
