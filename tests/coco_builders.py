"""Small COCO sets built locally: photo-like JPEGs, and their instances, person keypoints and captions."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from datakit.format.fields.masks import runs_of
from datakit.tools.synthetic import photo_pixels

CATEGORIES = [{"id": 1, "name": "person", "supercategory": "person"},
              {"id": 3, "name": "car", "supercategory": "vehicle"},
              {"id": 18, "name": "dog", "supercategory": "animal"}]
POINTS = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]
SKELETON = [[1, 2], [1, 3], [2, 4], [3, 5]]
SIZES = ((64, 48), (48, 64), (80, 60))
"""Image sizes (width, height): landscape, portrait, and a larger one."""
MISSING_FILE = "missing.jpg"
ORPHAN_IMAGE_ID = 999_999


@dataclass
class CocoFiles:
    """A COCO set on disk: the images folder and the annotation files."""

    images: Path
    instances: Path
    keypoints: Path
    captions: Path
    image_ids: list[int] = field(default_factory=list)
    """Every image id the files list, sorted (the one without a file too)."""
    orphan_id: int | None = None
    """The id of the annotation whose image_id no file lists (``None`` in a clean set)."""


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def write_photo(path: Path, width: int, height: int, seed: int) -> None:
    Image.fromarray(photo_pixels(width, height, seed)).save(path, format="JPEG", quality=90)


def polygon(rng: np.random.Generator, box: list[float]) -> list[float]:
    """A convex polygon of 5 to 8 points inside ``box`` (x, y, width, height), to 2 decimals."""
    x, y, width, height = box
    angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(5, 9))))
    xs = x + width / 2 + np.cos(angles) * width / 2 * 0.95
    ys = y + height / 2 + np.sin(angles) * height / 2 * 0.95
    return [round(float(value), 2) for pair in zip(xs, ys, strict=True) for value in pair]


def crowd_rle(rng: np.random.Generator, width: int, height: int, compressed: bool = True) -> dict[str, Any]:
    """A crowd region's RLE: compressed by pycocotools as COCO's files hold them, or uncompressed counts."""
    mask = np.zeros((height, width), dtype=np.uint8)
    top, left = int(rng.integers(0, height // 2)), int(rng.integers(0, width // 2))
    mask[top:top + height // 3, left:left + width // 3] = 1
    if not compressed:
        return {"size": [height, width], "counts": [int(run) for run in runs_of(mask)]}
    from pycocotools import mask as coco_mask

    encoded = coco_mask.encode(np.asfortranarray(mask))
    return {"size": [height, width], "counts": encoded["counts"].decode("ascii")}


def instance(rng: np.random.Generator, annotation_id: int, image_id: int, width: int, height: int,
             category: int) -> dict[str, Any]:
    """An instance annotation inside its image: a box of 2-decimal floats, a polygon or two, its area."""
    box_width = round(float(rng.uniform(6, width / 2)), 2)
    box_height = round(float(rng.uniform(6, height / 2)), 2)
    x = round(float(rng.uniform(0, width - box_width - 1)), 2)
    y = round(float(rng.uniform(0, height - box_height - 1)), 2)
    box = [x, y, box_width, box_height]
    polygons = [polygon(rng, box)]
    if rng.random() < 0.3:
        polygons.append(polygon(rng, [x, y, box_width / 2, box_height / 2]))
    return {"id": annotation_id, "image_id": image_id, "category_id": category, "bbox": box,
            "segmentation": polygons, "area": round(box_width * box_height * 0.7, 4), "iscrowd": 0}


def build_coco_set(root: Path, count: int = 8, seed: int = 0, clean: bool = False,
                   compressed_rle: bool = True, first_id: int = 100) -> CocoFiles:
    """A COCO set under ``root``: ``count`` photo-like JPEGs of :data:`SIZES` with 0 to 6 annotations
    each (polygons, one crowd RLE, persons with keypoints), 1 to 3 captions each, and the second image
    without any annotation or caption; image ids (and file names) from ``first_id`` on, not in file
    order, as in COCO's files. Unless ``clean``: an annotation of an image no file lists, and one more
    image listed whose file is missing (:data:`MISSING_FILE`)."""
    rng = np.random.default_rng(seed)
    images_dir = root / "images"
    images_dir.mkdir(parents=True)
    ids = [int(value) for value in rng.permutation(np.arange(first_id, first_id + 7 * count, 7))]
    images, annotations, captions = [], [], []
    next_id = 5000
    for position, image_id in enumerate(ids):
        width, height = SIZES[position % len(SIZES)]
        name = f"{image_id:012d}.jpg"
        write_photo(images_dir / name, width, height, seed * 1000 + position)
        images.append({"id": image_id, "file_name": name, "width": width, "height": height})
        if position == 1:
            continue  # a negative: no annotation, no caption
        for _ in range(int(rng.integers(0, 7))):
            category = int(rng.choice([each["id"] for each in CATEGORIES]))
            annotations.append(instance(rng, next_id, image_id, width, height, category))
            next_id += 1
        for _ in range(int(rng.integers(1, 4))):
            captions.append({"id": next_id, "image_id": image_id, "caption": f"a photo number {next_id}"})
            next_id += 1
    crowded = images[2]
    annotations.append({"id": next_id, "image_id": crowded["id"], "category_id": 1, "iscrowd": 1,
                        "bbox": [2.0, 3.0, crowded["width"] / 3, crowded["height"] / 3], "area": 220,
                        "segmentation": crowd_rle(rng, crowded["width"], crowded["height"], compressed_rle)})
    orphan = None
    if not clean:
        orphan = next_id + 1
        annotations.append(instance(rng, orphan, ORPHAN_IMAGE_ID, 40, 40, 3))
        images.append({"id": 1, "file_name": MISSING_FILE, "width": 40, "height": 30})
    files = CocoFiles(images_dir, root / "instances.json", root / "person_keypoints.json",
                      root / "captions.json", sorted(image["id"] for image in images), orphan)
    write_json(files.instances, {"info": {"description": "test"}, "images": images,
                                 "annotations": annotations, "categories": CATEGORIES})
    write_json(files.keypoints, keypoints_file(images, annotations, rng))
    write_json(files.captions, {"images": images, "annotations": captions})
    return files


def keypoints_file(images: list[dict[str, Any]], annotations: list[dict[str, Any]],
                   rng: np.random.Generator) -> dict[str, Any]:
    """COCO's person keypoints file: the persons of the instances file (the same ids) with their points."""
    persons = []
    for annotation in annotations:
        if annotation["category_id"] != 1 or annotation["iscrowd"]:
            continue
        x, y, width, height = annotation["bbox"]
        points: list[float] = []
        for _ in POINTS:
            visible = int(rng.integers(0, 3))
            where = [round(float(x + rng.uniform(0, width)), 2), round(float(y + rng.uniform(0, height)), 2)]
            points += [*where, visible] if visible else [0, 0, 0]
        persons.append({**copy.deepcopy(annotation), "keypoints": points,
                        "num_keypoints": sum(value > 0 for value in points[2::3])})
    person = {**CATEGORIES[0], "keypoints": POINTS, "skeleton": SKELETON}
    return {"images": images, "annotations": persons, "categories": [person]}
