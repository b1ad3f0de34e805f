"""Field stores for tests, made through the conversion pipeline by a test-only source.

The sources that give users field stores (COCO, WebDataset members, field
files, Hugging Face columns) all map their input onto the same core: a
``SourceFolder`` with a ``schema`` and an ``EntryFields`` that hands the
reader processes each entry's values. :func:`field_store` does exactly that
with values a test gives, so inspect, export and the datasets can be tested on
field stores without any of those sources:

    schema, samples = coco_like(8)
    field_store(tmp_path / "images", tmp_path / "store", schema, samples)

:func:`coco_like` and :func:`wds_like` make samples shaped as the COCO and
WebDataset sources make them; :func:`stored_fields` reads a store's fields
back as plain, comparable Python values.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import datakit
from datakit.conversion import pipeline
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import MasksValue, SemanticMask, runs_of
from datakit.format.fields.schema import Schema
from datakit.format.fields.values import field_values
from datakit.format.records import NO_LABEL, decode_record, record_key, seal_fields_record
from datakit.stores import given_options, resolve_store

__all__ = ["FieldSample", "GivenFields", "field_store", "image_bytes", "coco_like", "wds_like",
           "COCO_CATEGORIES", "KEYPOINT_NAMES", "WDS_CLASSES", "stored_fields", "plain", "replace_value"]


@dataclass(frozen=True)
class FieldSample:
    """One sample of a test source: its image file (``path`` under the root, ``image`` its bytes), its
    class (``NO_LABEL`` in a store without labels) and its other fields' values (the core's types)."""

    path: str
    image: bytes
    values: dict[str, Any] = field(default_factory=dict)
    label: int = NO_LABEL


class GivenFields:
    """The ``EntryFields`` of the test source: each entry's values, by its position (picklable)."""

    def __init__(self, values: Sequence[Mapping[str, Any]]) -> None:
        self._values = [dict(each) for each in values]

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        return self._values[entry.location[0]]

    def close(self) -> None:
        """Nothing opened."""


def field_store(root: Path, dest: str | os.PathLike[str], schema: Schema, samples: Sequence[FieldSample],
                classes: Sequence[str] = (), kind: str = "folder",
                **convert: Any) -> datakit.ConversionReport:
    """Write the samples' images under ``root`` and convert them, with their fields, into ``dest``."""
    entries = []
    for position, sample in enumerate(samples):
        path = root / sample.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(sample.image)
        entries.append(SourceEntry(sample.path, sample.label, location=(position,)))
    folder = SourceFolder(str(root.resolve()), list(classes), entries, kind=kind, schema=schema,
                          fields=GivenFields([sample.values for sample in samples]),
                          unlabelled=schema.label is None)

    def scan(*args: Any, **kwargs: Any) -> tuple[SourceFolder, str]:
        return folder, "test fields"

    convert.setdefault("workers", 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "scan_source", scan)
        return datakit.convert(root, dest, **convert)


