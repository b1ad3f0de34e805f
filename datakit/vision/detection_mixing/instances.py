"""One sample as the mixing operations read it: its image, its boxes, what is aligned with them, its maps.

A sample (a dict of fields, or an ``(image, target)`` pair, read through a
:class:`~datakit.vision.targets.sample.TargetSample`) is split by what mixing
does with each of its entries:

- its **boxes**: one entry, torchvision's ``BoundingBoxes`` or plain boxes
  that its layout names, read as ``XYXY`` corners on the image's canvas;
- what is **aligned** with the boxes, one value per box in their order:
  instance masks ``(N, H, W)``, keypoints ``(N, K, 2)`` (or ``(N, K, 3)``
  with a visibility), and the layout's ``per_box`` entries (labels,
  ``iscrowd``, ...); they are kept, dropped and joined with their boxes;
- its **maps**: per-image masks ``(H, W)`` (a label map), pasted with the pixels;
- the **rest** (an id, a caption, a second image): kept from the sample an
  output is built on, untouched.

Reading copies the sample's structure, so that one batch's outputs are all
built from the samples as they were before the operation.
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from datakit.errors import TransformError
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.sample import TargetSample, is_placeable, tv_kind

__all__ = ["Aligned", "Instances", "read_instances", "plain"]

AlignedKind = Literal["masks", "points", "values"]


@dataclass(frozen=True)
class Aligned:
    """An entry with one value per box: instance ``masks``, key``points``, or other ``values``.

    Attributes:
        kind: how the entry moves: masks are placed with the pixels, points
            translated, values only kept or dropped.
        value: the entry as the sample holds it (a tensor, an array or a list).
    """

    kind: AlignedKind
    value: Any


@dataclass
class Instances:
    """What mixing reads of one sample.

    Attributes:
        image: the sample's image as it holds it (its type is kept in outputs).
        pixels: the image as a plain ``(C, H, W)`` tensor.
        pair: the sample's type when it is an ``(image, target)`` pair, None for a dict.
        image_key: a dict sample's image key.
        fields: a dict sample's entries (its image among them), or a pair's
            target dict, in order; None for a pair whose target is not a dict
            (a label).
        other: a pair's target when it is not a dict.
        boxes_key: the key of its boxes, None without boxes.
        box_format: the format the boxes are held in.
        corners: ``(N, 4)`` ``XYXY`` corners, floating point (``(0, 4)`` without boxes).
        aligned: the entries aligned with the boxes, by key.
        maps: the per-image masks, by key.
    """

    image: Any
    pixels: torch.Tensor
    pair: type | None
    image_key: str | None
    fields: dict[str, Any] | None
    other: Any = None
    boxes_key: str | None = None
    box_format: str = "XYXY"
    corners: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 4)))
    aligned: dict[str, Aligned] = field(default_factory=dict)
    maps: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def canvas(self) -> Canvas:
        """The image's ``(height, width)``."""
        return (int(self.pixels.shape[-2]), int(self.pixels.shape[-1]))

    @property
    def count(self) -> int:
        """How many boxes the sample has."""
        return int(self.corners.shape[0])

    @property
    def boxes(self) -> Any:
        """The boxes entry as the sample holds it (None without boxes)."""
        return None if self.boxes_key is None or self.fields is None else self.fields[self.boxes_key]


def plain(value: Any) -> torch.Tensor:
    """A tensor without its torchvision type (a view), for indexing and arithmetic."""
    return value.as_subclass(torch.Tensor) if type(value) is not torch.Tensor else value


