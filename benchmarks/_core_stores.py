"""Stand-ins for the field sources not in this checkout: the same stores, made through the conversion core.

The read benchmarks time stores that ``datakit convert IMAGES STORE --coco FILE``
and ``datakit convert shards/ STORE`` (``.jpg`` + ``.txt`` members) write. Those
sources are written in parallel with the benchmarks; where this checkout's
``datakit convert`` does not take them yet, the benchmarks make the same
stores here, through the same core every source feeds
(a :class:`~datakit.conversion.sources.entries.SourceFolder` with a ``schema``
and an ``EntryFields``, converted by :func:`datakit.convert`'s pipeline), and say
so in their header. The schemas are the ones those sources are specified to
write: for COCO ``image``, ``image_id`` (int), ``boxes`` (XYWH, float64, the
category ids as labels, ``iscrowd``, ``area`` and ``ids``, the categories) and
``masks`` (the instances, rasterised from the polygons by pycocotools as
torchvision's wrapper rasterises them); for image-text shards ``image`` and
``txt`` (str). Once the sources are merged this module is no longer used.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import datakit
from datakit.conversion import pipeline
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue, runs_of
from datakit.format.fields.schema import Schema


class ListedFields:
    """Every entry's field values, by the entry's ``location[0]``: computed in the reader processes."""

    def __init__(self, values: Sequence[Mapping[str, Any]], coco: bool) -> None:
        self.listed = list(values)
        self.coco = coco

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        listed = self.listed[entry.location[0]]
        return coco_values(listed) if self.coco else listed

    def close(self) -> None:
        """Nothing opened."""


def coco_values(image: Mapping[str, Any]) -> dict[str, Any]:
    """One COCO image's fields: its id, boxes with their extras, and its polygons as instance masks."""
    from pycocotools import mask as coco_mask

    annotations, height, width = image["annotations"], image["height"], image["width"]
    coords = np.array([found["bbox"] for found in annotations], dtype=np.float64).reshape(-1, 4)
    boxes = BoxesValue(coords, labels=np.array([found["category_id"] for found in annotations], np.int64),
                       iscrowd=np.array([found["iscrowd"] for found in annotations], np.uint8),
                       area=np.array([found["area"] for found in annotations], np.float64),
                       ids=np.array([found["id"] for found in annotations], np.int64))
    runs = [runs_of(coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(found["segmentation"],
                                                                          height, width))))
            for found in annotations]
    return {"image_id": image["id"], "boxes": boxes, "masks": MasksValue(height, width, runs)}


@contextlib.contextmanager
def _source(folder: SourceFolder, rules: str) -> Iterator[None]:
    """:func:`datakit.convert` scanning ``folder`` instead of its ``src``."""
    original = pipeline.scan_source
    pipeline.scan_source = lambda *args, **kwargs: (folder, rules)  # type: ignore[assignment]
    try:
        yield
    finally:
        pipeline.scan_source = original


def coco_store(images: str, annotations: str, store: str) -> datakit.ConversionReport:
    """The store ``datakit convert images store --coco annotations`` is specified to write."""
    with open(annotations, encoding="utf-8") as handle:
        document = json.load(handle)
    found: dict[int, list[dict[str, Any]]] = {image["id"]: [] for image in document["images"]}
    for annotation in document["annotations"]:
        found[annotation["image_id"]].append(annotation)
    listed = sorted(document["images"], key=lambda image: image["id"])  # CocoDetection's order
    values = [dict(image, annotations=found[image["id"]]) for image in listed]
    categories = [{"id": category["id"], "name": category["name"]} for category in document["categories"]]
    schema = Schema.from_json([
        {"name": "image", "type": "image"}, {"name": "image_id", "type": "int"},
        {"name": "boxes", "type": "boxes", "format": "XYWH", "dtype": "float64",
         "extras": ["iscrowd", "area", "ids"], "categories": categories},
        {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"}])
    entries = [SourceEntry(image["file_name"], -1, location=(number,)) for number, image in enumerate(listed)]
    folder = SourceFolder(os.path.abspath(images), [], entries, schema=schema,
                          fields=ListedFields(values, coco=True), unlabelled=True)
    with _source(folder, "benchmark stand-in: coco"):
        return datakit.convert(images, store)


def caption_store(photos: str, captions: Mapping[str, str], store: str) -> datakit.ConversionReport:
    """The store ``datakit convert shards/ store`` is specified to write from ``.jpg`` + ``.txt`` shards:
    ``photos`` holds the shards' ``<key>.jpg`` members, ``captions`` their ``.txt`` by key."""
    keys = sorted(captions)
    schema = Schema.from_json([{"name": "image", "type": "image"}, {"name": "txt", "type": "str"}])
    entries = [SourceEntry(f"{key}.jpg", -1, location=(number,)) for number, key in enumerate(keys)]
    folder = SourceFolder(str(Path(photos).resolve()), [], entries, schema=schema,
                          fields=ListedFields([{"txt": captions[key]} for key in keys], coco=False),
                          unlabelled=True)
    with _source(folder, "benchmark stand-in: webdataset captions"):
        return datakit.convert(photos, store)
