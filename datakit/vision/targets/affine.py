"""Boxes, masks and keypoints through an affine warp, as torchvision v2's ``affine`` and ``rotate`` move them.

torchvision moves targets with the forward matrix of the warp (its
``_get_inverse_affine_matrix(..., inverted=False)``, in double precision,
then rounded to the targets' dtype): a box's four corners are moved and the
box becomes the axis-aligned box that encloses them, then is clamped to the
canvas by its ``clamping_mode``; keypoints are moved and never clamped;
masks are warped as images with nearest sampling, pixels from outside
taking the operation's fill. ``rotate`` is ``affine`` by ``-angle`` for
boxes and keypoints, while its masks take the image kernel's shortcuts (a
rotation by 0 or 180 degrees, or 90 or 270 on a square, is a copy or a
``rot90``).

Masks here go through the same batched pixel kernel as the image
(:mod:`datakit.vision.kernels.affine`), without converting them to floats:
the nearest warp is a choice of one source pixel (or none) per output
pixel, so the kernel warps an image of pixel indices (four bytes per pixel)
and the mask's values, of any dtype, are gathered through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from datakit.errors import TransformError
from datakit.vision.kernels import affine as kernels
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.steps import Step

__all__ = ["Affine", "forward_matrix", "affine_boxes", "affine_keypoints", "warp_mask", "mask_fill"]


def mask_fill(fill: float | Sequence[float] | None) -> float | None:
    """The masks' fill for an operation's image ``fill``: its one number (zeros for None), as torchvision
    gives masks the same fill; None for one number per channel, which masks cannot take (torchvision
    fails on it too)."""
    if fill is None:
        return 0.0
    if isinstance(fill, (int, float)):
        return float(fill)
    return float(fill[0]) if len(fill) == 1 else None


def forward_matrix(center: tuple[float, float], angle: float, translate: tuple[float, float], scale: float,
                   shear: tuple[float, float]) -> list[float]:
    """The 2x3 matrix (row-major) taking input pixels to output pixels: torchvision's
    ``_get_inverse_affine_matrix(center, angle, translate, scale, shear, inverted=False)``, with its order
    of operations (so its float rounding). ``center`` is in pixels of the canvas."""
    rotation, shear_x, shear_y = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cos_y, tan_x = math.cos(shear_y), math.tan(shear_x)
    a = math.cos(rotation - shear_y) / cos_y
    b = -(a * tan_x + math.sin(rotation))
    c = math.sin(rotation - shear_y) / cos_y
    d = math.cos(rotation) - c * tan_x
    matrix = [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0]
    matrix[2] += center[0] + translate[0] - matrix[0] * center[0] - matrix[1] * center[1]
    matrix[5] += center[1] + translate[1] - matrix[3] * center[0] - matrix[4] * center[1]
    return matrix


def _moved_points(points: torch.Tensor, matrix: list[float]) -> torch.Tensor:
    """``(P, 2)`` points through the matrix, in their dtype, as torchvision multiplies them."""
    transposed = torch.tensor(matrix, dtype=points.dtype, device=points.device).reshape(2, 3).T
    ones = torch.ones(points.shape[0], 1, dtype=points.dtype, device=points.device)
    return torch.matmul(torch.cat([points, ones], dim=-1), transposed)


def affine_boxes(boxes: torch.Tensor, format: str, canvas: Canvas, matrix: list[float],
                 clamping_mode: str | None = "soft") -> torch.Tensor:
    """Boxes (``(..., 4)`` in ``format``) through the forward ``matrix``: the box enclosing the four moved
    corners, clamped to ``canvas`` by ``clamping_mode``; torchvision's ``affine_bounding_boxes``.

    Integer boxes are moved as float32 and truncated back, as torchvision does.
    """
    format = box_ops.check_format(format)
    if boxes.numel() == 0:
        return boxes
    shape, dtype = boxes.shape, boxes.dtype
    cast = not boxes.is_floating_point()
    work = boxes.float() if cast else boxes.clone()
    corners = box_ops.convert_format(work, format, "XYXY").reshape(-1, 4)
    points = corners[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
    moved = _moved_points(points, matrix).reshape(-1, 4, 2)
    lows, highs = torch.aminmax(moved, dim=1)
    out = box_ops.clamp(torch.cat([lows, highs], dim=1), "XYXY", canvas, clamping_mode)
    out = box_ops.convert_format(out, "XYXY", format).reshape(shape)
    return out.to(dtype) if cast else out


def affine_keypoints(points: torch.Tensor, matrix: list[float]) -> torch.Tensor:
    """``(..., 2)`` keypoints through the forward ``matrix``, not clamped; torchvision's
    ``affine_keypoints``."""
    if points.numel() == 0:
        return points
    dtype = points.dtype
    work = points.clone() if points.is_floating_point() else points.float()
    return _moved_points(work.reshape(-1, 2), matrix).reshape(points.shape).to(dtype)


def _index_image(height: int, width: int) -> torch.Tensor:
    """A ``(1, 4, H, W)`` uint8 image whose pixel ``(y, x)`` holds ``y * W + x + 1`` in four bytes."""
    index = torch.arange(1, height * width + 1, dtype=torch.int64).view(1, 1, height, width)
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int64).view(1, 4, 1, 1)
    return ((index >> shifts) & 255).to(torch.uint8)


def _read_index(warped: torch.Tensor) -> torch.Tensor:
    """The ``(H, W)`` int64 indices back from a warped :func:`_index_image` (0: from outside)."""
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int64).view(4, 1, 1)
    return (warped[0].to(torch.int64) << shifts).sum(dim=0)


def _fill_value(fill: float, dtype: torch.dtype) -> torch.Tensor:
    """``fill`` in the mask's dtype, as torchvision's float result is cast back (rounded for integers)."""
    value = torch.tensor(float(fill), dtype=torch.float64)
    return (value if dtype.is_floating_point else value.round()).to(dtype)


def warp_mask(mask: torch.Tensor, warp: Affine, fill: float) -> torch.Tensor:
    """The ``(..., H, W)`` mask warped with nearest sampling, ``fill`` where pixels come from outside:
    torchvision's ``affine_mask`` or ``rotate_mask`` (by ``warp.rotation``), equal."""
    height, width = int(mask.shape[-2]), int(mask.shape[-1])
    if height * width >= 1 << 32:
        raise TransformError(f"a mask of {width}x{height} is too large to warp (under 2**32 pixels)")
    indices = _index_image(height, width)
    if warp.rotation is not None and warp.center is None:
        warped = kernels.rotate(indices, torch.tensor([warp.rotation], dtype=torch.float64))
    else:
        angle = -(warp.rotation % 360) if warp.rotation is not None else warp.angle
        warped = kernels.affine(indices, torch.tensor([angle], dtype=torch.float64),
                                torch.tensor([warp.translate], dtype=torch.float64),
                                torch.tensor([warp.scale], dtype=torch.float64),
                                torch.tensor([warp.shear], dtype=torch.float64), center=warp.center)
    source = _read_index(warped).view(-1)
    planes = mask.reshape(-1, height * width)
    out = planes[:, (source - 1).clamp_(min=0)]
    outside = (source == 0).expand_as(out)
    out[outside] = _fill_value(fill, mask.dtype)
    return out.reshape(mask.shape)


