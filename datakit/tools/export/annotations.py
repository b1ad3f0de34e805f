"""A sample's boxes, instance masks and keypoints in COCO's annotation shape, for the COCO and WDS exports.

One annotation per box, as a COCO ``instances`` file holds it: ``bbox``
(``[x, y, width, height]``, the stored numbers themselves when the boxes are
XYWH, as a COCO conversion keeps them), ``category_id`` (the box's label),
``area`` (the stored area; else the mask's pixels, else the box's),
``iscrowd`` (stored, else 0), ``id`` (the annotation file's own, when the
boxes keep ``ids``), ``segmentation`` as COCO's uncompressed run-length
encoding (``{"size": [height, width], "counts": [...]}``, the stored runs
themselves: column-major, starting with 0s) when an instance masks field
belongs to the boxes, and ``keypoints`` (``[x1, y1, v1, ...]``) with
``num_keypoints`` (the points with ``v > 0``) when a keypoints field does.
Masks and keypoints that belong to no boxes make annotations of their own:
a ``segmentation``, or ``keypoints``. A number that is no number (a NaN
coordinate ``--boxes keep`` kept) is written as ``NaN``, as Python's
:mod:`json` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.fields import from_xyxy, xyxy_of
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue
from datakit.format.fields.schema import Schema

__all__ = ["Instances", "instance_fields", "instances", "segmentation", "keypoint_list", "xywh"]


@dataclass(frozen=True)
class Instances:
    """The fields one list of annotations is made of: a boxes field, and the instance masks and keypoints
    that belong to it (or masks or keypoints alone, when they belong to no boxes)."""

    boxes: FieldSpec | None = None
    masks: FieldSpec | None = None
    keypoints: FieldSpec | None = None

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in (self.boxes, self.masks, self.keypoints) if spec is not None]


def instance_fields(schema: Schema) -> list[Instances]:
    """Every list of annotations a sample of ``schema`` gives: one per boxes field (with the first instance
    masks and keypoints fields that belong to it), then one per masks or keypoints field that belongs to
    none; a semantic label map is none of them."""
    found: list[Instances] = []
    used: set[str] = set()
    for spec in schema.fields:
        if spec.type != "boxes":
            continue
        masks = _belonging(schema, spec.name, "masks", used)
        keypoints = _belonging(schema, spec.name, "keypoints", used)
        found.append(Instances(spec, masks, keypoints))
    for spec in schema.fields:
        if spec.name in used or spec.type not in ("masks", "keypoints"):
            continue
        if spec.type == "masks" and spec.options["kind"] == "instances":
            found.append(Instances(masks=spec))
        elif spec.type == "keypoints":
            found.append(Instances(keypoints=spec))
    return found


def _belonging(schema: Schema, boxes: str, kind: str, used: set[str]) -> FieldSpec | None:
    for spec in schema.fields:
        if spec.type == kind and spec.options.get("boxes") == boxes and spec.name not in used and (
                kind != "masks" or spec.options["kind"] == "instances"):
            used.add(spec.name)
            return spec
    return None


def instances(group: Instances, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The annotations of one sample's ``values`` for ``group`` (none where its fields have no value).

    Raises:
        FieldError: masks or keypoints of another number of instances than their boxes (naming the field).
    """
    boxes = values.get(group.boxes.name) if group.boxes is not None else None
    masks = values.get(group.masks.name) if group.masks is not None else None
    points = values.get(group.keypoints.name) if group.keypoints is not None else None
    counts = {spec.name: len(value) for spec, value in ((group.boxes, boxes), (group.masks, masks),
                                                        (group.keypoints, points))
              if spec is not None and value is not None}
    if len(set(counts.values())) > 1:
        words = ", ".join(f"{count} in {name!r}" for name, count in counts.items())
        raise FieldError(f"field {next(reversed(counts))!r}: its instances do not match one to one ({words})")
    found: list[dict[str, Any]] = [{} for _ in range(max(counts.values(), default=0))]
    if isinstance(boxes, BoxesValue) and group.boxes is not None:
        _add_boxes(found, boxes, group.boxes.options["format"])
    if isinstance(masks, MasksValue):
        for annotation, runs in zip(found, masks.runs, strict=True):
            annotation["segmentation"] = segmentation(masks, runs)
            if "area" not in annotation:
                annotation["area"] = float(np.asarray(runs, dtype=np.int64)[1::2].sum())
    if points is not None:
        for annotation, instance in zip(found, np.asarray(points), strict=True):
            annotation["keypoints"] = keypoint_list(instance)
            annotation["num_keypoints"] = int((instance[:, 2] > 0).sum())
    for annotation in found:  # a box's own area, when neither the boxes nor a mask gave one
        box_area = annotation.pop("box_area", None)
        if box_area is not None:
            annotation.setdefault("area", box_area)
    return found


def _add_boxes(found: list[dict[str, Any]], boxes: BoxesValue, format: str) -> None:
    corners = xywh(boxes.coords, format).tolist()
    for position, (annotation, box) in enumerate(zip(found, corners, strict=True)):
        annotation["bbox"] = box
        if boxes.labels is not None:
            annotation["category_id"] = int(boxes.labels[position])
        annotation["iscrowd"] = int(boxes.iscrowd[position]) if boxes.iscrowd is not None else 0
        if boxes.ids is not None:
            annotation["id"] = int(boxes.ids[position])
        if boxes.area is not None:
            annotation["area"] = float(boxes.area[position])
        else:
            annotation["box_area"] = float(box[2] * box[3])


def xywh(coords: np.ndarray, format: str) -> np.ndarray:
    """Boxes of ``format`` as ``[x, y, width, height]`` (float64): XYWH boxes' own numbers, exactly."""
    if format == "XYWH":
        return np.asarray(coords, dtype=np.float64).reshape(-1, 4)
    return from_xyxy(xyxy_of(coords, format), "XYWH")


def segmentation(masks: MasksValue, runs: np.ndarray) -> dict[str, Any]:
    """One instance mask as COCO's uncompressed run-length encoding (its stored runs)."""
    return {"size": [masks.height, masks.width], "counts": np.asarray(runs, dtype=np.int64).tolist()}


def keypoint_list(instance: np.ndarray) -> list[float | int]:
    """One instance's ``(K, 3)`` keypoints as COCO's flat ``[x1, y1, v1, ...]`` (whole numbers as ints)."""
    return [int(number) if float(number).is_integer() else float(number)
            for number in np.asarray(instance, dtype=np.float64).reshape(-1).tolist()]
