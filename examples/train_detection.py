"""Train a tiny object detector on a generated COCO set, end to end through datakit.

The script draws a small COCO-style set (``images/*.jpg`` + ``instances.json``:
red squares, green triangles and blue discs apart on a noisy background, each with
its box and its polygon), packs it with ``datakit.convert(images, store,
coco=[annotations])``, and reads it back as torchvision's detection pairs
(``target_format="torchvision-detection"``) through a ``datakit.vision``
pipeline given as ``transforms=``: the resize is fused into JPEG decoding and
the flips move the boxes with the pixels. ``datakit.DataLoader`` batches them
with ``collate_fn=datakit.detection_collate``, torchvision's
``tuple(zip(*batch))``.

The detector is a tiny CenterNet-style network of its own, in plain torch (a
few strided convolutions, then a class heatmap, box sizes and centre offsets
at 1/4 of the input): its loss needs none of torchvision's compiled operators
(``nms``, ``roi_align``), so it trains wherever torch does, a CPU torch
beside a CUDA torchvision included. torchvision's own detectors
(``fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
num_classes=4)``: the category ids are 1 to 3, 0 is its background) take the
same ``(images, targets)`` batches, the images as floats in [0, 1], where
torchvision's compiled operators load.

    python examples/train_detection.py      # about 15 s on 2 CPU cores

It prints the loss as it trains and ends with ``loss went down: A -> B``. The
images, annotations and store are written in a temporary folder, deleted at
the end; ``--output DIR`` keeps them in ``DIR`` (a rerun replaces them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from torch import nn

import datakit
from datakit import vision as T

CATEGORIES = [(1, "square", (230, 40, 40)), (2, "triangle", (40, 210, 60)), (3, "disc", (50, 90, 240))]
"""COCO category id, name and colour of each kind of shape."""
SIZE = 128
"""The side the pipeline resizes every image to."""
STRIDE = 4
"""Input pixels per cell of the detector's output."""


# -- the generated set ---------------------------------------------------------------------------------


def shape_polygon(kind: str, centre: np.ndarray, side: float, rng: np.random.Generator) -> list[float]:
    """The polygon of one shape, as COCO's flat ``[x1, y1, x2, y2, ...]``."""
    turn = rng.uniform(0, 2 * np.pi)
    if kind == "square":
        angles = turn % (np.pi / 2) + np.arange(4) * np.pi / 2
        radius = side / math.sqrt(2)
    elif kind == "triangle":
        angles = turn + np.arange(3) * 2 * np.pi / 3
        radius = side / math.sqrt(3)
    else:
        angles = np.arange(24) * 2 * np.pi / 24
        radius = side / 2
    points = centre + radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return [round(float(value), 2) for value in points.reshape(-1)]


def place(width: int, height: int, count: int, rng: np.random.Generator) -> list[tuple[np.ndarray, float]]:
    """Up to ``count`` ``(centre, side)`` of shapes that do not overlap (each within its circle)."""
    placed: list[tuple[np.ndarray, float]] = []
    for _ in range(20 * count):
        side = rng.uniform(18, 44)
        centre = rng.uniform([side, side], [width - side, height - side])
        apart = [np.hypot(*(centre - other)) > (side + other_side) / math.sqrt(2) + 2  # circumcircles
                 for other, other_side in placed]
        if all(apart):
            placed.append((centre, side))
        if len(placed) == count:
            break
    return placed


def draw_image(image_id: int, rng: np.random.Generator) -> tuple[Image.Image, list[dict[str, Any]]]:
    """One image of 1 to 4 shapes apart from each other, and their COCO annotations (box, polygon, area,
    category)."""
    width, height = (int(side) for side in rng.integers(112, 176, size=2))
    noise = rng.normal(60, 12, (height, width, 3)).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(noise)
    draw = ImageDraw.Draw(image)
    annotations = []
    for centre, side in place(width, height, int(rng.integers(1, 5)), rng):
        category, kind, colour = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        polygon = shape_polygon(kind, centre, side, rng)
        draw.polygon(polygon, fill=colour)
        xs, ys = polygon[0::2], polygon[1::2]
        box = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
        area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
        annotations.append({"image_id": image_id, "category_id": category, "segmentation": [polygon],
                            "bbox": [round(value, 2) for value in box], "area": round(area, 2),
                            "iscrowd": 0})
    return image, annotations


def make_shapes_set(root: str, images: int, seed: int) -> tuple[str, str]:
    """``root/images/<id>.jpg`` and ``root/instances.json``; returns their paths."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "images")
    os.makedirs(folder)
    listed, annotations = [], []
    for image_id in range(1, images + 1):
        image, found = draw_image(image_id, rng)
        name = f"{image_id:06d}.jpg"
        image.save(os.path.join(folder, name), quality=90)
        listed.append({"id": image_id, "file_name": name, "width": image.width, "height": image.height})
        annotations += [dict(annotation, id=len(annotations) + number)
                        for number, annotation in enumerate(found, 1)]
    path = os.path.join(root, "instances.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"images": listed, "annotations": annotations,
                   "categories": [{"id": id_, "name": name} for id_, name, _ in CATEGORIES]}, handle)
    return folder, path


# -- the detector --------------------------------------------------------------------------------------


def block(into: int, out: int, stride: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(into, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU())


class TinyCenterNet(nn.Module):
    """A CenterNet-style detector: per cell of 1/4 of the input, a heatmap per class, a box size, an offset.

    Objects are found as the peaks of their class's heatmap; the size and the
    offset of the peak's cell give the box (Zhou et al., "Objects as Points").
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(block(3, 24, 2), block(24, 32, 2), block(32, 48, 1), block(48, 48, 1))
        self.heatmap = nn.Conv2d(48, num_classes, 1)
        self.boxes = nn.Conv2d(48, 4, 1)  # log of width and height (in cells), then the centre's offset
        nn.init.constant_(self.heatmap.bias, -2.19)  # a prior of 0.1 per cell, as CenterNet starts

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(images)
        return self.heatmap(features), self.boxes(features)


