"""Samples as torchvision's detection datasets give them: ``(image, target)`` with ``target`` a dict.

``LMDBDataset(store, target_format="torchvision-detection")`` gives exactly
what ``torchvision.datasets.wrap_dataset_for_transforms_v2(CocoDetection(root,
annFile))`` gives for the COCO file the store was converted from: the same
order (image ids ascending), ``image_id``, ``boxes`` as ``BoundingBoxes`` in
``XYXY`` on the image's canvas (float32, converted as torchvision converts
them), ``labels`` as the category ids (int64), and with ``target_keys`` the
others it offers: ``masks`` (a ``Mask`` of the instances), ``iscrowd``,
``area``, ``bbox`` (``XYWH``) and ``category_id`` as lists of Python values.
An image without annotations gets ``{"image_id": id}`` alone, as there, so
torchvision's detection reference scripts run unchanged.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import torch

from datakit.datasets.tv_types import tv_tensors
from datakit.format.fields.schema import Schema

__all__ = ["DETECTION_KEYS", "DEFAULT_KEYS", "DetectionTargets"]

DETECTION_KEYS = frozenset({"image_id", "boxes", "labels", "masks", "iscrowd", "area", "bbox", "category_id"})
"""The target keys datakit gives (torchvision's, but ``segmentation``: a store keeps masks, not polygons)."""
DEFAULT_KEYS = frozenset({"image_id", "boxes", "labels"})
"""torchvision's default ``target_keys``."""


class DetectionTargets:
    """Turns a field sample into torchvision's ``(image, target)``.

    Args:
        schema: the store's fields: it needs an ``int`` field ``image_id`` and
            a ``boxes`` field with labels (and a ``masks`` field for ``masks``).
        target_keys: the keys of each target: a collection of
            :data:`DETECTION_KEYS`, ``"all"``, or ``None`` for :data:`DEFAULT_KEYS`.

    Raises:
        ValueError: the store lacks a field the keys need, or a key is unknown.
    """

    def __init__(self, schema: Schema, target_keys: Collection[str] | str | None) -> None:
        fields = schema.fields
        boxes = [spec for spec in fields if spec.type == "boxes" and spec.options["labels"] is not None]
        masks = [spec for spec in fields if spec.type == "masks" and spec.options["kind"] == "instances"]
        has_id = any(spec.name == "image_id" and spec.type == "int" for spec in schema.fields)
        if not boxes or not has_id:
            raise ValueError("target_format='torchvision-detection' needs an int field 'image_id' and a "
                             "boxes field with labels, as a COCO conversion writes; this store's fields are "
                             f"{', '.join(schema.names)}")
        keys = DETECTION_KEYS if target_keys == "all" else DEFAULT_KEYS if target_keys is None else \
            frozenset(target_keys)
        unknown = sorted(keys - DETECTION_KEYS)
        if unknown:
            raise ValueError(f"target_keys {', '.join(map(repr, unknown))} are not among "
                             f"{', '.join(sorted(DETECTION_KEYS))}")
        if "masks" in keys and not masks:
            if target_keys != "all":
                raise ValueError("target_keys asks for 'masks', and this store has no instance masks field")
            keys = keys - {"masks"}
        self.keys = keys
        self.boxes = boxes[0]
        self.masks = masks[0] if masks else None
        self.image = schema.canvas_field(self.boxes).name

    def fields(self) -> list[str]:
        """The fields a sample must be read with."""
        wanted = [self.image, "image_id", self.boxes.name]
        return wanted + ([self.masks.name] if self.masks is not None and "masks" in self.keys else [])

    def pair(self, sample: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(image, target)`` of a field sample read with :meth:`fields`."""
        image, boxes = sample[self.image], sample[self.boxes.name]
        target: dict[str, Any] = {"image_id": sample["image_id"]} if "image_id" in self.keys else {}
        if len(boxes) == 0:
            return image, {"image_id": sample["image_id"]}
        coords = torch.as_tensor(boxes).as_subclass(torch.Tensor)
        labels = sample[self.boxes.options["labels"]]
        if "boxes" in self.keys:
            target["boxes"] = _xyxy(coords, self.boxes.options["format"], _canvas(boxes, image))
        if "masks" in self.keys and self.masks is not None:
            target["masks"] = sample[self.masks.name]
        if "labels" in self.keys:
            target["labels"] = labels.to(torch.int64)
        self._lists(target, sample, coords, labels)
        return image, target

    def _lists(self, target: dict[str, Any], sample: dict[str, Any], coords: torch.Tensor,
               labels: torch.Tensor) -> None:
        """The keys torchvision gives as lists of the annotations' own values."""
        if "iscrowd" in self.keys and "iscrowd" in sample:
            target["iscrowd"] = [int(value) for value in sample["iscrowd"].tolist()]
        if "area" in self.keys and "area" in sample:
            target["area"] = [float(value) for value in sample["area"].tolist()]
        if "bbox" in self.keys:
            target["bbox"] = _xywh(coords.numpy(), self.boxes.options["format"]).tolist()
        if "category_id" in self.keys:
            target["category_id"] = [int(value) for value in labels.tolist()]


def _canvas(boxes: Any, image: Any) -> tuple[int, int]:
    canvas = getattr(boxes, "canvas_size", None)
    if canvas is not None:
        return (int(canvas[0]), int(canvas[1]))
    if hasattr(image, "size") and not isinstance(image, torch.Tensor):  # PIL: (width, height)
        return (image.size[1], image.size[0])
    return (int(image.shape[-2]), int(image.shape[-1]))


def _xyxy(coords: torch.Tensor, format: str, canvas: tuple[int, int]) -> Any:
    """The boxes in XYXY, float32, converted as torchvision converts a float32 ``BoundingBoxes``."""
    types = tv_tensors()
    boxes32 = coords.to(torch.float32)
    if types is not None:
        from torchvision.transforms.v2 import functional as F  # torchvision imports: tv_tensors did

        boxes = types.BoundingBoxes(boxes32, format=format, canvas_size=canvas)
        return F.convert_bounding_box_format(boxes, new_format=types.BoundingBoxFormat.XYXY)
    corners = boxes32.clone()
    if format == "XYWH":
        corners[:, 2:] += corners[:, :2]
    elif format == "CXCYWH":
        half = corners[:, 2:] / 2
        corners = torch.cat((corners[:, :2] - half, corners[:, :2] + half), dim=1)
    return corners


def _xywh(coords: np.ndarray, format: str) -> np.ndarray:
    """The boxes in XYWH, in the stored dtype (an annotation file's own numbers when it was XYWH)."""
    if format == "XYWH":
        return coords
    if format == "XYXY":
        return np.concatenate((coords[:, :2], coords[:, 2:] - coords[:, :2]), axis=1)
    return np.concatenate((coords[:, :2] - coords[:, 2:] / 2, coords[:, 2:]), axis=1)
