"""Exporting a field store as COCO: ``datakit export STORE DIR --format coco``.

The images go under their source paths (as a folder export writes them;
raw pixels as PNG), and ``DIR/annotations.json`` describes them as a COCO
``instances`` file does: ``images`` (``id``, ``file_name``, ``width``,
``height``), ``annotations`` (:mod:`datakit.tools.export.annotations`: one per
box, with its mask and keypoints) and ``categories`` (the boxes field's own,
or ``{"id", "name"}`` of each label used when it lists none). A store with
captions gets ``DIR/captions.json`` too, shaped as COCO's ``captions`` files:
the same ``images``, and ``annotations`` of ``{"id", "image_id",
"caption"}``. So ``datakit convert DIR STORE --coco DIR/annotations.json
--coco DIR/captions.json`` makes the same store again.

Which field is what (:func:`coco_plan`): an ``int`` field ``image_id`` gives
the images' ids (else the record's index + 1); the first boxes field on the
primary image, with the instance masks and keypoints that belong to it, the
annotations; the ``captions`` (or ``caption``) field, else the first ``str``
field, the captions (a ``json`` caption field holds a list of them); any
other ``int``, ``float``, ``str`` and ``json`` field a key of its image's
entry. What COCO has no place for (arrays, further images, label maps,
masks or keypoints of no boxes, a second boxes field, the class label) is
left out and listed in the report's ``left_out``, never dropped silently.

Both files are written whole, after every image, from lists kept in
temporary files as the records are read (memory stays flat). Image ids and
annotation ids must be unique, as COCO's tools index them by id; a store
whose are not is refused, naming the id.
"""

from __future__ import annotations

import array
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from datakit.errors import ExportError
from datakit.format.fields.base import FieldError
from datakit.format.fields.schema import Schema
from datakit.format.fields.values import field_values
from datakit.format.records import Record, record_key
from datakit.stores.contract import StoreReader, StoreSpec
from datakit.tools.export.annotations import Instances, instance_fields, instances
from datakit.tools.export.folder import PARTIAL_PREFIX, place

__all__ = ["ANNOTATIONS", "CAPTIONS", "CocoPlan", "CocoTally", "coco_plan", "write_coco"]

ANNOTATIONS = "annotations.json"
CAPTIONS = "captions.json"
_ENTRY_KEYS = frozenset({"id", "file_name", "width", "height"})
_KEPT_TYPES = ("int", "float", "str", "json")


@dataclass(frozen=True)
class CocoPlan:
    """Which of a store's fields go where in its COCO export.

    Attributes:
        instances: the fields of the annotations (boxes, masks, keypoints), or None.
        image_id: the ``int`` field of the images' ids, or None (the record's index + 1).
        captions: the caption field, or None.
        kept: the fields kept as keys of each image's entry.
        left_out: the fields COCO has no place for, each with why.
    """

    instances: Instances | None
    image_id: str | None
    captions: str | None
    kept: tuple[str, ...]
    left_out: dict[str, str]

    @property
    def read(self) -> list[str]:
        """The fields each record is decoded for."""
        names = [*(self.instances.names if self.instances else []), *self.kept]
        return names + [name for name in (self.image_id, self.captions) if name is not None]


def coco_plan(schema: Schema, where: str) -> CocoPlan:
    """Where each field of ``schema`` goes (see the module's docstring).

    Raises:
        ExportError: the store has nothing COCO holds: no boxes (with their instance masks and
            keypoints) and no captions.
    """
    groups = [group for group in instance_fields(schema)
              if all(schema.canvas_field(spec) is schema.primary_image
                     for spec in (group.boxes, group.masks, group.keypoints) if spec is not None)]
    chosen = next((group for group in groups if group.boxes is not None), None)
    image_id = next((spec.name for spec in schema.fields if spec.name == "image_id" and spec.type == "int"),
                    None)
    captions = _caption_field(schema)
    if chosen is None and captions is None:
        raise ExportError(f"{where} holds nothing a COCO file keeps: no boxes (with their masks and "
                          f"keypoints) and no captions (its fields: {', '.join(schema.names)}); export it as "
                          "a folder or as webdataset")
    used = {*(chosen.names if chosen else []), *(name for name in (image_id, captions) if name)}
    kept, left_out = [], {}
    for spec in schema.fields:
        if spec is schema.primary_image or spec.name in used:
            continue
        if spec.type in _KEPT_TYPES and spec.name not in _ENTRY_KEYS:
            kept.append(spec.name)
        else:
            left_out[spec.name] = _why_left_out(spec.type, spec.name)
    return CocoPlan(chosen, image_id, captions, tuple(kept), left_out)


