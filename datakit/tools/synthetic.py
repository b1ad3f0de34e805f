"""Small generated datasets: image folders, a COCO-shaped detection set, image-text shards.

The folders' images are deterministic for a seed and cheap to make, yet not
trivially compressible: each is a colour gradient, a class-specific pattern
and noise. The detection set and the shards are made of the real-photo
corpus's crops (:mod:`datakit.tools.photo_corpus`), since what they measure
is decoding photos: a COCO-style ``instances`` file of 1 to 20 polygons per
image, and WebDataset shards of ``<key>.jpg`` + ``<key>.txt`` pairs, a caption
each, as image-text datasets are laid out (the benchmarks, ``benchmarks/bench_*``).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from datakit.tools.photo_corpus import CorpusSummary, photo_corpus

__all__ = ["make_image_folder", "make_photo_folder", "photo_pixels", "COCO_CATEGORIES", "CocoImage",
           "CocoSet", "make_coco_set", "caption", "write_shards", "make_caption_shards"]


def make_image_folder(
    root: str | os.PathLike[str],
    *,
    classes: Sequence[str] = ("cat", "dog", "bird"),
    per_class: int = 20,
    size: tuple[int, int] = (64, 48),
    image_format: str = "JPEG",
    seed: int = 0,
) -> list[str]:
    """Write ``per_class`` images into ``root/<class>/`` for each class.

    Args:
        root: the folder to create (it may exist).
        classes: class folder names.
        per_class: images per class.
        size: ``(width, height)`` of every image.
        image_format: a Pillow format name; sets the extension too.
        seed: makes the pixels reproducible.

    Returns:
        The written files' paths relative to ``root``, ``/``-separated.
    """
    rng = np.random.default_rng(seed)
    width, height = size
    extensions = {"JPEG": "jpg", "PNG": "png", "BMP": "bmp", "WEBP": "webp"}
    extension = extensions.get(image_format, image_format.lower())
    ys, xs = np.mgrid[0:height, 0:width]
    written = []
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for number in range(per_class):
            base = rng.integers(0, 256, size=3)
            pattern = ((xs // (4 + label) + ys // (4 + number % 5)) % 2) * 80
            pixels = (base[None, None, :] + xs[..., None] * 2 + ys[..., None] + pattern[..., None]
                      + rng.integers(0, 24, size=(height, width, 3)))
            image = Image.fromarray((pixels % 256).astype(np.uint8), "RGB")
            relative = f"{name}/{number:05d}.{extension}"
            image.save(os.path.join(root, relative), format=image_format)
            written.append(relative)
    return written


def photo_pixels(width: int, height: int, seed: int) -> np.ndarray:
    """An ``(height, width, 3)`` uint8 image with the structure of a photo rather than of noise.

    Smooth colour fields, a sharp-edged object and mild sensor noise: at JPEG
    quality 90 a 400x400 image takes about 50 KB, as ImageNet's photos do,
    and resizing it shows the edge and gradient behaviour of real pictures.
    """
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    pixels = np.stack([128 + 90 * np.sin(xs / (23 + 9 * c) + phase[c]) * np.cos(ys / (31 - 5 * c) - phase[c])
                       for c in range(3)], axis=-1)
    top, left = int(rng.integers(0, max(1, height // 2))), int(rng.integers(0, max(1, width // 2)))
    pixels[top:top + height // 4, left:left + width // 3] = rng.uniform(0, 255, 3)
    pixels += rng.normal(0, 6, pixels.shape).astype(np.float32)
    result: np.ndarray = np.clip(pixels, 0, 255).astype(np.uint8)
    return result


def make_photo_folder(
    root: str | os.PathLike[str],
    *,
    images: int = 3000,
    classes: int = 10,
    sides: tuple[int, int] = (300, 500),
    quality: int = 90,
    seed: int = 0,
) -> list[str]:
    """An ImageNet-shaped folder: JPEGs of photo-like content whose sides vary in ``sides``.

    Args:
        root: the folder to create (it may exist).
        images: how many images, spread evenly over the classes.
        classes: how many class folders (``class_000`` ...).
        sides: the range each side's length is drawn from (inclusive).
        quality: JPEG quality.
        seed: makes sizes and pixels reproducible.

    Returns:
        The written files' paths relative to ``root``, ``/``-separated.
    """
    rng = np.random.default_rng(seed)
    written = []
    for number in range(images):
        name = f"class_{number % classes:03d}"
        os.makedirs(os.path.join(root, name), exist_ok=True)
        width, height = (int(side) for side in rng.integers(sides[0], sides[1] + 1, 2))
        relative = f"{name}/{number:06d}.jpg"
        Image.fromarray(photo_pixels(width, height, seed * 1_000_003 + number)).save(
            os.path.join(root, relative), format="JPEG", quality=quality)
        written.append(relative)
    return written


COCO_CATEGORIES = (
    (1, "person"), (2, "bicycle"), (3, "car"), (4, "motorcycle"), (5, "airplane"), (6, "bus"), (7, "train"),
    (8, "truck"), (9, "boat"), (10, "traffic light"), (11, "fire hydrant"), (13, "stop sign"),
    (14, "parking meter"), (15, "bench"), (16, "bird"), (17, "cat"), (18, "dog"), (19, "horse"),
    (20, "sheep"), (21, "cow"),
)
"""COCO's first twenty categories, with its ids (12 is unused there too: ids need not be contiguous)."""


