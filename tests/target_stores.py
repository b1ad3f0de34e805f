"""Field stores of JPEG photos with boxes, masks, keypoints and a label map, made through the conversion.

A test-only source: a ``SourceFolder`` with a ``schema`` and an
``EntryFields`` that gives generated values (the core every real source maps
its input onto; COCO and the others are not needed). The images are JPEGs
of several sizes, one large enough for the fused decoder's DCT scaling; the
boxes cross the image's edges and some lie outside it (kept as given, as
``--boxes keep`` does); each box has an instance mask and keypoints; each
image a label map (a PNG, with 255 for "ignore" as VOC's).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import datakit
from datakit.conversion import pipeline
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue, runs_of
from datakit.format.fields.schema import Schema

__all__ = ["SIZES", "schema", "expected_values", "field_store", "photo"]

SIZES = [(640, 480), (97, 131), (64, 48), (150, 100), (41, 77), (320, 240), (200, 300), (90, 90)]
"""``(width, height)`` of sample ``i % len(SIZES)``."""
CLASSES = ["a", "b"]


def schema(box_format: str = "XYWH") -> Schema:
    """Boxes in ``box_format`` with labels and their instance masks and keypoints, and a label map."""
    return Schema.from_json([
        {"name": "image", "type": "image"},
        {"name": "label", "type": "label"},
        {"name": "image_id", "type": "int"},
        {"name": "boxes", "type": "boxes", "format": box_format, "extras": ["iscrowd"]},
        {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"},
        {"name": "keypoints", "type": "keypoints", "names": ["head", "tail", "centre"], "boxes": "boxes"},
        {"name": "segmentation", "type": "masks", "kind": "semantic"},
    ])


def photo(index: int) -> bytes:
    """Sample ``index``'s JPEG: smooth gradients and a little noise, as smooth as photos are (the DCT-scaled
    decode's 1-grey-level bound is for photos: ``docs/vision.md``)."""
    width, height = SIZES[index % len(SIZES)]
    rng = np.random.default_rng(index)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = [127 + 80 * np.sin(xs / (60 + 7 * c) + ys / (70 + index) + c) for c in range(3)]
    pixels = np.stack(channels, axis=2) + rng.normal(0, 2, (height, width, 3))
    buffer = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def expected_values(index: int, box_format: str = "XYWH") -> dict[str, Any]:
    """What sample ``index`` holds: boxes (their corners in ``xyxy``), dense masks, points, label map."""
    width, height = SIZES[index % len(SIZES)]
    rng = np.random.default_rng(1000 + index)
    count = 1 + index % 4
    start = rng.uniform([-0.2 * width, -0.2 * height], [width, height], size=(count, 2))
    size = rng.uniform(2, [width / 2, height / 2], size=(count, 2))
    corners = np.concatenate([start, start + size], axis=1)
    if count > 2:
        corners[-1] = [width + 3, 1, width + 9, 7]  # wholly outside the image
    masks = np.zeros((count, height, width), dtype=np.uint8)
    for position, (x1, y1, x2, y2) in enumerate(corners):
        masks[position, max(int(y1), 0):max(int(y2), 0), max(int(x1), 0):max(int(x2), 0)] = 1
        masks[position] |= (rng.random((height, width)) > 0.97).astype(np.uint8)
    points = np.concatenate([rng.uniform(-5, width + 5, (count, 3, 1)),
                             rng.uniform(-5, height + 5, (count, 3, 1)),
                             rng.integers(0, 3, (count, 3, 1))], axis=2).astype(np.float32)
    labels = rng.integers(0, 6, (height, width)).astype(np.uint8)
    labels[rng.random((height, width)) > 0.9] = 255
    return {"corners": corners, "masks": masks, "keypoints": points, "segmentation": labels,
            "labels": rng.integers(1, 5, count), "iscrowd": (np.arange(count) == 1).astype(np.uint8)}


def _coords(corners: np.ndarray, box_format: str) -> np.ndarray:
    if box_format == "XYXY":
        return corners
    size = corners[:, 2:] - corners[:, :2]
    origin = corners[:, :2] if box_format == "XYWH" else corners[:, :2] + size / 2
    return np.concatenate([origin, size], axis=1)


def _png(labels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(labels, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


class GeneratedFields:
    """The :class:`~datakit.conversion.sources.entries.EntryFields` of the generated samples."""

    def __init__(self, box_format: str) -> None:
        self.box_format = box_format

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        index = entry.location[0]
        want = expected_values(index, self.box_format)
        width, height = SIZES[index % len(SIZES)]
        return {"image_id": 100 + index,
                "boxes": BoxesValue(_coords(want["corners"], self.box_format), labels=want["labels"],
                                    iscrowd=want["iscrowd"]),
                "masks": MasksValue(height, width, [runs_of(mask) for mask in want["masks"]]),
                "keypoints": want["keypoints"], "segmentation": _png(want["segmentation"])}

    def close(self) -> None:
        """Nothing opened."""


def field_store(root: Path, dest: str | Path, count: int = len(SIZES), box_format: str = "XYWH",
                **convert: Any) -> datakit.ConversionReport:
    """Convert ``count`` generated samples (JPEGs under ``root``) into the store ``dest``."""
    entries = []
    for index in range(count):
        path = root / CLASSES[index % 2] / f"{index:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(photo(index))
        entries.append(SourceEntry(path.relative_to(root).as_posix(), index % 2, location=(index,)))

    def scan(*args: Any, **kwargs: Any) -> tuple[SourceFolder, str]:
        folder = SourceFolder(str(root), list(CLASSES), entries, schema=schema(box_format),
                              fields=GeneratedFields(box_format))
        return folder, "generated fields"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "scan_source", scan)
        return datakit.convert(root, dest, **convert)
