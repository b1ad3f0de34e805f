"""The geometric steps an operation reports, and how each moves boxes, masks and keypoints.

An operation that moves pixels says what it did to one sample as a short
sequence of steps, in the order it did them, from the canvas it was given:
the fused decoder's ``RandomResizedCrop`` is ``Crop(box)`` then
``Resize(size)``, then ``HorizontalFlip()`` when the flip fired. Each step
moves every kind of target with the primitive of torchvision v2's functional
op (:mod:`.boxes`, :mod:`.masks`, :mod:`.keypoints`), so a sequence of steps
gives what torchvision's transforms give one after another. A step that
maps each output row to one source row and each column to one source column
(all of these) also says so (:meth:`Step.remap`), which lets instance masks
be decoded only where the output reads them (:mod:`.mask_maps`).

A new operation (an affine warp, a zoom-out) adds a :class:`Step` subclass
that implements the three moves and :meth:`Step.canvas_after`; its
:meth:`Step.remap` returns None when rows and columns do not map separately,
and masks are then decoded whole before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from datakit.errors import TransformError
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets import keypoints as point_ops
from datakit.vision.targets import masks as mask_ops
from datakit.vision.targets.boxes import Canvas

__all__ = ["Step", "Crop", "Pad", "Resize", "HorizontalFlip", "VerticalFlip", "TargetEdit", "AxisMaps",
           "Placement", "canvas_after", "move_boxes", "move_keypoints", "move_masks"]


@dataclass
class AxisMaps:
    """For each output row and column, the source row or column it shows, or a negative fill code.

    Code ``-(k + 1)`` means the pixel is ``fills[k]``; where a row and a
    column both carry a code, the larger ``k`` (the later step) wins, as the
    later step's padding covers what an earlier one put there.
    """

    rows: torch.Tensor
    columns: torch.Tensor
    fills: list[float]

    @classmethod
    def identity(cls, canvas: Canvas) -> AxisMaps:
        """The maps of an untouched canvas."""
        return cls(torch.arange(canvas[0]), torch.arange(canvas[1]), [])

    def code(self, fill: float) -> int:
        """A new fill code, for pixels a step fills with ``fill``."""
        self.fills.append(float(fill))
        return -len(self.fills)


class Step:
    """One geometric step of an operation: how it moves each kind of target from the canvas it gets."""

    def canvas_after(self, canvas: Canvas) -> Canvas:
        """The canvas ``(height, width)`` after this step."""
        raise NotImplementedError  # pragma: no cover - every step overrides it

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        """The boxes moved."""
        raise NotImplementedError  # pragma: no cover - every step overrides it

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        """The ``(..., 2)`` points moved."""
        raise NotImplementedError  # pragma: no cover - every step overrides it

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        """The ``(N, H, W)`` or ``(H, W)`` mask moved."""
        raise NotImplementedError  # pragma: no cover - every step overrides it

    def remap(self, maps: AxisMaps) -> AxisMaps | None:
        """The maps after this step, or None where rows and columns do not move separately."""
        return None


def _take(indices: torch.Tensor, start: int, length: int, code: int) -> torch.Tensor:
    """``indices[start:start + length]``, ``code`` where that reaches outside them."""
    positions = torch.arange(start, start + length)
    inside = (positions >= 0) & (positions < indices.shape[0])
    out = torch.full((length,), code, dtype=torch.int64)
    out[inside] = indices[positions[inside]]
    return out


@dataclass(frozen=True)
class Crop(Step):
    """Rows ``[top, top + height)`` and columns ``[left, left + width)``; past the canvas, zero padding
    (torchvision's ``crop``)."""

    top: int
    left: int
    height: int
    width: int

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return (self.height, self.width)

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return box_ops.crop(boxes, format, self.top, self.left, self.height, self.width, clamping_mode)[0]

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return point_ops.crop(points, self.top, self.left, self.height, self.width)[0]

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask_ops.crop(mask, self.top, self.left, self.height, self.width)

    def remap(self, maps: AxisMaps) -> AxisMaps:
        code = maps.code(0)
        return AxisMaps(_take(maps.rows, self.top, self.height, code),
                        _take(maps.columns, self.left, self.width, code), maps.fills)


@dataclass(frozen=True)
class Pad(Step):
    """``left``, ``top``, ``right``, ``bottom`` pixels added (torchvision's ``pad``, constant mode);
    masks get ``fill`` (None: the operation had a fill per channel, which masks cannot take)."""

    left: int
    top: int
    right: int
    bottom: int
    fill: float | None = 0

    @property
    def padding(self) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)``."""
        return (self.left, self.top, self.right, self.bottom)

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return (canvas[0] + self.top + self.bottom, canvas[1] + self.left + self.right)

    def _mask_fill(self) -> float:
        if self.fill is None:
            raise TransformError("masks are padded with one value, not one per channel: give the fill as "
                                 "{tv_tensors.Mask: value, 'others': (r, g, b)}")
        return self.fill

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return box_ops.pad(boxes, format, canvas, self.padding, clamping_mode)[0]

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return point_ops.pad(points, canvas, self.padding)[0]

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask_ops.pad(mask, self.padding, self._mask_fill())

    def remap(self, maps: AxisMaps) -> AxisMaps:
        code = maps.code(self._mask_fill())
        rows = _take(maps.rows, -self.top, maps.rows.shape[0] + self.top + self.bottom, code)
        columns = _take(maps.columns, -self.left, maps.columns.shape[0] + self.left + self.right, code)
        return AxisMaps(rows, columns, maps.fills)


@dataclass(frozen=True)
class Resize(Step):
    """To ``height`` x ``width``: boxes and keypoints scaled by the ratios, masks by nearest sampling
    (``mask_mode``: ``"nearest"``, or ``"nearest-exact"`` when the operation's interpolation is that)."""

    height: int
    width: int
    mask_mode: str = "nearest"

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return (self.height, self.width)

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return box_ops.resize(boxes, canvas, (self.height, self.width))[0]

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return point_ops.resize(points, canvas, (self.height, self.width))[0]

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask_ops.resize(mask, (self.height, self.width), self.mask_mode)

    def remap(self, maps: AxisMaps) -> AxisMaps:
        return AxisMaps(maps.rows[self._nearest(maps.rows.shape[0], self.height)],
                        maps.columns[self._nearest(maps.columns.shape[0], self.width)], maps.fills)

    def _nearest(self, length: int, size: int) -> torch.Tensor:
        """Which input index each of ``size`` outputs reads: the kernel masks are resized with, run
        on a ramp of indices (exact in float32 up to 2**24)."""
        if length == size:
            return torch.arange(size)
        ramp = torch.arange(length, dtype=torch.float32).view(1, 1, 1, length)
        return F.interpolate(ramp, size=[1, size], mode=self.mask_mode).view(size).to(torch.int64)


@dataclass(frozen=True)
class HorizontalFlip(Step):
    """Mirrored left to right: boxes ``x -> W - x``, keypoints ``x -> W - 1 - x``."""

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return canvas

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return box_ops.horizontal_flip(boxes, format, canvas)

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return point_ops.horizontal_flip(points, canvas)

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask_ops.horizontal_flip(mask)

    def remap(self, maps: AxisMaps) -> AxisMaps:
        return AxisMaps(maps.rows, maps.columns.flip(0), maps.fills)


@dataclass(frozen=True)
class VerticalFlip(Step):
    """Mirrored top to bottom: boxes ``y -> H - y``, keypoints ``y -> H - 1 - y``."""

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return canvas

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return box_ops.vertical_flip(boxes, format, canvas)

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return point_ops.vertical_flip(points, canvas)

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask_ops.vertical_flip(mask)

    def remap(self, maps: AxisMaps) -> AxisMaps:
        return AxisMaps(maps.rows.flip(0), maps.columns, maps.fills)


class TargetEdit(Step):
    """A step that changes what the targets hold, not where they lie: boxes marked empty or dropped with
    the entries beside them, clamped, converted to another format.

    It moves nothing and keeps the canvas; a
    :class:`~datakit.vision.targets.sample.TargetSample` moving through
    steps calls :meth:`edit` at its place among them, once every target has
    taken the steps before it (``RandomIoUCrop`` marks the boxes whose centre
    left the crop, ``FixedSizeCrop`` drops those it emptied, before its pad).
    """

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return canvas

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return boxes

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return points

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        return mask

    def remap(self, maps: AxisMaps) -> AxisMaps:
        return maps

    def edit(self, sample: Any, canvas: Canvas) -> None:
        """Change ``sample`` (a ``TargetSample`` whose image lies on ``canvas``) in place."""
        raise NotImplementedError  # pragma: no cover - every edit overrides it


@dataclass(frozen=True)
class Placement:
    """Where an output's pixels came from: the canvas of the source and the steps that made the output.

    Attributes:
        source: ``(height, width)`` of the image the steps start from (the
            canvas its boxes, masks and keypoints lie on).
        steps: in the order they were applied.
    """

    source: Canvas
    steps: tuple[Step, ...] = ()

    @property
    def canvas(self) -> Canvas:
        """The output's ``(height, width)``."""
        return canvas_after(self.source, self.steps)

    def then(self, steps: Sequence[Step]) -> Placement:
        """This placement followed by more steps."""
        return Placement(self.source, (*self.steps, *steps))


def canvas_after(canvas: Canvas, steps: Sequence[Step]) -> Canvas:
    """The canvas after ``steps``."""
    for step in steps:
        canvas = step.canvas_after(canvas)
    return canvas


def move_boxes(boxes: torch.Tensor, format: str, canvas: Canvas, steps: Sequence[Step],
               clamping_mode: str | None = "soft") -> tuple[torch.Tensor, Canvas]:
    """The boxes (in ``format``, on ``canvas``) through every step, and the canvas they end on."""
    format = box_ops.check_format(format)
    for step in steps:
        boxes = step.move_boxes(boxes, format, canvas, clamping_mode)
        canvas = step.canvas_after(canvas)
    return boxes, canvas


def move_keypoints(points: torch.Tensor, canvas: Canvas,
                   steps: Sequence[Step]) -> tuple[torch.Tensor, Canvas]:
    """The ``(..., 2)`` points through every step, and the canvas they end on."""
    for step in steps:
        points = step.move_keypoints(points, canvas)
        canvas = step.canvas_after(canvas)
    return points, canvas


def move_masks(mask: torch.Tensor, steps: Sequence[Step]) -> torch.Tensor:
    """The dense mask through every step."""
    for step in steps:
        mask = step.move_masks(mask)
    return mask
