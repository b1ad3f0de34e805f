"""torchvision v2's box edits: SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat.

They move no pixel: in a pipeline given whole samples (``transforms=``) each
runs at its place among the geometric operations as a
:class:`~datakit.vision.targets.steps.TargetEdit`, once every target has taken
the steps before it, so it sees the boxes on the canvas the image has there.
The image batch passes through untouched (they cost nothing on images alone).
Called directly on a dict sample or an ``(image, target)`` pair, they work as
their torchvision namesakes called on one sample.

``SanitizeBoundingBoxes`` drops, with each box it removes, the entries that
hold one item per box: a field store's labels, box extras (``iscrowd``,
``area``), instance masks and keypoints (its schema says which), a detection
pair's ``labels``, ``iscrowd``, ``area``, ``bbox``, ``category_id`` and
``masks``. torchvision's default ``labels_getter`` drops the labels and
instance masks only, leaving a COCO target's ``iscrowd`` and ``area`` out of
step with its boxes; datakit keeps them aligned. Masks not decoded yet are not
decoded for it: they only learn which instances they keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from datakit.errors import TransformError
from datakit.vision.augment.base import SampleOp
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.sample import TargetLayout, TargetSample, tv_kind
from datakit.vision.targets.steps import Step, TargetEdit

__all__ = ["TargetOp", "SanitizeBoundingBoxes", "ClampBoundingBoxes", "ConvertBoundingBoxFormat",
           "sanitize_mask"]


class TargetOp(SampleOp):
    """An operation on the targets alone: its pixels are kept, its one edit runs among the steps."""

    target_support = "moved"

    def edit(self, sample: TargetSample, canvas: Canvas) -> None:
        """Change ``sample`` (its image on ``canvas``) in place."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def draw(self, rand: SampleRandom, height: int, width: int) -> bool:
        return True  # nothing is drawn: every sample is edited

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        return (_Edit(self),)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        return images

    def __call__(self, *inputs: Any) -> Any:
        """The operation on one sample: a dict, an ``(image, target)`` pair; an image alone is returned."""
        sample = inputs if len(inputs) > 1 else inputs[0]
        if not isinstance(sample, (dict, tuple, list)):
            return sample
        layout = TargetLayout(_image_key(sample)) if isinstance(sample, dict) else TargetLayout()
        target = TargetSample(sample, layout)
        target.move(self.target_steps(True, 0, 0), _canvas(target.image))
        return target.value()


class _Edit(TargetEdit):
    """A :class:`TargetOp`'s place among a sample's steps."""

    def __init__(self, op: TargetOp) -> None:
        self.op = op

    def edit(self, sample: Any, canvas: Canvas) -> None:
        self.op.edit(sample, canvas)


def _image_key(sample: dict[Any, Any]) -> Any:
    """The key of a dict sample's image: its ``tv_tensors.Image``, else ``"image"``."""
    key = next((key for key, value in sample.items() if tv_kind(value) == "image"), "image")
    if key not in sample:
        raise TypeError("the sample has no image (no tv_tensors.Image and no 'image' key): a box operation "
                        "reads the canvas from it")
    return key


def _canvas(image: Any) -> Canvas:
    if isinstance(image, torch.Tensor):
        return int(image.shape[-2]), int(image.shape[-1])
    width, height = image.size  # a PIL image
    return int(height), int(width)


def sanitize_mask(boxes: torch.Tensor, format: str, canvas: Canvas, min_size: float,
                  min_area: float) -> torch.Tensor:
    """Which boxes ``SanitizeBoundingBoxes`` keeps: torchvision's rule (both sides at least ``min_size``,
    the area at least ``min_area``, every corner inside the canvas)."""
    corners = box_ops.convert_format(boxes, format, "XYXY")
    widths, heights = corners[:, 2] - corners[:, 0], corners[:, 3] - corners[:, 1]
    valid = (widths >= min_size) & (heights >= min_size) & (corners >= 0).all(dim=-1)
    valid &= widths * heights >= min_area
    valid &= (corners[:, 0] <= canvas[1]) & (corners[:, 2] <= canvas[1])
    return valid & (corners[:, 1] <= canvas[0]) & (corners[:, 3] <= canvas[0])


LabelsGetter = Callable[[Any], Any] | str | None