def _caption_field(schema: Schema) -> str | None:
    for name in ("captions", "caption"):
        if any(spec.name == name and spec.type in ("str", "json") for spec in schema.fields):
            return name
    return next((spec.name for spec in schema.fields if spec.type == "str"), None)


def _why_left_out(kind: str, name: str) -> str:
    if kind == "label":
        return "COCO has no class per image; export as a folder or as webdataset to keep it"
    if kind in _KEPT_TYPES:
        return f"an image entry's own key is {name!r}; export as webdataset to keep it"
    if kind in ("boxes", "masks", "keypoints"):
        return ("COCO keeps one list of instances per image, of the first boxes field on the image with its "
                "instance masks and keypoints; export as webdataset to keep it")
    return f"COCO has no place for {kind} fields; export as webdataset to keep it"


@dataclass
class CocoTally:
    """What :func:`write_coco` wrote: image files (as a folder export counts them) and annotations."""

    written: int = 0
    kept: int = 0
    rewritten: int = 0
    total_bytes: int = 0
    annotations: int = 0
    captions: int = 0
    files: list[str] = field(default_factory=list)


def write_coco(reader: StoreReader, spec: StoreSpec, target: str, plan: CocoPlan,
               images: Iterator[tuple[int, Record, str, bytes]], resumed: bool,
               progress: Callable[[int, int], None] | None) -> CocoTally:
    """Write each image (keeping, when ``resumed``, one already whole) and then the annotation files.

    Args:
        images: ``(index, record, file name, file bytes)`` of every record, in order.

    Raises:
        ExportError: a value COCO cannot take (naming the record and the field), or ids given twice.
    """
    schema = reader.manifest.sample_fields
    tally = CocoTally()
    lists = _Lists(target, plan.captions is not None)
    ids = _Ids()
    try:
        for index, record, name, payload in images:
            outcome = place(os.path.join(target, *name.split("/")), payload, str(index), resumed)
            tally.kept += outcome == "kept"
            tally.written += outcome != "kept"
            tally.rewritten += outcome == "rewritten"
            tally.total_bytes += len(payload)
            _add_record(lists, ids, plan, schema, index, record, name, spec.describe())
            if progress is not None:
                progress(tally.written + tally.kept, len(reader))
        ids.check(spec.describe())
        tally.files = lists.finish(_categories(plan, lists.labels, lists.with_keypoints), spec.describe())
    finally:
        lists.close()
    tally.annotations, tally.captions = lists.annotations.count, lists.captions.count if lists.captions else 0
    return tally


def _add_record(lists: _Lists, ids: _Ids, plan: CocoPlan, schema: Schema, index: int, record: Record,
                name: str, where: str) -> None:
    """Add one record's image entry, annotations and captions to the lists."""
    key = record_key(index)
    values = field_values(record, schema, key, plan.read)
    image_id = values.get(plan.image_id) if plan.image_id is not None else index + 1
    if image_id is None:
        raise ExportError(f"{where}: record {key} has no {plan.image_id!r}, which a COCO image needs as its "
                          "id")
    entry = {"id": image_id, "file_name": name, "width": record.header.width, "height": record.header.height}
    entry.update((kept, values[kept]) for kept in plan.kept if values.get(kept) is not None)
    lists.images.add(entry)
    ids.images.append(image_id)
    try:
        found = instances(plan.instances, values) if plan.instances is not None else []
        captions = _captions(values.get(plan.captions)) if plan.captions is not None else []
    except FieldError as exc:
        raise ExportError(f"{where}: record {key} (image id {image_id}): {exc}") from None
    for annotation in found:
        if "id" not in annotation:
            annotation["id"] = len(ids.annotations) + 1
        ids.annotations.append(annotation["id"])
        ids.owners.append(image_id)
        lists.annotations.add({"id": annotation.pop("id"), "image_id": image_id, **annotation})
        lists.labels.add(annotation.get("category_id"))
        if annotation.get("num_keypoints"):
            lists.with_keypoints.add(annotation.get("category_id"))
    for caption in captions:
        assert lists.captions is not None
        lists.captions.add({"id": lists.captions.count + 1, "image_id": image_id, "caption": caption})


