"""Bounding boxes moved as torchvision v2 moves them: format conversion, clamping, flips, resize, crop, pad.

Each function takes the boxes as a tensor of shape ``(..., 4)`` in one of
the axis-aligned formats torchvision names ``XYXY``, ``XYWH`` and
``CXCYWH``, with the canvas ``(height, width)`` they lie on, and computes
what ``torchvision.transforms.v2.functional`` computes for the same inputs,
in the same order of operations (so float32 boxes give the same float32
values): a flip mirrors about the canvas edge (``W - x``: a box edge is a
pixel boundary, unlike a keypoint, :mod:`.keypoints`); a resize multiplies by
the float ratios of the new size to the old and does not clamp; a crop
translates then clamps to the crop; a pad translates then clamps to the
padded canvas. Clamping modes are torchvision's: ``"soft"`` (its default) and
``"hard"`` are the same for axis-aligned boxes (each coordinate clamped to the
canvas), ``None`` leaves boxes outside the canvas as they are. Boxes that end
up outside or empty are kept (torchvision's ``SanitizeBoundingBoxes`` removes
them), so boxes stay aligned with their labels, masks and keypoints.

Floating-point boxes are computed in their own dtype; integer boxes are
clamped through float32 and truncated back, as torchvision does.
"""

from __future__ import annotations

import torch

__all__ = ["FORMATS", "CLAMPING_MODES", "Canvas", "check_format", "convert_format", "clamp",
           "horizontal_flip", "vertical_flip", "resize", "crop", "pad"]

FORMATS = ("XYXY", "XYWH", "CXCYWH")
"""The axis-aligned formats, by torchvision's ``BoundingBoxFormat`` names."""
CLAMPING_MODES = ("soft", "hard", None)
"""torchvision's clamping modes; the same for axis-aligned boxes but ``None``, which does not clamp."""

Canvas = tuple[int, int]
"""``(height, width)`` of the image the boxes lie on."""


def check_format(format: str) -> str:
    """``format`` upper-cased, if it is one of :data:`FORMATS`.

    Raises:
        ValueError: another format (torchvision's rotated formats among them), named.
    """
    name = str(format).upper()
    if name not in FORMATS:
        raise ValueError(f"boxes in format {format!r} cannot be moved: datakit.vision moves "
                         f"{', '.join(FORMATS)} boxes (rotated boxes are not supported)")
    return name


def convert_format(boxes: torch.Tensor, old: str, new: str) -> torch.Tensor:
    """The boxes converted from format ``old`` to ``new`` (a new tensor, unless the formats are equal)."""
    old, new = check_format(old), check_format(new)
    if old == new:
        return boxes
    if (old, new) == ("XYWH", "CXCYWH"):
        out = boxes.clone()
        out[..., :2].add_(out[..., 2:].div(2, rounding_mode=_rounding(out)))
        return out
    if (old, new) == ("CXCYWH", "XYWH"):
        return _centre_to_corner(boxes)
    corners = _to_xyxy(boxes, old)
    if new == "XYXY":
        return corners
    if new == "XYWH":
        corners[..., 2:] -= corners[..., :2]
        return corners
    corners[..., 2:].sub_(corners[..., :2])
    corners[..., :2].mul_(2).add_(corners[..., 2:]).div_(2, rounding_mode=_rounding(corners))
    return corners


def _rounding(boxes: torch.Tensor) -> str | None:
    """Division as torchvision divides box coordinates: true division, floor for integers."""
    return None if boxes.is_floating_point() else "floor"


def _to_xyxy(boxes: torch.Tensor, old: str) -> torch.Tensor:
    """A new tensor of the boxes as corners."""
    if old == "XYXY":
        return boxes.clone()
    if old == "XYWH":
        corners = boxes.clone()
        corners[..., 2:] += corners[..., :2]
        return corners
    dtype = boxes.dtype
    centres = boxes.clone() if boxes.is_floating_point() else boxes.float()
    half = centres[..., 2:] / 2
    centres[..., :2].sub_(half)
    centres[..., 2:].add_(centres[..., :2])
    return centres.to(dtype)


def _centre_to_corner(boxes: torch.Tensor) -> torch.Tensor:
    """CXCYWH to XYWH, integers through floats as the two-step conversion gives them."""
    dtype = boxes.dtype
    floating = boxes.is_floating_point()
    out = boxes.clone() if floating else boxes.float()
    out[..., :2].sub_(out[..., 2:] / 2)
    if floating:
        return out
    far = (out[..., :2] + out[..., 2:]).to(dtype)
    out = out.to(dtype)
    out[..., 2:] = far - out[..., :2]
    return out