@dataclass(frozen=True)
class CocoImage:
    """One image of a generated COCO set.

    Attributes:
        id: its COCO ``image_id`` (sparse, as COCO's are).
        file_name: relative to the images folder.
        width, height: its size in pixels.
        source: the photograph it is cut from (:data:`~datakit.tools.photo_corpus.SOURCES`).
        annotations: how many objects it has.
    """

    id: int
    file_name: str
    width: int
    height: int
    source: str
    annotations: int


@dataclass(frozen=True)
class CocoSet:
    """What :func:`make_coco_set` wrote.

    Attributes:
        images: the folder of the JPEGs (``IMAGES_DIR`` of ``datakit convert --coco``, ``root`` of
            torchvision's ``CocoDetection``).
        annotations: the ``instances`` file.
        listed: the images, in the order of their ids.
        summary: the JPEGs' bytes, pixels and kinds.
    """

    images: str
    annotations: str
    listed: list[CocoImage]
    summary: CorpusSummary

    @property
    def boxes(self) -> int:
        """How many annotations (each a box and its polygon) the set has."""
        return sum(image.annotations for image in self.listed)


def _polygon_annotation(width: int, height: int, rng: np.random.Generator) -> dict[str, Any]:
    """One object: a star-shaped polygon inside the image, its ``bbox`` and ``area`` (COCO's keys)."""
    vertices = int(rng.integers(5, 13))
    radius = rng.uniform(0.03, 0.3) * min(width, height)
    centre = rng.uniform((0.1 * width, 0.1 * height), (0.9 * width, 0.9 * height))
    angles = np.sort(rng.uniform(0, 2 * np.pi, vertices))
    reach = radius * rng.uniform(0.5, 1.0, vertices)
    xs = np.clip(centre[0] + reach * np.cos(angles), 0, width).round(2)
    ys = np.clip(centre[1] + reach * np.sin(angles), 0, height).round(2)
    area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
    bbox = [float(xs.min()), float(ys.min()), float(xs.max() - xs.min()), float(ys.max() - ys.min())]
    polygon = [float(value) for pair in zip(xs, ys, strict=True) for value in pair]
    return {"segmentation": [polygon], "area": round(area, 2), "bbox": [round(v, 2) for v in bbox],
            "iscrowd": 0}


