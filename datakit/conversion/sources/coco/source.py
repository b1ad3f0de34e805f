"""A COCO set as a conversion source: ``datakit convert IMAGES_DIR STORE --coco FILE [--coco FILE ...]``.

The entries are the images the annotation files list, sorted by id as
torchvision's ``CocoDetection`` sorts them (``ids = sorted(coco.imgs)``), each
the file ``file_name`` under ``IMAGES_DIR``, read as an image folder's files
are. The store has no class label: each sample is the image, its
``image_id``, and the fields the files give (:func:`coco_schema`): ``boxes``
with their category ids, ``iscrowd``, ``area`` and annotation ``ids``
(instances or keypoints files), ``masks`` (when an annotation has a
segmentation), ``keypoints`` (when a category names points), ``captions``
(captions files). So ``LMDBDataset(store, target_format="torchvision-detection")``
gives what ``wrap_dataset_for_transforms_v2(CocoDetection(IMAGES_DIR, FILE))``
gives, pair for pair.

Images without annotations are stored (valid negatives) and counted
(:attr:`CocoFolder.unannotated`); an annotation whose image no file lists,
and an image whose ``file_name`` leaves ``IMAGES_DIR``, are listed as skipped.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from datakit.conversion.sources.coco.masks import needs_pycocotools, require_pycocotools
from datakit.conversion.sources.coco.parse import CocoSet, load_coco
from datakit.conversion.sources.coco.values import CocoFields, CocoLayout, pack
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.errors import SourceError
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.schema import Schema
from datakit.format.records import NO_LABEL

__all__ = ["COCO_RULES", "CocoFolder", "scan_coco", "coco_schema"]

COCO_RULES = "coco "
"""Prefix of a COCO conversion's scan rules: the SHA-256 of its annotation files follows."""


@dataclass
class CocoFolder(SourceFolder):
    """A :class:`~datakit.conversion.sources.entries.SourceFolder` of a COCO set.

    Attributes:
        annotation_files: the annotation files, absolute, in the order given.
        unannotated: images without any annotation or caption (stored: negatives).
    """

    annotation_files: list[str] = field(default_factory=list)
    unannotated: int = 0


def scan_coco(root: str, files: Sequence[str]) -> tuple[CocoFolder, str]:
    """The entries of the images under ``root`` that the annotation ``files`` list, and the scan rules.

    Raises:
        SourceError: ``root`` is not a folder; a file is unreadable, not COCO, or disagrees with
            another; no image is listed; polygons without pycocotools.
    """
    if not os.path.isdir(root):
        raise SourceError(f"{root} is not a folder: with COCO annotation files, SRC is the folder of the "
                          "images they name (their file_name)")
    found = load_coco([os.path.abspath(os.path.expanduser(os.fspath(path))) for path in files])
    if not found.images:
        raise SourceError(f"{', '.join(found.files)}: no image is listed (\"images\" is empty)")
    layout, schema = coco_schema(found)
    entries: list[SourceEntry] = []
    rejected: list[tuple[str, str]] = []
    for image_id in sorted(found.images):
        image = found.images[image_id]
        problem = _path_problem(image.file_name)
        if problem:
            rejected.append((image.file_name, f"image {image_id} of {image.file}: {problem}; not stored"))
        else:
            entries.append(SourceEntry(posixpath.normpath(image.file_name), NO_LABEL, location=(image_id,)))
    rejected.extend((f"{path}: annotation {annotation_id}", f"its image_id {image_id} is no image of the "
                     "annotation files; not stored") for path, annotation_id, image_id in found.orphans)
    packed = {image_id: pack(found.annotations.get(image_id, []), found.captions.get(image_id, []))
              for image_id in found.images if image_id in found.annotations or image_id in found.captions}
    unannotated = sum(entry.location[0] not in packed for entry in entries)
    folder = CocoFolder(root, [], entries, kind="coco", rejected=rejected, unlabelled=True, schema=schema,
                        fields=CocoFields(layout, packed), annotation_files=found.files,
                        unannotated=unannotated)
    return folder, f"{COCO_RULES}sha256:{found.digest}"


def coco_schema(found: CocoSet) -> tuple[CocoLayout, Schema]:
    """The fields of a store of ``found``, and what reading each image's values needs.

    Raises:
        SourceError: categories name different keypoints, a category datakit cannot keep, or
            polygons without pycocotools.
    """
    masked = [annotation for annotations in found.annotations.values() for annotation in annotations
              if annotation.get("segmentation") not in (None, [])]
    polygons = next((each for each in masked if needs_pycocotools(each["segmentation"])), None)
    if polygons is not None:
        require_pycocotools(found.files[polygons["file"]])
    names, skeleton, category = _keypoint_names(found)
    fields = [FieldSpec("image", "image"), FieldSpec("image_id", "int")]
    if found.instances:
        fields.append(FieldSpec("boxes", "boxes", options={
            "format": "XYWH", "dtype": "float64", "labels": "labels", "extras": ["iscrowd", "area", "ids"],
            "categories": found.categories}))
        if masked:
            fields.append(FieldSpec("masks", "masks", options={"kind": "instances", "boxes": "boxes"}))
        if names:
            fields.append(FieldSpec("keypoints", "keypoints", options={
                "names": names, "skeleton": skeleton, "boxes": "boxes"}))
    if found.captioned:
        fields.append(FieldSpec("captions", "json"))
    try:
        schema = Schema.of(fields)
    except FieldError as exc:
        raise SourceError(f"{', '.join(found.files)}: {exc}") from None
    ids = frozenset(category["id"] for category in found.categories)
    layout = CocoLayout(tuple(found.files), found.instances, bool(masked) and found.instances,
                        found.captioned, ids, len(names) if found.instances else 0, category)
    return layout, schema


def _keypoint_names(found: CocoSet) -> tuple[list[str], Any, str]:
    """The point names and skeleton of the categories that have keypoints (``person``), and the
    category's name; no names when none has. One keypoints field holds one kind of points.

    Raises:
        SourceError: two categories name different points.
    """
    named = [category for category in found.categories if category.get("keypoints")]
    if not named:
        return [], None, ""
    first = named[0]
    for other in named[1:]:
        if (other["keypoints"], other.get("skeleton")) != (first["keypoints"], first.get("skeleton")):
            raise SourceError(f"categories {first['name']!r} and {other['name']!r} name different keypoints; "
                              "datakit keeps one kind of points per store (convert them apart)")
    names = first["keypoints"]
    if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
        raise SourceError(f"category {first['name']!r}'s \"keypoints\" is not a list of point names")
    return names, first.get("skeleton"), first["name"]


def _path_problem(name: str) -> str:
    """Why an image's ``file_name`` names no file inside the images folder (``""``: it does)."""
    if "\x00" in name:
        return f"its file_name {name!r:.60} holds a NUL character, which no file name can hold"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return f"its file_name {name!r:.60} is absolute; file names are relative to the images folder"
    if ".." in name.split("/"):
        return f"its file_name {name!r:.60} climbs out of the images folder with '..'"
    if posixpath.normpath(name) == ".":
        return f"its file_name {name!r:.60} names the images folder itself"
    return ""