def encode_targets(targets: Sequence[dict[str, Any]], num_classes: int,
                   cells: int) -> tuple[torch.Tensor, list[tuple[int, int, int, torch.Tensor]]]:
    """Each image's boxes as Gaussian peaks on a class heatmap, and the box values at the peaks."""
    heatmap = torch.zeros(len(targets), num_classes, cells, cells)
    grid = torch.arange(cells, dtype=torch.float32)
    peaks = []
    for position, target in enumerate(targets):
        boxes = torch.as_tensor(target.get("boxes", torch.zeros(0, 4))).float().reshape(-1, 4) / STRIDE
        for box, label in zip(boxes, target.get("labels", []), strict=True):
            size = box[2:] - box[:2]
            if (size <= 0).any():
                continue  # a box that left the image: nothing to find
            centre = (box[:2] + box[2:]) / 2
            sigma = max(float(size.min()) / 6, 0.5)
            peak = torch.exp(-((grid[None, :] - centre[0]) ** 2 + (grid[:, None] - centre[1]) ** 2)
                             / (2 * sigma * sigma))
            klass = int(label) - 1
            heatmap[position, klass] = torch.maximum(heatmap[position, klass], peak)
            x, y = (int(value) for value in centre.clamp(0, cells - 1))
            peaks.append((position, y, x, torch.cat([size.log(), centre - centre.floor()])))
    return heatmap, peaks


def detection_loss(outputs: tuple[torch.Tensor, torch.Tensor],
                   targets: Sequence[dict[str, Any]]) -> torch.Tensor:
    """CenterNet's loss: a focal loss on the heatmaps, and L1 on the boxes' sizes and offsets at the peaks."""
    logits, boxes = outputs
    wanted, peaks = encode_targets(targets, logits.shape[1], logits.shape[-1])
    predicted = logits.sigmoid().clamp(1e-4, 1 - 1e-4)
    centres = wanted.eq(1).float()
    positive = -(centres * (1 - predicted) ** 2 * predicted.log()).sum()
    negative = -((1 - centres) * (1 - wanted) ** 4 * predicted ** 2 * (1 - predicted).log()).sum()
    found = max(len(peaks), 1)
    heatmap_loss = (positive + negative) / found
    if not peaks:
        return heatmap_loss
    at = torch.tensor([peak[:3] for peak in peaks])
    box_values = boxes[at[:, 0], :, at[:, 1], at[:, 2]]
    box_loss = F.l1_loss(box_values, torch.stack([peak[3] for peak in peaks]))
    return heatmap_loss + box_loss


# -- the run -------------------------------------------------------------------------------------------


def make_loader(store: str, args: argparse.Namespace) -> datakit.DataLoader:
    """The store as torchvision's detection pairs, resized and flipped with their boxes, in batches."""
    train = T.Compose([T.Resize((SIZE, SIZE)), T.RandomHorizontalFlip(), T.RandomVerticalFlip()])
    dataset = datakit.LMDBDataset(store, target_format="torchvision-detection", transforms=train)
    return datakit.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                              persistent_workers=args.workers > 0, collate_fn=datakit.detection_collate,
                              generator=torch.Generator().manual_seed(args.seed))


def train(loader: datakit.DataLoader, steps: int) -> list[float]:
    """``steps`` optimiser steps over as many epochs as they take; returns each step's loss."""
    model = TinyCenterNet(num_classes=len(CATEGORIES))
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses: list[float] = []
    while len(losses) < steps:
        for images, targets in loader:
            batch = torch.stack(images).float().div_(255)  # uint8 (3, SIZE, SIZE) each
            loss = detection_loss(model(batch), targets)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
            if len(losses) % 10 == 0 or len(losses) == 1:
                print(f"step {len(losses):3d}: loss {losses[-1]:.3f}")
            if len(losses) == steps:
                break
    return losses


def run(root: str, args: argparse.Namespace) -> None:
    shutil.rmtree(os.path.join(root, "images"), ignore_errors=True)  # a previous run's, in --output DIR
    shutil.rmtree(os.path.join(root, "shapes.lmdb"), ignore_errors=True)
    started = time.perf_counter()
    images, annotations = make_shapes_set(root, args.images, args.seed)
    store = os.path.join(root, "shapes.lmdb")
    report = datakit.convert(images, store, coco=[annotations], workers=1)
    print(f"converted {report.written} images with their boxes and masks, {len(report.skipped)} skipped")
    losses = train(make_loader(store, args), args.steps)
    window = max(1, min(5, len(losses) // 4))
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    print(f"trained {len(losses)} steps in {time.perf_counter() - started:.1f} s")
    print(f"loss went down: {first:.3f} -> {last:.3f}" if last < first else
          f"loss did not go down: {first:.3f} -> {last:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", metavar="DIR", default=None,
                        help="keep the images, annotations and store here (default: a temporary folder, "
                             "deleted at the end)")
    parser.add_argument("--images", type=int, default=128, help="images to generate")
    parser.add_argument("--steps", type=int, default=60, help="optimiser steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="loader worker processes")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads for training (the workers have the other cores; "
                             "a small model gains nothing from more, and loses a lot on a busy machine)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with (contextlib.nullcontext(args.output) if args.output else
          tempfile.TemporaryDirectory(prefix="datakit-detection-")) as root:
        os.makedirs(root, exist_ok=True)
        run(root, args)


if __name__ == "__main__":
    main()
