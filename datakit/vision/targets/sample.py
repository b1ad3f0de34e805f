"""How a sample's image and its targets travel together through ``datakit.vision``.

A sample is a dict of fields (a field store's: ``{"image": ..., "boxes":
..., "labels": ..., "masks": ...}``) or an ``(image, target)`` pair with
``target`` a dict (torchvision's detection datasets'). Its targets are
torchvision's ``tv_tensors`` (``BoundingBoxes``, ``Mask``, ``KeyPoints``),
recognised by their class names without importing torchvision and rebuilt
through their own classes with their new ``canvas_size``, or plain tensors
that a :class:`TargetLayout` names (what a field store's schema says when
torchvision cannot be imported: the boxes' format, which keys are masks and
keypoints). :class:`TargetSample` reads one, gives its image to the
operations, moves every target through an operation's steps
(:mod:`datakit.vision.targets.steps`) and gives back the same structure with
the same types. Anything else in the sample (labels, ids, captions, a second
image) passes through untouched, as in torchvision.

Masks may also come undecoded (:class:`PlaceableMasks`): a field store's
masks are then decoded for the first steps only where the output shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.steps import Step, move_boxes, move_keypoints, move_masks

__all__ = ["TargetLayout", "PlaceableMasks", "TargetSample", "tv_kind"]

_TV_KINDS = {"BoundingBoxes": "boxes", "Mask": "masks", "KeyPoints": "keypoints", "Image": "image"}


def tv_kind(value: Any) -> str | None:
    """``"boxes"``, ``"masks"``, ``"keypoints"`` or ``"image"`` for torchvision's tv_tensors, else None."""
    if not isinstance(value, torch.Tensor) or type(value) is torch.Tensor:
        return None
    for cls in type(value).__mro__:
        if cls.__module__.startswith("torchvision.tv_tensors") and cls.__name__ in _TV_KINDS:
            return _TV_KINDS[cls.__name__]
    return None


@runtime_checkable
class PlaceableMasks(Protocol):
    """Masks not decoded yet, which decode for a placement only what it shows."""

    def placed(self, source: Canvas, steps: Sequence[Step]) -> Any:
        """The masks (on ``source``) after ``steps``, in the sample's type."""
        ...

    def dense(self) -> Any:
        """The masks, decoded whole, in the sample's type."""
        ...


@dataclass(frozen=True)
class TargetLayout:
    """Where a sample's image is, and which of its plain tensors are targets.

    ``tv_tensors`` say what they are themselves; plain tensors are targets
    only when named here. For a pair, the keys are the target dict's.

    Attributes:
        image: the image's key in a dict sample (None for a pair: its first item).
        boxes: ``key -> format`` of plain-tensor boxes (``XYXY``, ``XYWH``, ``CXCYWH``).
        masks: keys of plain-tensor masks (``(N, H, W)`` or ``(H, W)``).
        keypoints: keys of plain-tensor keypoints: ``(..., 2)`` points, or
            ``(..., 3)`` with the visibility last (kept as it is).
        per_box: keys of the other entries that hold one value per box, in
            the boxes' order (labels, ``iscrowd``, a keypoints visibility):
            what an operation that drops or joins boxes (Mosaic, detection
            MixUp and CutMix) keeps aligned with them.
    """

    image: str | None = None
    boxes: Mapping[str, str] = field(default_factory=dict)
    masks: tuple[str, ...] = ()
    keypoints: tuple[str, ...] = ()
    per_box: tuple[str, ...] = ()