def clamp(boxes: torch.Tensor, format: str, canvas: Canvas, mode: str | None = "soft") -> torch.Tensor:
    """The boxes clamped to the canvas: every corner within ``[0, width]`` x ``[0, height]``.

    Raises:
        ValueError: ``mode`` is not one of :data:`CLAMPING_MODES`.
    """
    if mode not in CLAMPING_MODES:
        raise ValueError(f"clamping_mode must be 'soft', 'hard' or None, not {mode!r}")
    format = check_format(format)
    if mode is None:
        return boxes.clone()
    dtype = boxes.dtype
    work = boxes if boxes.is_floating_point() else boxes.float()
    corners = _to_xyxy(work, format)
    corners[..., 0::2].clamp_(min=0, max=canvas[1])
    corners[..., 1::2].clamp_(min=0, max=canvas[0])
    return convert_format(corners, "XYXY", format).to(dtype)


def horizontal_flip(boxes: torch.Tensor, format: str, canvas: Canvas) -> torch.Tensor:
    """The boxes mirrored left to right on a canvas of ``canvas[1]`` columns (``x -> W - x``)."""
    return _flip(boxes, check_format(format), canvas[1], 0)


def vertical_flip(boxes: torch.Tensor, format: str, canvas: Canvas) -> torch.Tensor:
    """The boxes mirrored top to bottom on a canvas of ``canvas[0]`` rows (``y -> H - y``)."""
    return _flip(boxes, check_format(format), canvas[0], 1)


def _flip(boxes: torch.Tensor, format: str, length: int, axis: int) -> torch.Tensor:
    shape = boxes.shape
    out = boxes.clone().reshape(-1, 4)
    if format == "XYXY":
        out[:, [axis + 2, axis]] = out[:, [axis, axis + 2]].sub_(length).neg_()
    elif format == "XYWH":
        out[:, axis].add_(out[:, axis + 2]).sub_(length).neg_()
    else:
        out[:, axis].sub_(length).neg_()
    return out.reshape(shape)


def resize(boxes: torch.Tensor, canvas: Canvas, size: Canvas) -> tuple[torch.Tensor, Canvas]:
    """The boxes of a canvas resized to ``size`` ``(height, width)``, and that canvas.

    Every coordinate is multiplied by its side's ratio (new / old, as a
    float32 factor, torchvision's), whatever the format; nothing is clamped.
    A canvas that keeps its size gives the boxes back unchanged.
    """
    if tuple(size) == tuple(canvas):
        return boxes, canvas
    width_ratio, height_ratio = size[1] / canvas[1], size[0] / canvas[0]
    ratios = torch.tensor([width_ratio, height_ratio, width_ratio, height_ratio], device=boxes.device)
    return boxes.mul(ratios).to(boxes.dtype), (int(size[0]), int(size[1]))


def crop(boxes: torch.Tensor, format: str, top: int, left: int, height: int, width: int,
         mode: str | None = "soft") -> tuple[torch.Tensor, Canvas]:
    """The boxes in the crop of rows ``[top, top + height)`` and columns ``[left, left + width)``.

    The crop may reach past the canvas (negative ``top`` or ``left``, or
    beyond its far edges: torchvision pads there); boxes are translated by
    ``(-left, -top)`` and clamped to the crop by ``mode``.
    """
    format = check_format(format)
    shift = [left, top, left, top] if format == "XYXY" else [left, top, 0, 0]
    moved = boxes - torch.tensor(shift, dtype=boxes.dtype, device=boxes.device)
    canvas = (int(height), int(width))
    return clamp(moved, format, canvas, mode), canvas


def pad(boxes: torch.Tensor, format: str, canvas: Canvas, padding: tuple[int, int, int, int],
        mode: str | None = "soft") -> tuple[torch.Tensor, Canvas]:
    """The boxes of a canvas padded by ``padding`` ``(left, top, right, bottom)`` pixels, and its new size.

    Boxes are translated by ``(left, top)`` and clamped to the padded canvas
    by ``mode`` (torchvision pads boxes only for ``padding_mode="constant"``:
    the callers refuse the other modes with targets).
    """
    format = check_format(format)
    left, top, right, bottom = padding
    shift = [left, top, left, top] if format == "XYXY" else [left, top, 0, 0]
    moved = boxes + torch.tensor(shift, dtype=boxes.dtype, device=boxes.device)
    padded = (canvas[0] + top + bottom, canvas[1] + left + right)
    return clamp(moved, format, padded, mode), padded