def image_bytes(width: int, height: int, seed: int, format: str = "JPEG",
                colour: tuple[int, int, int] | None = None) -> bytes:
    """An image file: smooth gradients with noise (photo-like), or one ``colour``."""
    if colour is not None:
        pixels = np.empty((height, width, 3), dtype=np.uint8)
        pixels[:] = colour
    else:
        rng = np.random.default_rng(seed)
        ys, xs = np.mgrid[0:height, 0:width]
        base = np.stack([xs * 255 // max(1, width - 1), ys * 255 // max(1, height - 1),
                         (xs + ys) * 127 // max(1, width + height)], axis=2)
        pixels = np.clip(base + rng.integers(-20, 21, size=base.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=format, **({"quality": 90} if format == "JPEG" else {}))
    return buffer.getvalue()


KEYPOINT_NAMES = ["nose", "left_eye", "right_eye"]
COCO_CATEGORIES = [
    {"id": 1, "name": "person", "supercategory": "person", "keypoints": KEYPOINT_NAMES,
     "skeleton": [[1, 2], [1, 3]]},
    {"id": 3, "name": "car", "supercategory": "vehicle"},
]
"""Categories as a COCO file gives them: ids that are not positions, a person with keypoints."""

_COCO_SIZES = ((64, 48), (80, 60), (48, 64))


def coco_schema(captions: bool = True) -> Schema:
    """The schema the COCO source gives an instances + person_keypoints (+ captions) conversion."""
    fields: list[dict[str, Any]] = [
        {"name": "image", "type": "image"},
        {"name": "image_id", "type": "int"},
        {"name": "boxes", "type": "boxes", "format": "XYWH", "dtype": "float64",
         "extras": ["iscrowd", "area", "ids"], "categories": COCO_CATEGORIES},
        {"name": "masks", "type": "masks", "kind": "instances", "boxes": "boxes"},
        {"name": "keypoints", "type": "keypoints", "names": KEYPOINT_NAMES, "skeleton": [[1, 2], [1, 3]],
         "boxes": "boxes"},
    ]
    if captions:
        fields.append({"name": "captions", "type": "json"})
    return Schema.from_json(fields)


def coco_like(count: int, captions: bool = True) -> tuple[Schema, list[FieldSample]]:
    """``count`` samples as the COCO source makes them: images of three sizes, 0 to 5 instances each
    (every fourth image has none), rectangles as masks, a crowd instance, keypoints on persons, captions."""
    samples = []
    next_id = 900
    for index in range(count):
        width, height = _COCO_SIZES[index % len(_COCO_SIZES)]
        rng = np.random.default_rng(index)
        instances = 0 if index % 4 == 0 else 1 + index % 5
        corners = rng.integers(0, [width // 2, height // 2], size=(instances, 2))
        sizes = rng.integers(2, [width // 2, height // 2], size=(instances, 2))
        boxes = np.concatenate([corners, sizes], axis=1).astype(np.float64) + 0.25
        labels = np.where(np.arange(instances) % 2 == 0, 1, 3)
        masks = np.zeros((instances, height, width), dtype=np.uint8)
        for row, (x, y, w, h) in enumerate(np.concatenate([corners, sizes], axis=1)):
            masks[row, y:y + h, x:x + w] = 1
            masks[row, y, x] = 0  # not quite a rectangle
        points = np.zeros((instances, len(KEYPOINT_NAMES), 3), dtype=np.float32)
        for row in np.flatnonzero(labels == 1):
            x, y, w, h = boxes[row]
            points[row] = [[x + 1, y + 1, 2], [x + w / 2, y + 1, 1], [0, 0, 0]]
        ids = np.arange(next_id, next_id + instances)
        next_id += instances + 3
        value = BoxesValue(boxes, labels=labels, iscrowd=(np.arange(instances) == 2).astype(np.uint8),
                           area=masks.sum(axis=(1, 2)).astype(np.float64), ids=ids)
        image_id = 100 + 7 * index
        values: dict[str, Any] = {
            "image_id": image_id, "boxes": value,
            "masks": MasksValue(height, width, [runs_of(mask) for mask in masks]), "keypoints": points}
        if captions:
            values["captions"] = [f"image {index}, caption {number}: a photo \u00e9t\u00e9"
                                  for number in range(1 + index % 3)]
        samples.append(FieldSample(f"{image_id:012d}.jpg", image_bytes(width, height, index), values))
    return coco_schema(captions), samples


def wds_schema() -> Schema:
    """The schema the WebDataset source gives shards of ``.jpg``, ``.cls``, ``.json``, ``.npy``, ``.txt``."""
    return Schema.from_json([
        {"name": "image", "type": "image"}, {"name": "label", "type": "label"},
        {"name": "json", "type": "json"},
        {"name": "npy", "type": "ndarray", "dtype": "float32", "shape": [3]},
        {"name": "txt", "type": "str"}])


WDS_CLASSES = ["0", "1", "2"]


def wds_like(count: int) -> tuple[Schema, list[FieldSample]]:
    """``count`` image-text samples as the WebDataset source makes them, with a class each."""
    samples = []
    for index in range(count):
        values = {"json": {"index": index, "tags": ["a", "b"][: index % 3], "score": index / 3},
                  "npy": np.arange(3, dtype=np.float32) * index - 0.5,
                  "txt": f"sample {index}: a caption \u00e9t\u00e9"}
        samples.append(FieldSample(f"shard-000/{index:04d}.jpg", image_bytes(40, 30, index), values,
                                   label=index % len(WDS_CLASSES)))
    return wds_schema(), samples


def plain(value: Any) -> Any:
    """A field's value as plain Python that ``==`` compares (arrays as their dtype and lists)."""
    if isinstance(value, ImageValue):
        return {"kind": int(value.kind), "size": (value.width, value.height), "bytes": bytes(value.payload)}
    if isinstance(value, BoxesValue):
        return {name: plain(getattr(value, name)) for name in ("coords", "labels", "iscrowd", "area", "ids")}
    if isinstance(value, MasksValue):
        return {"size": (value.height, value.width), "dense": value.dense().tolist()}
    if isinstance(value, SemanticMask):
        return {"label map": value.dense().tolist()}
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.tolist())
    return value


def stored_fields(location: str | os.PathLike[str], collection: str | None = None,
                  image: bool = True) -> list[dict[str, Any]]:
    """Every record's fields as :func:`plain` values, and its label's class name under the label field's
    name (the primary image left out without ``image``)."""
    spec = resolve_store(location, given_options(collection=collection))
    with spec.open_reader() as reader:
        manifest = reader.manifest
        schema = manifest.sample_fields
        labels = reader.labels()
        found = []
        for index, data in enumerate(reader.get_many(range(len(reader)))):
            values = field_values(decode_record(data, record_key(index)), schema, record_key(index))
            sample = {name: plain(value) for name, value in values.items()
                      if image or name != schema.primary_image.name}
            if schema.label is not None:
                sample[schema.label.name] = manifest.classes[int(labels[index])]
            found.append(sample)
    return found


def replace_value(store: Path, index: int, name: str, data: bytes | None) -> None:
    """Rewrite record ``index`` of the LMDB ``store`` with ``data`` as the stored bytes of field ``name``
    (a well-formed record whose checksum holds: what only a field's own checks can refuse)."""
    import lmdb

    key = record_key(index)
    with resolve_store(store).open_reader() as reader:
        schema = reader.manifest.sample_fields
        record = decode_record(reader.get_many([index])[0], key)
    stored = [None if value is None else bytes(value) for value in record.stored]
    stored[[spec.name for spec in schema.stored].index(name)] = data
    header = record.header
    sealed = seal_fields_record(stored[0] or b"", stored[1:], kind=header.kind, label=header.label,
                                width=header.width, height=header.height, channels=header.channels)
    with lmdb.open(str(store), subdir=True) as env, env.begin(write=True) as txn:
        txn.put(key.encode(), bytes(sealed))