@dataclass(frozen=True)
class Affine(Step):
    """An affine warp keeping the canvas: ``v2.functional.affine(angle, translate, scale, shear, center)``,
    or ``v2.functional.rotate(angle, expand=False, center)`` when made by :meth:`rotate`.

    Attributes:
        angle: degrees, clockwise (torchvision's affine's); a rotation's is ``-rotation``.
        translate: pixels ``(tx, ty)``. scale: factor. shear: degrees ``(sx, sy)``.
        center: ``(x, y)`` pixel the warp keeps in place; None is the canvas centre.
        fill: the masks' value for pixels from outside; None where the operation's fill is one
            per channel, which masks cannot take.
        rotation: the counter-clockwise angle of ``rotate``, whose masks take its shortcuts; None
            for ``affine``.
    """

    angle: float = 0.0
    translate: tuple[float, float] = (0.0, 0.0)
    scale: float = 1.0
    shear: tuple[float, float] = (0.0, 0.0)
    center: tuple[float, float] | None = None
    fill: float | None = 0.0
    rotation: float | None = None

    @classmethod
    def rotate(cls, angle: float, center: tuple[float, float] | None = None,
               fill: float | None = 0.0) -> Affine:
        """``v2.functional.rotate(angle, expand=False, center=center)``: counter-clockwise degrees."""
        return cls(angle=-float(angle), center=center, fill=fill, rotation=float(angle))

    def matrix(self, canvas: Canvas) -> list[float]:
        """The forward matrix on ``canvas``."""
        center = self.center if self.center is not None else (canvas[1] * 0.5, canvas[0] * 0.5)
        return forward_matrix(center, self.angle, self.translate, self.scale, self.shear)

    def canvas_after(self, canvas: Canvas) -> Canvas:
        return canvas

    def move_boxes(self, boxes: torch.Tensor, format: str, canvas: Canvas,
                   clamping_mode: str | None) -> torch.Tensor:
        return affine_boxes(boxes, format, canvas, self.matrix(canvas), clamping_mode)

    def move_keypoints(self, points: torch.Tensor, canvas: Canvas) -> torch.Tensor:
        return affine_keypoints(points, self.matrix(canvas))

    def move_masks(self, mask: torch.Tensor) -> torch.Tensor:
        if self.fill is None:
            raise TransformError("an affine warp (RandomAffine, RandomRotation, a policy's geometric "
                                 "operation) fills masks with one value, not one per channel: give the "
                                 "operation one number as its fill to move masks")
        return warp_mask(mask, self, self.fill)
