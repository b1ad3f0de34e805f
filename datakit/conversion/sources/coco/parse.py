"""COCO annotation files read and merged: their images by id, their categories, each image's annotations.

Each file is loaded once (``json.load``: the files are COCO's own JSON). A file
that is not a COCO annotation object, an image or an annotation without its
integer ids, two files naming one image id with another file or size, or one
category id with another name, is refused as a whole (:class:`~datakit.errors.SourceError`
naming the file and the id): what it means cannot be guessed. Several files of
the same images merge: ``instances_*.json`` gives boxes and segmentations,
``person_keypoints_*.json`` the same annotations (the same ids) with their
keypoints, ``captions_*.json`` captions. An annotation's own content (its
box, category, polygons, keypoints) is checked when its image is read
(:mod:`datakit.conversion.sources.coco.values`), where a bad one skips that
image alone, named.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from datakit.errors import SourceError

__all__ = ["INSTANCE_KEYS", "CocoImage", "CocoSet", "load_coco"]

INSTANCE_KEYS = ("id", "image_id", "category_id", "bbox", "iscrowd", "area", "segmentation", "keypoints")
"""What datakit keeps of an instance annotation (``num_keypoints`` follows from ``keypoints``)."""


@dataclass(frozen=True)
class CocoImage:
    """One image of the files' ``images``: its id, its file under the images folder, the size the
    files give (``None`` where none does), and the first file that lists it."""

    id: int
    file_name: str
    width: int | None
    height: int | None
    file: str


@dataclass
class CocoSet:
    """The annotation files, merged.

    Attributes:
        files: the files, absolute, in the order given.
        digest: the SHA-256 of their bytes, in that order (a resume must read the same).
        images: every image, by id.
        categories: every category, in the order first listed; one with the same
            id in several files is the union of their keys.
        annotations: per image id, its instance annotations (the :data:`INSTANCE_KEYS`
            they have, and ``file``: the position in ``files`` of the first that lists it)
            in file order, as pycocotools' ``getAnnIds`` gives them.
        captions: per image id, its captions, in file order.
        orphans: ``(file, annotation id, image id)`` of each annotation whose image no file lists.
        instances: some file lists categories or instance annotations (it is an instances or
            keypoints file), so the store keeps boxes.
        captioned: some file lists captions (a captions file), so the store keeps them.
    """

    files: list[str]
    digest: str = ""
    images: dict[int, CocoImage] = field(default_factory=dict)
    categories: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    captions: dict[int, list[str]] = field(default_factory=dict)
    orphans: list[tuple[str, int, int]] = field(default_factory=list)
    instances: bool = False
    captioned: bool = False


def load_coco(paths: Sequence[str]) -> CocoSet:
    """Read and merge the annotation files ``paths`` (absolute).

    Raises:
        SourceError: a file cannot be read, is not a COCO annotation object, or disagrees with
            another (the message names the file, the id and what differs).
    """
    merged = _Merger(CocoSet(list(paths)))
    digest = hashlib.sha256()
    for position, path in enumerate(paths):
        raw = _read(path)
        digest.update(hashlib.sha256(raw).digest())
        merged.add(position, _parse(raw, path))
    merged.finish()
    merged.found.digest = digest.hexdigest()
    return merged.found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as exc:
        raise SourceError(f"cannot read the COCO annotation file {path}: {exc.strerror or exc}") from None


def _parse(raw: bytes, path: str) -> dict[str, Any]:
    """The file's top-level object, with its ``images`` (and, when present, ``annotations`` and
    ``categories``) lists."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SourceError(f"{path} is not a COCO annotation file: it is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SourceError(f"{path} is not a COCO annotation file: a JSON object with an \"images\" list "
                          "(and \"annotations\", \"categories\")")
    for key in ("annotations", "categories"):
        if not isinstance(data.get(key, []), list):
            raise SourceError(f"{path}: \"{key}\" is not a list, as a COCO annotation file has it")
    return data