class SanitizeBoundingBoxes(TargetOp):
    """Remove degenerate boxes and the entries beside them: torchvision's ``SanitizeBoundingBoxes``.

    Args:
        min_size: boxes with a side below it are removed (at least 1).
        min_area: boxes with an area below it are removed (at least 1).
        labels_getter: ``"default"``: the per-box entries (the store's
            schema, or a detection pair's; otherwise torchvision's heuristic,
            a key named ``labels`` or holding ``label``); a key of the
            sample's dict; a callable given the whole sample that returns the
            tensors to sanitize (one or a tuple); None: the boxes and their
            instance masks only.
    """

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0,
                 labels_getter: LabelsGetter = "default") -> None:
        if min_size < 1:
            raise ValueError(f"min_size must be >= 1, got {min_size}.")
        if min_area < 1:
            raise ValueError(f"min_area must be >= 1, got {min_area}.")
        if not (labels_getter is None or isinstance(labels_getter, str) or callable(labels_getter)):
            raise ValueError("labels_getter should either be 'default', a callable, a string, or None, "
                             f"got {labels_getter!r}.")
        self.min_size, self.min_area = float(min_size), float(min_area)
        self.labels_getter = labels_getter

    def edit(self, sample: TargetSample, canvas: Canvas) -> None:
        key = sample.boxes_key()
        if key is None:
            raise TransformError(f"{self!r} found no boxes in the sample")
        boxes, format, _ = sample.boxes(key)
        keys = self._entries(sample, key)
        valid = sanitize_mask(boxes, format, canvas, self.min_size, self.min_area)
        sample.keep(valid, [key, *keys])

    def _entries(self, sample: TargetSample, key: str) -> list[str]:
        """The keys sanitized with the boxes ``key``."""
        getter = self.labels_getter
        if getter == "default":
            return sample.per_box_keys(key)
        masks = sample.per_box_keys(key, labels=False)
        if getter is None:
            return masks
        fields = sample.fields
        if fields is None:
            raise TransformError(f"{self!r}: the target is not a dict, so it has no labels to find; pass "
                                 "labels_getter=None")
        if isinstance(getter, str):
            if getter not in fields:
                raise TransformError(f"{self!r}: the sample has no {getter!r} (its keys: "
                                     f"{', '.join(map(str, fields))})")
            return [getter, *[name for name in masks if name != getter]]
        found = getter(sample.value())
        found = found if isinstance(found, (tuple, list)) else (found,)
        named = [name for name, value in fields.items() if any(value is entry for entry in found)]
        if len(named) != len(found):
            raise TransformError(f"{self!r}: labels_getter returned {len(found)} entries, {len(named)} of "
                                 "them the sample's own tensors; return entries of the sample itself")
        return [*named, *[name for name in masks if name not in named]]

    def __repr__(self) -> str:
        return (f"SanitizeBoundingBoxes(min_size={self.min_size}, min_area={self.min_area}, "
                f"labels_getter={self.labels_getter!r})")


class ClampBoundingBoxes(TargetOp):
    """Clamp every box to the image: torchvision's ``ClampBoundingBoxes``.

    Args:
        clamping_mode: ``"auto"`` uses each ``BoundingBoxes``' own mode
            (plain boxes: ``"soft"``); ``"soft"``, ``"hard"`` (the same for
            axis-aligned boxes) or None (no clamping).
    """

    def __init__(self, clamping_mode: str | None = "auto") -> None:
        if clamping_mode not in ("auto", *box_ops.CLAMPING_MODES):
            raise ValueError(f"clamping_mode must be 'auto', 'soft', 'hard' or None, not {clamping_mode!r}")
        self.clamping_mode = clamping_mode

    def edit(self, sample: TargetSample, canvas: Canvas) -> None:
        for key in sample.boxes_keys():
            boxes, format, mode = sample.boxes(key)
            mode = mode if self.clamping_mode == "auto" else self.clamping_mode
            sample.set_boxes(key, box_ops.clamp(boxes, format, canvas, mode))

    def __repr__(self) -> str:
        return f"ClampBoundingBoxes(clamping_mode={self.clamping_mode!r})"


class ConvertBoundingBoxFormat(TargetOp):
    """Convert every box to ``format`` (``"XYXY"``, ``"XYWH"``, ``"CXCYWH"``, or torchvision's
    ``BoundingBoxFormat``): torchvision's ``ConvertBoundingBoxFormat``. Plain boxes of a store are
    converted too, and later operations move them in their new format."""

    def __init__(self, format: Any) -> None:
        self.format = box_ops.check_format(getattr(format, "name", format))

    def edit(self, sample: TargetSample, canvas: Canvas) -> None:
        for key in sample.boxes_keys():
            boxes, old, _ = sample.boxes(key)
            sample.set_boxes(key, box_ops.convert_format(boxes, old, self.format), self.format)

    def __repr__(self) -> str:
        return f"ConvertBoundingBoxFormat(format={self.format!r})"