def read_instances(target: TargetSample, where: str) -> Instances:
    """Sample ``target`` split into its parts (its structure copied; tensors are shared, not copied).

    Raises:
        TransformError: the image is not a ``(C, H, W)`` tensor, the sample
            has two boxes entries, entries aligned with boxes it does not have,
            an aligned entry of another length than the boxes, or a target on
            another canvas than the image; the message names ``where`` and the key.
    """
    sample, layout = target.value(), target.layout
    image = target.image
    if not isinstance(image, torch.Tensor) or image.ndim != 3:
        raise TransformError(f"{where}: the image is a {type(image).__name__} of "
                             f"{getattr(image, 'shape', '?')}; mixing takes (C, H, W) tensors")
    pair = None if isinstance(sample, dict) else type(sample)
    if pair is None:
        fields: dict[str, Any] | None = dict(sample)
        found = Instances(image, plain(image), None, layout.image, fields)
    else:
        fields = dict(sample[1]) if isinstance(sample[1], dict) else None
        found = Instances(image, plain(image), pair, None, fields, None if fields is not None else sample[1])
    if fields is not None:
        _split(found, fields, target, where)
    return found


def _split(found: Instances, fields: dict[str, Any], target: TargetSample, where: str) -> None:
    layout = target.layout
    for key, value in list(fields.items()):
        if key == found.image_key:
            continue
        if is_placeable(value):
            value = fields[key] = value.dense()
        kind = tv_kind(value)
        is_tensor = isinstance(value, torch.Tensor)
        if kind == "boxes" or (kind is None and is_tensor and key in layout.boxes):
            if found.boxes_key is not None:
                raise TransformError(f"{where}: boxes under {found.boxes_key!r} and {key!r}; mixing moves "
                                     "samples with one boxes entry")
            found.boxes_key = key
            found.box_format = _format(value, layout.boxes.get(key))
            found.corners = _corners(key, value, found.box_format, found.canvas, where)
        elif kind == "masks" or (kind is None and is_tensor and key in layout.masks):
            _check_canvas(key, tuple(value.shape[-2:]), found.canvas, where)
            if value.ndim == 2:
                found.maps[key] = value
            else:
                found.aligned[key] = Aligned("masks", value)
        elif kind == "keypoints" or (kind is None and is_tensor and key in layout.keypoints):
            found.aligned[key] = Aligned("points", value)
        elif key in layout.per_box and _sequence(value):
            found.aligned[key] = Aligned("values", value)
    _check_aligned(found, where)


def _sequence(value: Any) -> bool:
    """A value with one item per box: a tensor or array of one or more dimensions, a list, a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sized):
        return False
    return getattr(value, "ndim", 1) >= 1


def _format(boxes: Any, named: str | None) -> str:
    """The format boxes are held in: a ``BoundingBoxes``' own, else the one its layout names."""
    if tv_kind(boxes) == "boxes":
        return box_ops.check_format(getattr(boxes.format, "name", boxes.format))
    return box_ops.check_format(str(named))


def _corners(key: str, boxes: Any, format: str, canvas: Canvas, where: str) -> torch.Tensor:
    """The boxes as floating-point ``XYXY`` corners on ``canvas``."""
    if tv_kind(boxes) == "boxes":
        _check_canvas(key, tuple(int(side) for side in boxes.canvas_size), canvas, where)
    coords = plain(boxes)
    if coords.ndim != 2 or coords.shape[-1] != 4:
        raise TransformError(f"{where}: {key!r} holds boxes of shape {tuple(coords.shape)}, not (N, 4)")
    work = coords if coords.is_floating_point() else coords.to(torch.float32)
    return box_ops.convert_format(work, format, "XYXY").clone()


def _check_canvas(key: str, found: tuple[int, ...], canvas: Canvas, where: str) -> None:
    if found != tuple(canvas):
        raise TransformError(f"{where}: {key!r} lies on a {found[-1]}x{found[0]} canvas, its image is "
                             f"{canvas[1]}x{canvas[0]}")


def _check_aligned(found: Instances, where: str) -> None:
    if found.aligned and found.boxes_key is None:
        raise TransformError(f"{where}: {', '.join(map(repr, found.aligned))} without boxes: mixing keeps "
                             "and drops instances with their boxes, so a sample with them needs its "
                             "boxes too")
    for key, entry in found.aligned.items():
        if len(entry.value) != found.count:
            raise TransformError(f"{where}: {key!r} holds {len(entry.value)} entries for {found.count} "
                                 f"boxes under {found.boxes_key!r}; entries aligned with the boxes need one "
                                 "per box")
