"""Keypoints moved as torchvision v2 moves them: crop, pad, resize, flips, clamp.

Keypoints are a tensor of shape ``(..., 2)`` holding ``(x, y)`` pixel
coordinates on a canvas ``(height, width)``. A keypoint is a pixel, not a
pixel boundary, so a flip maps ``x`` to ``W - 1 - x`` (boxes map to ``W - x``);
a crop or pad translates without clamping (a point may leave the canvas, and
keeps its visibility: torchvision's ``KeyPoints`` have none); a resize
multiplies by the float ratios of the new size to the old. Each function
computes what ``torchvision.transforms.v2.functional`` computes for the same
inputs, in the same order of operations.
"""

from __future__ import annotations

import torch

__all__ = ["horizontal_flip", "vertical_flip", "resize", "crop", "pad", "clamp"]

Canvas = tuple[int, int]


def horizontal_flip(points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
    """The points mirrored left to right: ``x -> W - 1 - x``."""
    return _flip(points, canvas[1], 0)


def vertical_flip(points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
    """The points mirrored top to bottom: ``y -> H - 1 - y``."""
    return _flip(points, canvas[0], 1)


def _flip(points: torch.Tensor, length: int, axis: int) -> torch.Tensor:
    shape = points.shape
    out = points.clone().reshape(-1, 2)
    out[..., axis] = out[..., axis].sub_(length - 1).neg_()
    return out.reshape(shape)


def resize(points: torch.Tensor, canvas: Canvas, size: Canvas) -> tuple[torch.Tensor, Canvas]:
    """The points of a canvas resized to ``size`` ``(height, width)``, and that canvas (unchanged
    points when the size is the same)."""
    if tuple(size) == tuple(canvas):
        return points, canvas
    ratios = torch.tensor([size[1] / canvas[1], size[0] / canvas[0]], device=points.device)
    return points.mul(ratios).to(points.dtype), (int(size[0]), int(size[1]))


def crop(points: torch.Tensor, top: int, left: int, height: int, width: int) -> tuple[torch.Tensor, Canvas]:
    """The points in the crop of rows ``[top, top + height)`` and columns ``[left, left + width)``."""
    moved = points - torch.tensor([left, top], dtype=points.dtype, device=points.device)
    return moved, (int(height), int(width))


def pad(points: torch.Tensor, canvas: Canvas,
        padding: tuple[int, int, int, int]) -> tuple[torch.Tensor, Canvas]:
    """The points of a canvas padded by ``padding`` ``(left, top, right, bottom)``, and its new size."""
    left, top, right, bottom = padding
    moved = points + torch.tensor([left, top], dtype=points.dtype, device=points.device)
    return moved, (canvas[0] + top + bottom, canvas[1] + left + right)


def clamp(points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
    """The points clamped onto the canvas's pixels: ``x`` in ``[0, W - 1]``, ``y`` in ``[0, H - 1]``."""
    dtype = points.dtype
    out = points.clone() if points.is_floating_point() else points.float()
    out[..., 0].clamp_(min=0, max=canvas[1] - 1)
    out[..., 1].clamp_(min=0, max=canvas[0] - 1)
    return out.to(dtype)
