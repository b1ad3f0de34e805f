"""One COCO image's field values, in the reader processes: its id, boxes, masks, keypoints and captions.

The scan packs each image's annotations and captions as compact JSON bytes
(:func:`pack`): one small object per image instead of the millions of Python
objects a parsed annotation file is, so the readers forked from the
conversion share them cheaply. A reader unpacks an image's annotations and
checks each as torchvision would need it (a box of 4 numbers, a category the
files list, keypoints of the category's length); a bad one skips the image,
naming the annotation, its image and its file
(:class:`~datakit.conversion.images.checks.BadImage`). Masks need the image's
size, known once the image is read (:class:`~datakit.conversion.sources.coco.masks.CocoMasks`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.coco.masks import CocoMasks, is_number
from datakit.conversion.sources.entries import SourceEntry
from datakit.format.fields.boxes import BoxesValue

__all__ = ["CocoLayout", "CocoFields", "pack"]


@dataclass(frozen=True)
class CocoLayout:
    """Which fields a COCO store has, and what checking an annotation needs.

    Attributes:
        files: the annotation files, named in messages.
        boxes: the store keeps boxes (an instances or keypoints file was given).
        masks: and their masks (some annotation has a segmentation).
        captions: the store keeps captions (a captions file was given).
        categories: the category ids the files list.
        points: the keypoints per instance (0: no keypoints field).
        keypoint_category: the name of the category the points are of, for messages.
    """

    files: tuple[str, ...]
    boxes: bool
    masks: bool
    captions: bool
    categories: frozenset[int]
    points: int = 0
    keypoint_category: str = ""


def pack(annotations: Sequence[Mapping[str, Any]], captions: Sequence[str]) -> bytes:
    """One image's annotations and captions as the bytes :class:`CocoFields` keeps (NaN kept)."""
    return json.dumps([annotations, captions], separators=(",", ":")).encode()


@dataclass(frozen=True)
class CocoFields:
    """The field values of a COCO set's images (an :class:`~datakit.conversion.sources.entries.EntryFields`).

    Attributes:
        layout: the store's fields.
        packed: per image id, its :func:`pack` ed annotations and captions (none: an image
            without any, a negative).
    """

    layout: CocoLayout
    packed: Mapping[int, bytes]

    def values(self, entry: SourceEntry) -> dict[str, Any]:
        """The values of the image ``entry.location[0]``.

        Raises:
            BadImage: an annotation torchvision could not read as it is (naming it).
        """
        image_id = entry.location[0]
        packed = self.packed.get(image_id)
        annotations, captions = json.loads(packed) if packed is not None else ([], [])
        layout = self.layout
        places = [f"annotation {each['id']} of image {image_id} ({layout.files[each['file']]})"
                  for each in annotations]
        found: dict[str, Any] = {"image_id": image_id}
        if layout.boxes:
            found["boxes"] = _boxes(annotations, places, layout)
        if layout.masks:
            found["masks"] = CocoMasks(list(zip(places, (each.get("segmentation") for each in annotations),
                                                strict=True)))
        if layout.points:
            found["keypoints"] = _keypoints(annotations, places, layout)
        if layout.captions:
            found["captions"] = captions
        return found

    def close(self) -> None:
        """Nothing to release: the values are in memory."""


def _boxes(annotations: Sequence[Mapping[str, Any]], places: Sequence[str], layout: CocoLayout) -> BoxesValue:
    """The image's boxes as the file gives them (XYWH), with their categories and extras."""
    count = len(annotations)
    coords = np.zeros((count, 4), dtype=np.float64)
    labels, ids = np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64)
    crowd, area = np.zeros(count, dtype=np.uint8), np.zeros(count, dtype=np.float64)
    for row, (annotation, where) in enumerate(zip(annotations, places, strict=True)):
        bbox = annotation.get("bbox")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(is_number(value) for value in bbox)):
            raise BadImage(f"{where}: \"bbox\" is 4 numbers [x, y, width, height], not {bbox!r:.60}")
        category = annotation.get("category_id")
        if type(category) is not int or category not in layout.categories:
            raise BadImage(f"{where}: \"category_id\" {category!r:.20} is not the id of a category the "
                           "annotation files list")
        iscrowd = annotation.get("iscrowd", 0)
        if iscrowd not in (0, 1):
            raise BadImage(f"{where}: \"iscrowd\" is 0 or 1, not {iscrowd!r:.20}")
        value = annotation.get("area", bbox[2] * bbox[3])
        if not is_number(value):
            raise BadImage(f"{where}: \"area\" is a number, not {value!r:.20}")
        coords[row], labels[row], ids[row] = bbox, category, annotation["id"]
        crowd[row], area[row] = iscrowd, value
    return BoxesValue(coords, labels, crowd, area, ids)


def _keypoints(annotations: Sequence[Mapping[str, Any]], places: Sequence[str],
               layout: CocoLayout) -> np.ndarray:
    """``(N, K, 3)`` points, one row per box; a box without keypoints (another category) has K
    points of visibility 0, COCO's "not labelled"."""
    points = np.zeros((len(annotations), layout.points, 3), dtype=np.float64)
    for row, (annotation, where) in enumerate(zip(annotations, places, strict=True)):
        given = annotation.get("keypoints")
        if given is None:
            continue
        if not (isinstance(given, list) and all(is_number(value) for value in given)):
            raise BadImage(f"{where}: \"keypoints\" is a list of numbers (x, y, visibility of each point)")
        if len(given) != 3 * layout.points:
            raise BadImage(f"{where}: \"keypoints\" has {len(given)} values; the {layout.points} points of "
                           f"{layout.keypoint_category!r} need {3 * layout.points} (x, y, visibility each)")
        points[row] = np.asarray(given, dtype=np.float64).reshape(layout.points, 3)
    return points