def make_coco_set(root: str | os.PathLike[str], *, images: int = 500, seed: int = 0,
                  sides: tuple[int, int] = (400, 480), max_boxes: int = 20) -> CocoSet:
    """A COCO-shaped detection set: ``root/images/<id>.jpg`` and ``root/annotations/instances.json``.

    The photos are the real-photo corpus's crops, sized as COCO's are (short side
    in ``sides``, long side at most 4/3 of it: 640 px for 480). Each has 1 to
    ``max_boxes`` objects, each a polygon with its box, area and one of
    :data:`COCO_CATEGORIES`. Image ids are sparse and the file lists the images
    in a shuffled order, as COCO's own files do, so a reader must sort them by
    id as ``CocoDetection`` does.

    Args:
        root: the folder to create (it may exist).
        images: how many images.
        seed: makes photos and annotations reproducible.
        sides: the short side's range, inclusive.
        max_boxes: the most objects an image has.

    Raises:
        PhotoCorpusUnavailable: scikit-image or scikit-learn is not installed.
    """
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "images")
    os.makedirs(folder, exist_ok=True)
    ids = np.sort(rng.choice(np.arange(1, 8 * images + 2), size=images, replace=False)).tolist()
    listed, objects, files = [], [], []
    total_bytes = pixels = 0
    kinds: dict[str, int] = {}
    photos = photo_corpus(images, seed, sides, max_aspect=4 / 3)
    for image_id, photo in zip(ids, photos, strict=True):
        name = f"{image_id:012d}.jpg"
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(photo.data)
        found = [_polygon_annotation(photo.width, photo.height, rng)
                 for _ in range(int(rng.integers(1, max_boxes + 1)))]
        for annotation in found:
            annotation.update(image_id=image_id, category_id=COCO_CATEGORIES[int(rng.integers(20))][0])
        objects.append(found)
        listed.append(CocoImage(image_id, name, photo.width, photo.height, photo.source, len(found)))
        files.append(name)
        total_bytes += len(photo.data)
        pixels += photo.width * photo.height
        kinds[photo.subsampling] = kinds.get(photo.subsampling, 0) + 1
        kinds["progressive"] = kinds.get("progressive", 0) + photo.progressive
    path = os.path.join(root, "annotations", "instances.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(_coco_document(listed, objects, rng.permutation(images).tolist(), seed), handle)
    return CocoSet(folder, path, listed, CorpusSummary(files, total_bytes, pixels, kinds))


def _coco_document(listed: Sequence[CocoImage], objects: Sequence[list[dict[str, Any]]],
                   order: Sequence[int], seed: int) -> dict[str, Any]:
    """The ``instances`` file: images and their annotations listed in ``order``, annotation ids from 1."""
    flat = [annotation for position in order for annotation in objects[position]]
    return {"info": {"description": "datakit.tools.synthetic.make_coco_set", "seed": seed},
            "images": [{"id": listed[position].id, "file_name": listed[position].file_name,
                        "width": listed[position].width, "height": listed[position].height}
                       for position in order],
            "annotations": [dict(annotation, id=number) for number, annotation in enumerate(flat, 1)],
            "categories": [{"id": id_, "name": name, "supercategory": "thing"}
                           for id_, name in COCO_CATEGORIES]}


_SUBJECTS = {"astronaut": "an astronaut", "coffee": "a cup of coffee", "ihc": "a stained tissue sample",
             "motorcycle_left": "a motorcycle", "motorcycle_right": "a parked motorcycle",
             "rocket": "a rocket on its launch pad", "retina": "the back of an eye", "china": "a temple",
             "flower": "a flower", "chelsea": "a cat", "camera": "a man with a camera",
             "coins": "a few old coins", "moon": "the moon", "brick": "a brick wall",
             "grass": "a patch of grass", "gravel": "gravel"}
_WORDS = ("close-up", "blurry", "bright", "black and white", "old", "detailed", "cropped", "colourful")
_CLAUSES = ("seen from the left", "in the afternoon light", "with a plain background", "taken indoors",
            "on a sunny day", "next to a window", "in high resolution", "from a distance",
            "with soft shadows", "at a slight angle", "under a cloudy sky", "in the foreground")


def caption(source: str, rng: np.random.Generator) -> str:
    """A caption for a photo cut from ``source``: a few words to a few dozen, as web captions run."""
    subject = _SUBJECTS.get(source, f"a {source}")
    words = f"a {_WORDS[int(rng.integers(len(_WORDS)))]} photo of {subject}"
    clauses = rng.choice(len(_CLAUSES), size=int(rng.integers(0, 5)), replace=False)
    return ", ".join([words, *(_CLAUSES[int(index)] for index in clauses)])


def write_shards(root: str | os.PathLike[str], samples: Iterable[tuple[str, Mapping[str, bytes]]],
                 per_shard: int) -> list[str]:
    """Write ``(key, {extension: bytes})`` samples as WebDataset shards, ``per_shard`` samples each.

    Returns:
        The shards' paths: ``root/shard-000000.tar`` and on, uncompressed, members in key order.
    """
    os.makedirs(root, exist_ok=True)
    paths: list[str] = []
    queue = iter(samples)
    while chunk := list(itertools.islice(queue, per_shard)):
        paths.append(os.path.join(root, f"shard-{len(paths):06d}.tar"))
        with tarfile.open(paths[-1], "w", format=tarfile.USTAR_FORMAT) as tar:
            for key, members in chunk:
                for extension, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{extension}")
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
    return paths


def make_caption_shards(root: str | os.PathLike[str], *, images: int = 3000, seed: int = 0,
                        per_shard: int = 1000, sides: tuple[int, int] = (250, 500)) -> CorpusSummary:
    """Image-text pairs as WebDataset shards: ``<key>.jpg`` (a real-photo crop) + ``<key>.txt`` (its caption).

    Args:
        root: the folder of the shards (it may exist).
        images: how many pairs.
        seed: makes photos and captions reproducible.
        per_shard: pairs per shard.
        sides: the photos' short side range, inclusive (ImageNet's by default).

    Returns:
        The photos' summary; its files are the members' names, ``<key>.jpg``.

    Raises:
        PhotoCorpusUnavailable: scikit-image or scikit-learn is not installed.
    """
    rng = np.random.default_rng([seed, 1])
    files: list[str] = []
    totals = {"bytes": 0, "pixels": 0}
    kinds: dict[str, int] = {}

    def samples() -> Iterable[tuple[str, dict[str, bytes]]]:
        for number, photo in enumerate(photo_corpus(images, seed, sides)):
            key = f"{number:09d}"
            files.append(f"{key}.jpg")
            totals["bytes"] += len(photo.data)
            totals["pixels"] += photo.width * photo.height
            kinds[photo.subsampling] = kinds.get(photo.subsampling, 0) + 1
            kinds["progressive"] = kinds.get("progressive", 0) + photo.progressive
            yield key, {"jpg": photo.data, "txt": caption(photo.source, rng).encode()}

    write_shards(root, samples(), per_shard)
    return CorpusSummary(files, totals["bytes"], totals["pixels"], kinds)
