"""torchvision v2's shape-keeping geometric augmentations as batched operations.

``RandomVerticalFlip``, ``RandomRotation`` (``expand=False``) and
``RandomAffine`` take their torchvision namesakes' arguments, defaults and
validation, and draw one sample's parameters with torchvision's
distributions: a flip fires when a uniform draw is below ``p``; angles,
scales and shears are uniform over their ranges; a translation is uniform
over ``+-fraction * size`` and rounded half to even to whole pixels, as
``RandomAffine.make_params`` does. The pixels come from
:mod:`datakit.vision.kernels.affine`, which follows torchvision's tensor path
exactly (its PIL path rounds differently).

All three move a sample's boxes, masks and keypoints (``target_support =
"moved"``): each draw gives one step, a :class:`~datakit.vision.targets.affine.Affine`
warp (torchvision's ``affine``, or its ``rotate`` for ``RandomRotation``) or
a vertical flip, which the targets follow as torchvision's kernels move
them; masks take the operation's fill when it is one number.

``RandomRotation(expand=True)`` is refused: it changes the image's size, so
its samples no longer fit one batch.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp, as_image_batch
from datakit.vision.augment.rows import apply_to_rows
from datakit.vision.kernels import affine as kernels
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.affine import Affine, mask_fill
from datakit.vision.targets.steps import Step, VerticalFlip

__all__ = ["RandomVerticalFlip", "RandomRotation", "RandomAffine", "AffineParams"]

Fill = float | Sequence[float] | None


@dataclass(frozen=True)
class AffineParams:
    """One sample's RandomAffine draw, the arguments of ``v2.functional.affine``.

    Attributes:
        angle: degrees. translate: whole pixels ``(tx, ty)``. scale: factor.
        shear: degrees ``(sx, sy)``.
    """

    angle: float
    translate: tuple[int, int]
    scale: float
    shear: tuple[float, float]


def _checked(images: torch.Tensor, params: Sequence[Any], name: str) -> torch.Tensor:
    images = as_image_batch(images, name)
    if len(params) != images.shape[0]:
        raise ValueError(f"{name} got {len(params)} parameters for a batch of {images.shape[0]}")
    return images


def _angle_range(value: Any, name: str, sizes: tuple[int, ...] = (2,)) -> list[float]:
    """torchvision's ``_setup_angle``: a number ``x`` is ``[-x, x]``, a sequence is kept."""
    if isinstance(value, numbers.Number):
        if value < 0:  # type: ignore[operator]
            raise ValueError(f"If {name} is a single number, it must be positive.")
        return [-float(value), float(value)]  # type: ignore[arg-type]
    _check_sequence(value, name, sizes)
    return [float(bound) for bound in value]


def _check_sequence(value: Any, name: str, sizes: tuple[int, ...]) -> None:
    wanted = " or ".join(str(size) for size in sizes)
    if not isinstance(value, Sequence):
        raise TypeError(f"{name} should be a sequence of length {wanted}.")
    if len(value) not in sizes:
        raise ValueError(f"{name} should be a sequence of length {wanted}.")


def _fill(fill: Any) -> Fill:
    """torchvision's fill argument for images: None, a number, or one number per channel."""
    if fill is None:
        return None
    if isinstance(fill, numbers.Real) and not isinstance(fill, bool):
        return float(fill)
    if isinstance(fill, (tuple, list)):
        return [float(value) for value in fill]
    if isinstance(fill, dict):
        raise TypeError("datakit's geometric operations take one fill for images, not a dict by type")
    raise TypeError("Got inappropriate fill arg, only Numbers, tuples, lists and dicts are allowed.")


def _center(center: Any) -> tuple[float, float] | None:
    if center is None:
        return None
    _check_sequence(center, "center", (2,))
    return float(center[0]), float(center[1])