class TargetSample:
    """One sample, its image and its targets: read, moved, given back in the same structure.

    Args:
        sample: a dict sample, or an ``(image, target)`` pair (tuple or list).
        layout: where the image is and which plain tensors are targets.

    Raises:
        TypeError: a sample of another shape, or a dict without ``layout.image``.
    """

    def __init__(self, sample: Any, layout: TargetLayout) -> None:
        self.layout = layout
        self._pair: type | None = None
        self._fields: dict[str, Any] | None = None
        self._other: Any = None
        self._read(sample)

    def _read(self, sample: Any) -> None:
        if isinstance(sample, dict):
            if self.layout.image not in sample:
                raise TypeError(f"the sample has no image under {self.layout.image!r} (its keys: "
                                f"{', '.join(map(str, sample))})")
            self._pair, self._fields, self._image = None, sample, sample[self.layout.image]
        elif isinstance(sample, (tuple, list)) and len(sample) == 2:
            self._pair, self._image = type(sample), sample[0]
            self._fields = sample[1] if isinstance(sample[1], dict) else None
            self._other = sample[1]
        else:
            raise TypeError(f"a sample with targets is a dict or an (image, target) pair, not a "
                            f"{type(sample).__name__}")

    @property
    def image(self) -> Any:
        """The sample's image."""
        return self._image

    @image.setter
    def image(self, image: Any) -> None:
        if tv_kind(self._image) == "image" and tv_kind(image) is None and isinstance(image, torch.Tensor):
            image = type(self._image)(image)  # keep torchvision's Image type, as its transforms do
        self._image = image

    @property
    def annotated(self) -> bool:
        """Whether the sample holds boxes, masks or keypoints."""
        named = {*self.layout.boxes, *self.layout.masks, *self.layout.keypoints}
        return self._fields is not None and any(
            isinstance(value, PlaceableMasks) or tv_kind(value) in ("boxes", "masks", "keypoints")
            or (key in named and isinstance(value, torch.Tensor)) for key, value in self._fields.items())

    def take(self, result: Any, what: str) -> None:
        """Read the sample again from ``result``, what an operation given the whole sample returned.

        Raises:
            TypeError: ``result`` is not a sample of the same kind; the message names ``what``.
        """
        if isinstance(result, dict) != (self._pair is None):
            kind = "a dict" if self._pair is None else "an (image, target) pair"
            raise TypeError(f"{what} was given {kind} and returned a {type(result).__name__}: given a "
                            "whole sample, an operation returns the whole sample")
        self._read(result)

    def move(self, steps: Sequence[Step], source: Canvas) -> None:
        """Move every target through ``steps`` from the image's canvas ``source``; undecoded masks are
        decoded for what the steps keep (and decoded whole when there are no steps)."""
        if self._fields is None:
            return
        for key, value in list(self._fields.items()):
            moved = self._moved(key, value, steps, source)
            if moved is not value:
                self._fields[key] = moved

    def _moved(self, key: str, value: Any, steps: Sequence[Step], source: Canvas) -> Any:
        if isinstance(value, PlaceableMasks):
            return value.placed(source, steps) if steps else value.dense()
        if not steps:
            return value
        kind = tv_kind(value)
        if kind == "boxes":
            return _move_tv_boxes(key, value, steps, source)
        if kind == "masks":
            return type(value)(move_masks(value.as_subclass(torch.Tensor), steps))
        if kind == "keypoints":
            canvas = _canvas_of(key, value, source)
            points, canvas = move_keypoints(value.as_subclass(torch.Tensor), canvas, steps)
            return type(value)(points, canvas_size=canvas)
        if kind is not None or not isinstance(value, torch.Tensor):
            return value
        if key in self.layout.boxes:
            return move_boxes(value, self.layout.boxes[key], source, steps)[0]
        if key in self.layout.masks:
            return move_masks(value, steps)
        if key in self.layout.keypoints:
            return _move_plain_points(value, steps, source)
        return value

    def value(self) -> Any:
        """The sample in the structure it was read in, with its image and moved targets."""
        if self._pair is None:
            assert self._fields is not None and self.layout.image is not None
            self._fields[self.layout.image] = self._image
            return self._fields
        target = self._fields if self._fields is not None else self._other
        return self._pair((self._image, target))


def _canvas_of(key: str, value: Any, source: Canvas) -> Canvas:
    """A tv_tensor's own canvas, which must be the image's the steps start from."""
    canvas = (int(value.canvas_size[0]), int(value.canvas_size[1]))
    if canvas != tuple(source):
        raise ValueError(f"{key!r} lies on a canvas of {canvas[1]}x{canvas[0]}, the image it moves with "
                         f"is {source[1]}x{source[0]}")
    return canvas


def _move_tv_boxes(key: str, boxes: Any, steps: Sequence[Step], source: Canvas) -> Any:
    canvas = _canvas_of(key, boxes, source)
    format = getattr(boxes.format, "name", boxes.format)
    mode = getattr(boxes, "clamping_mode", "soft")
    moved, canvas = move_boxes(boxes.as_subclass(torch.Tensor), format, canvas, steps, mode)
    extra = {"clamping_mode": mode} if hasattr(boxes, "clamping_mode") else {}
    return type(boxes)(moved, format=boxes.format, canvas_size=canvas, **extra)


def _move_plain_points(points: torch.Tensor, steps: Sequence[Step], source: Canvas) -> torch.Tensor:
    if points.shape[-1] == 2:
        return move_keypoints(points, source, steps)[0]
    moved = move_keypoints(points[..., :2], source, steps)[0]
    return torch.cat((moved, points[..., 2:]), dim=-1)