def _captions(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise FieldError("a caption field holds a caption or a list of them (text), not "
                     f"{json.dumps(value)[:60]}")


def _categories(plan: CocoPlan, labels: set[int | None], with_keypoints: set[int | None]) -> list[Any]:
    """The boxes field's categories, or one per label used; with the keypoints' names and skeleton on the
    categories of the instances that have keypoints, when the categories do not give them."""
    group = plan.instances
    given = group.boxes.options["categories"] if group is not None and group.boxes is not None else None
    categories = [dict(category) for category in given] if given is not None else \
        [{"id": label, "name": str(label)} for label in sorted(each for each in labels if each is not None)]
    points = group.keypoints if group is not None else None
    if points is not None and points.options["names"] is not None and not any(
            "keypoints" in category for category in categories):
        for category in categories:
            if category["id"] in with_keypoints:
                category["keypoints"] = list(points.options["names"])
                category["skeleton"] = points.options["skeleton"] or []
    return categories


class _Part:
    """One JSON list, written an item at a time to a temporary file of the export's folder."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stream: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115  closed by close()
        self.count = 0

    def add(self, item: Any) -> None:
        self.stream.write(("," if self.count else "") + "\n" + json.dumps(item, ensure_ascii=False))
        self.count += 1

    def close(self) -> None:
        if not self.stream.closed:
            self.stream.close()
        if os.path.lexists(self.path):
            os.remove(self.path)


class _Lists:
    """The lists of the annotation files, kept in temporary files until every record is read."""

    def __init__(self, target: str, captions: bool) -> None:
        self.target = target
        self.images = _Part(os.path.join(target, PARTIAL_PREFIX + "images"))
        self.annotations = _Part(os.path.join(target, PARTIAL_PREFIX + "annotations"))
        self.captions = _Part(os.path.join(target, PARTIAL_PREFIX + "captions")) if captions else None
        self.labels: set[int | None] = set()
        self.with_keypoints: set[int | None] = set()

    def finish(self, categories: list[Any], where: str) -> list[str]:
        """Write ``annotations.json`` (and ``captions.json``) whole; the paths written."""
        for part in (self.images, self.annotations, self.captions):
            if part is not None:
                part.stream.close()
        info = {"description": f"exported by datakit from {where}"}
        written = [self._assemble(ANNOTATIONS, info, self.annotations, {"categories": categories})]
        if self.captions is not None:
            written.append(self._assemble(CAPTIONS, info, self.captions, {}))
        return written

    def _assemble(self, name: str, info: Any, annotations: _Part, tail: dict[str, Any]) -> str:
        location = os.path.join(self.target, name)
        partial = os.path.join(self.target, PARTIAL_PREFIX + name)
        with open(partial, "w", encoding="utf-8") as out:
            out.write(f'{{"info": {json.dumps(info, ensure_ascii=False)}')
            for key, part in (("images", self.images), ("annotations", annotations)):
                out.write(f', "{key}": [')
                with open(part.path, encoding="utf-8") as stream:
                    shutil.copyfileobj(stream, out)
                out.write("\n]")
            out.writelines(f', "{key}": {json.dumps(value, ensure_ascii=False)}'
                           for key, value in tail.items())
            out.write("}\n")
        os.replace(partial, location)
        return location

    def close(self) -> None:
        for part in (self.images, self.annotations, self.captions):
            if part is not None:
                part.close()


class _Ids:
    """Every image id and annotation id written (and each annotation's image), to find one given twice."""

    def __init__(self) -> None:
        self.images = array.array("q")
        self.annotations = array.array("q")
        self.owners = array.array("q")

    def check(self, where: str) -> None:
        """Raises ExportError naming an image id or an annotation id that is given twice."""
        for what, ids in (("image id", self.images), ("annotation id", self.annotations)):
            found = np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, np.int64)
            values, counts = np.unique(found, return_counts=True)
            if (counts > 1).any():
                twice = int(values[counts > 1][0])
                owners = ""
                if what == "annotation id":
                    images = np.frombuffer(self.owners, dtype=np.int64)[found == twice][:2].tolist()
                    owners = f" (in the images of ids {images[0]} and {images[1]})"
                raise ExportError(f"{where}: {what} {twice} is given twice{owners}; COCO's tools index "
                                  f"{what}s, so the file would lose one. Nothing was written to "
                                  f"{ANNOTATIONS}")