class RandomVerticalFlip(SampleOp):
    """Flip the image upside down with probability ``p``: torchvision's ``RandomVerticalFlip`` (exact)."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"`p` should be a floating point value in the interval [0.0, 1.0], got {p}.")
        self.p = float(p)

    target_support = "moved"

    def draw(self, rand: SampleRandom, height: int, width: int) -> bool | None:
        return True if rand.random() < self.p else None

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        return (VerticalFlip(),) if params else ()

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked(images, params, "RandomVerticalFlip")
        rows = [row for row, flip in enumerate(params) if flip]
        return apply_to_rows(images, rows, kernels.vertical_flip)

    def __repr__(self) -> str:
        return f"RandomVerticalFlip(p={self.p})"


class RandomRotation(SampleOp):
    """Rotate the image by a random angle, keeping its size: torchvision's ``RandomRotation``.

    Args:
        degrees: a number ``d`` draws from ``[-d, d]``; a pair ``(min, max)``.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's mode).
        expand: only False (the size must stay that of the batch).
        center: ``(x, y)`` pixel of the rotation centre; None is the image centre.
        fill: colour of the corners from outside: a number or one per channel;
            None pads with zeros without torchvision's mask channel.
    """

    def __init__(self, degrees: float | Sequence[float], interpolation: Any = "nearest",
                 expand: bool = False, center: Sequence[float] | None = None, fill: Any = 0) -> None:
        self.degrees = _angle_range(degrees, "degrees")
        self.interpolation = interpolation
        self.mode = kernels.interpolation_mode(interpolation)
        if expand:
            raise ValueError("RandomRotation(expand=True) changes the image size; a batched "
                             "operation keeps it: use expand=False")
        self.expand = False
        self.center = _center(center)
        self.fill = _fill(fill)

    target_support = "moved"

    def draw(self, rand: SampleRandom, height: int, width: int) -> float:
        return rand.uniform(self.degrees[0], self.degrees[1])

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        if params is None:
            return ()
        return (Affine.rotate(float(params), self.center, mask_fill(self.fill)),)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked(images, params, "RandomRotation")
        rows = [row for row, angle in enumerate(params) if angle is not None]
        angles = torch.tensor([float(params[row]) for row in rows], dtype=torch.float64)
        return apply_to_rows(images, rows, lambda chosen: self._rotate(chosen, angles))

    def _rotate(self, images: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        if self.center is None:
            return kernels.rotate(images, angles, interpolation=self.mode, fill=self.fill)
        # torchvision rotates about a given centre with the affine matrix of -(angle mod 360)
        count = angles.shape[0]
        zeros = torch.zeros(count, 2, dtype=torch.float64)
        turned = torch.tensor([-(angle % 360) for angle in angles.tolist()], dtype=torch.float64)
        return kernels.affine(images, turned, zeros, torch.ones(count, dtype=torch.float64), zeros,
                              interpolation=self.mode, fill=self.fill, center=self.center)

    def __repr__(self) -> str:
        return (f"RandomRotation(degrees={self.degrees}, interpolation={self.mode!r}, expand=False, "
                f"center={self.center}, fill={self.fill})")


class RandomAffine(SampleOp):
    """A random affine warp keeping the centre: torchvision's ``RandomAffine``.

    Args:
        degrees: rotation range; a number ``d`` is ``[-d, d]``; 0 turns it off.
        translate: ``(a, b)`` maximal fractions of the width and height to shift by.
        scale: ``(low, high)`` range of the scale factor; None keeps the scale.
        shear: a number ``s`` shears along x within ``[-s, s]``; 2 values are
            the x range; 4 values the x then y ranges; None does not shear.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's mode).
        fill: colour of pixels from outside (see :class:`RandomRotation`).
        center: ``(x, y)`` pixel kept in place; None is the image centre.
    """

    def __init__(self, degrees: float | Sequence[float], translate: Sequence[float] | None = None,
                 scale: Sequence[float] | None = None, shear: float | Sequence[float] | None = None,
                 interpolation: Any = "nearest", fill: Any = 0,
                 center: Sequence[float] | None = None) -> None:
        self.degrees = _angle_range(degrees, "degrees")
        if translate is not None:
            _check_sequence(translate, "translate", (2,))
            if not all(0.0 <= fraction <= 1.0 for fraction in translate):
                raise ValueError("translation values should be between 0 and 1")
        self.translate = None if translate is None else (float(translate[0]), float(translate[1]))
        if scale is not None:
            _check_sequence(scale, "scale", (2,))
            if not all(factor > 0 for factor in scale):
                raise ValueError("scale values should be positive")
        self.scale = None if scale is None else (float(scale[0]), float(scale[1]))
        self.shear = None if shear is None else _angle_range(shear, "shear", (2, 4))
        self.interpolation = interpolation
        self.mode = kernels.interpolation_mode(interpolation)
        self.fill = _fill(fill)
        self.center = _center(center)

    def draw(self, rand: SampleRandom, height: int, width: int) -> AffineParams:
        angle = rand.uniform(self.degrees[0], self.degrees[1])
        shift = (0, 0)
        if self.translate is not None:
            most_x, most_y = self.translate[0] * width, self.translate[1] * height
            shift = (int(round(rand.uniform(-most_x, most_x))), int(round(rand.uniform(-most_y, most_y))))
        factor = 1.0 if self.scale is None else rand.uniform(self.scale[0], self.scale[1])
        shear = (0.0, 0.0)
        if self.shear is not None:
            shear_x = rand.uniform(self.shear[0], self.shear[1])
            shear = (shear_x, rand.uniform(self.shear[2], self.shear[3]) if len(self.shear) == 4 else 0.0)
        return AffineParams(angle, shift, factor, shear)

    target_support = "moved"

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        if params is None:
            return ()
        return (Affine(params.angle, (float(params.translate[0]), float(params.translate[1])), params.scale,
                       params.shear, self.center, mask_fill(self.fill)),)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked(images, params, "RandomAffine")
        rows = [row for row, draw in enumerate(params) if draw is not None]
        chosen: list[AffineParams] = [params[row] for row in rows]
        angles = torch.tensor([draw.angle for draw in chosen], dtype=torch.float64)
        shifts = torch.tensor([[float(value) for value in draw.translate] for draw in chosen],
                              dtype=torch.float64).view(-1, 2)
        scales = torch.tensor([draw.scale for draw in chosen], dtype=torch.float64)
        shears = torch.tensor([list(draw.shear) for draw in chosen], dtype=torch.float64).view(-1, 2)
        return apply_to_rows(images, rows, lambda subset: kernels.affine(
            subset, angles, shifts, scales, shears, interpolation=self.mode, fill=self.fill,
            center=self.center))

    def __repr__(self) -> str:
        return (f"RandomAffine(degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
                f"shear={self.shear}, interpolation={self.mode!r}, fill={self.fill}, center={self.center})")
