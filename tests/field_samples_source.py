"""A field store of every field type, made through the conversion pipeline by a test-only source.

The sources that give field stores to users (COCO, WebDataset members, field
files, Hugging Face columns) map their inputs onto the same core: a
``SourceFolder`` with a ``schema`` and an ``EntryFields``. This one does so
with generated values, so that the stores' contract can be tested on every
field type, both backends, without depending on any of those sources.
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

__all__ = ["SCHEMA", "expected_values", "field_store"]

SCHEMA = Schema.from_json([
    {"name": "image", "type": "image"},
    {"name": "label", "type": "label"},
    {"name": "image_id", "type": "int"},
    {"name": "score", "type": "float"},
    {"name": "caption", "type": "str"},
    {"name": "meta", "type": "json", "optional": True},
    {"name": "embedding", "type": "ndarray", "dtype": "float32", "shape": [4]},
    {"name": "boxes", "type": "boxes", "format": "XYWH", "extras": ["iscrowd", "area", "ids"],
     "categories": [{"id": 1, "name": "cat"}, {"id": 7, "name": "dog"}]},
    {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"},
    {"name": "keypoints", "type": "keypoints", "names": ["nose", "tail"], "boxes": "boxes"},
    {"name": "depth", "type": "image", "optional": True},
])
"""Every field type, an optional one among them."""

CLASSES = ["cat", "dog"]


def _image(index: int, size: tuple[int, int]) -> bytes:
    rng = np.random.default_rng(index)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")  # lossless: the pixels can be compared
    return buffer.getvalue()


def size_of(index: int, uniform: bool = False) -> tuple[int, int]:
    """``(width, height)`` of sample ``index``: several sizes, as photos have (or one, ``uniform``)."""
    return (24, 18) if uniform else (24 + 4 * (index % 3), 18 + 2 * (index % 2))


def expected_values(index: int, uniform: bool = False) -> dict[str, Any]:
    """What sample ``index`` holds, by field (boxes and masks as the core's values)."""
    width, height = size_of(index, uniform)
    rng = np.random.default_rng(1000 + index)
    count = index % 4  # 0 to 3 boxes, an image without any among them
    corners = rng.uniform(0, [width / 2, height / 2], size=(count, 2))
    sizes = rng.uniform(1, [width / 2, height / 2], size=(count, 2))
    masks = (rng.random((count, height, width)) > 0.5).astype(np.uint8)
    points = np.concatenate([rng.uniform(0, width, (count, 2, 1)), rng.uniform(0, height, (count, 2, 1)),
                             rng.integers(0, 3, (count, 2, 1))], axis=2)
    return {
        "image_id": 100 + index,
        "score": index / 7,
        "caption": f"sample {index} \u00e9t\u00e9 \u2028 caption",
        "meta": None if index % 5 == 4 else {"index": index, "tags": ["a", "b"][: index % 3]},
        "embedding": np.arange(4, dtype=np.float32) * index,
        "boxes": BoxesValue(np.concatenate([corners, sizes], axis=1), labels=rng.choice([1, 7], count),
                            iscrowd=(np.arange(count) == 1).astype(np.uint8), area=sizes.prod(axis=1),
                            ids=np.arange(count) + 10 * index),
        "masks": MasksValue(height, width, [runs_of(mask) for mask in masks]),
        "dense_masks": masks,
        "keypoints": points.astype(np.float32),
        "depth": None if index % 2 else _image(10_000 + index, (width, height)),
    }


class GeneratedFields:
    """The :class:`~datakit.conversion.sources.entries.EntryFields` of the generated samples."""

    def __init__(self, uniform: bool) -> None:
        self.uniform = uniform

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        values = dict(expected_values(entry.location[0], self.uniform))
        values.pop("dense_masks")
        return values

    def close(self) -> None:
        """Nothing opened."""


def write_images(root: Path, count: int, uniform: bool = False) -> list[SourceEntry]:
    """The samples' images under ``root`` and their entries (label: index parity)."""
    entries = []
    for index in range(count):
        path = root / CLASSES[index % 2] / f"{index:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_image(index, size_of(index, uniform)))
        entries.append(SourceEntry(path.relative_to(root).as_posix(), index % 2, location=(index,)))
    return entries


def field_store(root: Path, dest: str, count: int = 12, uniform: bool = False,
                **convert: Any) -> datakit.ConversionReport:
    """Convert ``count`` generated samples with every field type (images under ``root``, of several
    sizes or of one, ``uniform``) into ``dest``."""
    entries = write_images(root, count, uniform)

    def scan(*args: Any, **kwargs: Any) -> tuple[SourceFolder, str]:
        fields = GeneratedFields(uniform)
        folder = SourceFolder(str(root), list(CLASSES), entries, schema=SCHEMA, fields=fields)
        return folder, "generated fields"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "scan_source", scan)
        return datakit.convert(root, dest, **convert)