class _Merger:
    """Merges the files one at a time into :attr:`found`."""

    def __init__(self, found: CocoSet) -> None:
        self.found = found
        self.names: dict[str, int] = {}  # file name -> image id
        self.by_id: dict[int, dict[str, Any]] = {}  # instance annotations
        self.categories: dict[int, dict[str, Any]] = {}
        self.category_file: dict[int, str] = {}
        self.captions: dict[int, list[tuple[str, int, str]]] = {}  # image id -> (file, id, caption)

    def add(self, position: int, data: dict[str, Any]) -> None:
        path = self.found.files[position]
        for index, item in enumerate(data["images"]):
            self._image(item, index, path)
        for item in data.get("categories", []):
            self._category(item, path)
        caption_ids: set[int] = set()
        for index, item in enumerate(data.get("annotations", [])):
            annotation_id, image_id = _ids(item, index, path)
            if "caption" in item:
                self._caption(item, annotation_id, image_id, path, caption_ids)
            else:
                self._instance(item, annotation_id, image_id, position)
        self.found.instances |= "categories" in data or len(self.by_id) > 0

    def _image(self, item: Any, index: int, path: str) -> None:
        if not isinstance(item, dict) or not _integer(item.get("id")):
            raise SourceError(f"{path}: images[{index}] has no integer \"id\"")
        image_id, name = item["id"], item.get("file_name")
        if not isinstance(name, str) or not name:
            raise SourceError(f"{path}: image {image_id} has no \"file_name\"")
        width, height = item.get("width"), item.get("height")
        if width is None or height is None:  # pycocotools and torchvision need no size: the file's own
            width = height = None
        elif not (type(width) is int and type(height) is int and width > 0 and height > 0):
            raise SourceError(f"{path}: image {image_id}'s \"width\" and \"height\" are not positive "
                              "integers")
        image = CocoImage(image_id, name, width, height, path)
        known = self.found.images.get(image_id)
        if known is None:
            same = posixpath.normpath(name)
            if self.names.setdefault(same, image_id) != image_id:
                raise SourceError(f"{path}: images {self.names[same]} and {image_id} both name the file "
                                  f"{same}; each image is one file")
            self.found.images[image_id] = image
            return
        if known.file_name != name or not _same_size(known, image):
            raise SourceError(f"image {image_id} is {_shown(known)} in {known.file}, but {_shown(image)} in "
                              f"{path}: the files do not describe the same images")
        if known.width is None:
            self.found.images[image_id] = CocoImage(image_id, name, image.width, image.height, known.file)

    def _category(self, item: Any, path: str) -> None:
        if not (isinstance(item, dict) and _integer(item.get("id")) and isinstance(item.get("name"), str)):
            raise SourceError(f"{path}: a category is an object with an integer \"id\" and a \"name\", not "
                              f"{item!r:.60}")
        known = self.categories.get(item["id"])
        if known is None:
            self.categories[item["id"]] = dict(item)
            self.category_file[item["id"]] = path
            self.found.categories.append(self.categories[item["id"]])
            return
        for key in sorted(set(known) & set(item)):
            if known[key] != item[key]:
                raise SourceError(f"category {item['id']}'s \"{key}\" is {known[key]!r:.40} in "
                                  f"{self.category_file[item['id']]}, but {item[key]!r:.40} in {path}")
        known.update(item)

    def _caption(self, item: dict[str, Any], annotation_id: int, image_id: int, path: str,
                 seen: set[int]) -> None:
        if not isinstance(item["caption"], str):
            raise SourceError(f"{path}: annotation {annotation_id}'s \"caption\" is not text")
        if annotation_id in seen:
            raise SourceError(f"{path}: annotation {annotation_id} is listed twice")
        seen.add(annotation_id)
        self.found.captioned = True
        self.captions.setdefault(image_id, []).append((path, annotation_id, item["caption"]))

    def _instance(self, item: dict[str, Any], annotation_id: int, image_id: int, position: int) -> None:
        kept = {key: item[key] for key in INSTANCE_KEYS if key in item}
        known = self.by_id.get(annotation_id)
        if known is None:
            kept["file"] = position
            self.by_id[annotation_id] = kept
            self.found.annotations.setdefault(image_id, []).append(kept)
            return
        path, first = self.found.files[position], self.found.files[known["file"]]
        if known["file"] == position:
            raise SourceError(f"{path}: annotation {annotation_id} is listed twice")
        for key in INSTANCE_KEYS:
            if key in known and key in kept and known[key] != kept[key]:
                raise SourceError(f"annotation {annotation_id}'s \"{key}\" is {known[key]!r:.40} in {first}, "
                                  f"but {kept[key]!r:.40} in {path}: the files do not describe the same "
                                  "annotations")
        known.update(kept)

    def finish(self) -> None:
        """Set aside the annotations of images no file lists (a later file may list an earlier one's)."""
        found = self.found
        for image_id in [key for key in found.annotations if key not in found.images]:
            for annotation in found.annotations.pop(image_id):
                found.orphans.append((found.files[annotation["file"]], annotation["id"], image_id))
        for image_id, captions in self.captions.items():
            if image_id in found.images:
                found.captions[image_id] = [caption for _, _, caption in captions]
            else:
                found.orphans.extend((path, annotation_id, image_id) for path, annotation_id, _ in captions)


def _ids(item: Any, index: int, path: str) -> tuple[int, int]:
    if not isinstance(item, dict) or not _integer(item.get("id")):
        raise SourceError(f"{path}: annotations[{index}] has no integer \"id\"")
    if not _integer(item.get("image_id")):
        raise SourceError(f"{path}: annotation {item['id']} has no integer \"image_id\"")
    return item["id"], item["image_id"]


def _integer(value: Any) -> bool:
    """An integer id, within the int64 a store keeps ids and labels as."""
    return type(value) is int and -(1 << 63) <= value < 1 << 63


def _same_size(one: CocoImage, other: CocoImage) -> bool:
    return one.width is None or other.width is None or (one.width, one.height) == (other.width, other.height)


def _shown(image: CocoImage) -> str:
    return image.file_name + (f" of {image.width}x{image.height}" if image.width is not None else "")
