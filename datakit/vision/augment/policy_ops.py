"""The operation spaces of torchvision's automatic augmentation policies, and one kernel call per operation.

AutoAugment, RandAugment, TrivialAugmentWide and AugMix all pick operations
by name from a space (``"ShearX"``, ``"Posterize"``, ...) and a magnitude
from that operation's ramp of ``num_bins`` values, negated half of the time
where the operation is signed. This module holds those spaces with
torchvision v2's ramps (``torchvision/transforms/v2/_auto_augment.py``), the
drawing of one operation, and :func:`apply_step`, which applies one drawn
operation per sample to a whole batch with one batched kernel call per
operation name: the samples that drew ``"Rotate"`` are gathered, rotated
together with their own angles and written back.

A magnitude means what torchvision's ``_apply_image_or_video_transform``
makes of it, on the tensor path: shears are ``degrees(atan(magnitude))``
about the top-left corner ``(0, 0)``, translations ``int(magnitude)`` whole
pixels (truncated toward zero), rotations degrees, colour factors
``1 + magnitude``, posterize ``int(magnitude)`` bits, and solarize a
threshold of ``255 * magnitude`` (torchvision scales the fraction by the
dtype's largest value for tensors, as PIL does with 255).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from datakit.vision.augment.rows import apply_to_rows
from datakit.vision.kernels.affine import affine, rotate
from datakit.vision.kernels.colour import (
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    invert,
    posterize,
    solarize,
)
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.affine import Affine, mask_fill
from datakit.vision.targets.steps import Step

__all__ = ["OpDraw", "Ramp", "SPACES", "Fill", "magnitude_at", "normal", "draw_magnitude", "draw_op",
           "apply_op", "apply_step", "interpolation_name", "fill_value", "torchvision_refuses", "op_steps"]

Fill = float | Sequence[float] | None


class OpDraw(NamedTuple):
    """One drawn operation: its name in the space and its signed magnitude, as torchvision passes them."""

    op: str
    magnitude: float


@dataclass(frozen=True)
class Ramp:
    """The magnitudes of one operation: ``num_bins`` values from ``start`` to ``end(height, width)``.

    ``integer`` ramps are rounded to whole numbers (Posterize's bits);
    ``signed`` magnitudes are negated with probability one half.
    """

    start: float
    end: Callable[[int, int], float]
    signed: bool
    integer: bool = False


def _const(value: float) -> Callable[[int, int], float]:
    return lambda height, width: value


_SHAPE = {
    "ShearX": Ramp(0.0, _const(0.3), True), "ShearY": Ramp(0.0, _const(0.3), True),
    "TranslateX": Ramp(0.0, lambda height, width: 150.0 / 331.0 * width, True),
    "TranslateY": Ramp(0.0, lambda height, width: 150.0 / 331.0 * height, True),
    "Rotate": Ramp(0.0, _const(30.0), True),
}
_COLOUR = {name: Ramp(0.0, _const(0.9), True) for name in ("Brightness", "Color", "Contrast", "Sharpness")}
_TONE: dict[str, Ramp | None] = {"Posterize": Ramp(8.0, _const(4.0), False, integer=True),
                                 "Solarize": Ramp(1.0, _const(0.0), False),
                                 "AutoContrast": None, "Equalize": None}
_AUGMIX_PARTIAL: dict[str, Ramp | None] = {
    "ShearX": _SHAPE["ShearX"], "ShearY": _SHAPE["ShearY"],
    "TranslateX": Ramp(0.0, lambda height, width: width / 3.0, True),
    "TranslateY": Ramp(0.0, lambda height, width: height / 3.0, True),
    "Rotate": _SHAPE["Rotate"], "Posterize": Ramp(4.0, _const(0.0), False, integer=True),
    "Solarize": _TONE["Solarize"], "AutoContrast": None, "Equalize": None,
}
_WIDE = Ramp(0.0, _const(0.99), True)

#: Every policy's space, in torchvision's order (an operation is drawn by its index).
SPACES: dict[str, dict[str, Ramp | None]] = {
    "AutoAugment": {**_SHAPE, **_COLOUR, **_TONE, "Invert": None},
    "RandAugment": {"Identity": None, **_SHAPE, **_COLOUR, **_TONE},
    "TrivialAugmentWide": {
        "Identity": None, "ShearX": _WIDE, "ShearY": _WIDE,
        "TranslateX": Ramp(0.0, _const(32.0), True), "TranslateY": Ramp(0.0, _const(32.0), True),
        "Rotate": Ramp(0.0, _const(135.0), True), "Brightness": _WIDE, "Color": _WIDE, "Contrast": _WIDE,
        "Sharpness": _WIDE, "Posterize": Ramp(8.0, _const(2.0), False, integer=True),
        "Solarize": _TONE["Solarize"], "AutoContrast": None, "Equalize": None,
    },
    "AugMix": {**_AUGMIX_PARTIAL, **_COLOUR},
    "AugMixPartial": _AUGMIX_PARTIAL,
}


@functools.lru_cache(maxsize=1024)
def _table(space: str, op: str, num_bins: int, height: int, width: int) -> tuple[float, ...]:
    """torchvision's magnitudes of ``op``: a float32 ``linspace`` (its rounding matters to
    ``int(magnitude)``), or for integer ramps ``round(start - i / ((num_bins - 1) / span))``."""
    ramp = SPACES[space][op]
    assert ramp is not None
    end = ramp.end(height, width)
    if ramp.integer:
        values = (ramp.start - torch.arange(num_bins) / ((num_bins - 1) / (ramp.start - end))).round().int()
    else:
        values = torch.linspace(ramp.start, end, num_bins)
    return tuple(float(value) for value in values.tolist())


def magnitude_at(space: str, op: str, level: float, num_bins: int, height: int, width: int) -> float:
    """The unsigned magnitude of ``op`` at bin ``level`` (``0 <= level <= num_bins - 1``).

    A whole ``level`` is torchvision's bin value exactly; a fractional one
    (RandAugment's ``magnitude_std``) lies on the same straight ramp between
    the bins, rounded for integer ramps.
    """
    if level == int(level):
        return _table(space, op, num_bins, height, width)[int(level)]
    ramp = SPACES[space][op]
    assert ramp is not None
    value = ramp.start + (ramp.end(height, width) - ramp.start) * level / (num_bins - 1)
    return float(round(value)) if ramp.integer else value


def normal(rand: SampleRandom, mean: float, std: float) -> float:
    """A float drawn from ``Normal(mean, std)`` (Box-Muller over two uniforms)."""
    radius = math.sqrt(-2.0 * math.log(1.0 - rand.random()))
    return mean + std * radius * math.cos(2.0 * math.pi * rand.random())


def draw_magnitude(rand: SampleRandom, space: str, op: str, level: float, num_bins: int, height: int,
                   width: int) -> OpDraw:
    """``op`` with its magnitude at bin ``level``, negated with probability one half where signed."""
    ramp = SPACES[space][op]
    if ramp is None:
        return OpDraw(op, 0.0)
    magnitude = magnitude_at(space, op, level, num_bins, height, width)
    if ramp.signed and rand.random() < 0.5:
        magnitude = -magnitude
    return OpDraw(op, magnitude)


def draw_op(rand: SampleRandom, space: str, num_bins: int, height: int, width: int,
            level: Callable[[SampleRandom], float]) -> OpDraw:
    """One operation drawn uniformly from ``space``, its bin from ``level(rand)`` (drawn only for
    operations with a magnitude, as torchvision does), its sign by a coin."""
    names = tuple(SPACES[space])
    op = names[rand.integers(0, len(names))]
    if SPACES[space][op] is None:
        return OpDraw(op, 0.0)
    return draw_magnitude(rand, space, op, level(rand), num_bins, height, width)


def _parameters(values: Sequence[Any], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _shear(images: torch.Tensor, shears: Sequence[tuple[float, float]], interpolation: str,
           fill: Fill) -> torch.Tensor:
    count = len(shears)
    degrees = _parameters([[math.degrees(math.atan(sx)), math.degrees(math.atan(sy))] for sx, sy in shears])
    return affine(images, torch.zeros(count, dtype=torch.float64), torch.zeros(count, 2, dtype=torch.float64),
                  torch.ones(count, dtype=torch.float64), degrees, interpolation=interpolation, fill=fill,
                  center=(0.0, 0.0))


def _translate(images: torch.Tensor, shifts: Sequence[tuple[float, float]], interpolation: str,
               fill: Fill) -> torch.Tensor:
    count = len(shifts)
    pixels = _parameters([[float(int(tx)), float(int(ty))] for tx, ty in shifts])
    return affine(images, torch.zeros(count, dtype=torch.float64), pixels,
                  torch.ones(count, dtype=torch.float64), torch.zeros(count, 2, dtype=torch.float64),
                  interpolation=interpolation, fill=fill)


def _factor(kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    return lambda images, magnitudes, interpolation, fill: kernel(
        images, _parameters([1.0 + magnitude for magnitude in magnitudes]))


def _plain(kernel: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    return lambda images, magnitudes, interpolation, fill: kernel(images)


_KERNELS: dict[str, Callable[[torch.Tensor, Sequence[float], str, Fill], torch.Tensor]] = {
    "ShearX": lambda images, magnitudes, interpolation, fill: _shear(
        images, [(magnitude, 0.0) for magnitude in magnitudes], interpolation, fill),
    "ShearY": lambda images, magnitudes, interpolation, fill: _shear(
        images, [(0.0, magnitude) for magnitude in magnitudes], interpolation, fill),
    "TranslateX": lambda images, magnitudes, interpolation, fill: _translate(
        images, [(magnitude, 0.0) for magnitude in magnitudes], interpolation, fill),
    "TranslateY": lambda images, magnitudes, interpolation, fill: _translate(
        images, [(0.0, magnitude) for magnitude in magnitudes], interpolation, fill),
    "Rotate": lambda images, magnitudes, interpolation, fill: rotate(
        images, _parameters(magnitudes), interpolation=interpolation, fill=fill),
    "Brightness": _factor(adjust_brightness), "Color": _factor(adjust_saturation),
    "Contrast": _factor(adjust_contrast), "Sharpness": _factor(adjust_sharpness),
    "Posterize": lambda images, magnitudes, interpolation, fill: posterize(
        images, _parameters([int(magnitude) for magnitude in magnitudes], torch.int64)),
    "Solarize": lambda images, magnitudes, interpolation, fill: solarize(
        images, _parameters([255.0 * magnitude for magnitude in magnitudes])),
    "AutoContrast": _plain(autocontrast), "Equalize": _plain(equalize), "Invert": _plain(invert),
}


def apply_op(images: torch.Tensor, op: str, magnitudes: Sequence[float], interpolation: str,
             fill: Fill) -> torch.Tensor:
    """Operation ``op`` applied to every image of ``images`` with its own magnitude, as torchvision's
    ``_apply_image_or_video_transform(image, op, magnitude, interpolation, fill)`` does to one."""
    if op == "Identity":
        return images
    return _KERNELS[op](images, magnitudes, interpolation, fill)


def apply_step(images: torch.Tensor, draws: Sequence[OpDraw | None], interpolation: str,
               fill: Fill) -> torch.Tensor:
    """Sample ``i`` of ``images`` changed by ``draws[i]`` (None: left as it is), one kernel call per
    operation name over the samples that drew it; ``images`` is written in place and returned."""
    groups: dict[str, list[int]] = {}
    for index, draw in enumerate(draws):
        if draw is not None and draw.op != "Identity":
            groups.setdefault(draw.op, []).append(index)
    for op, rows in groups.items():
        magnitudes = [draws[row].magnitude for row in rows]  # type: ignore[union-attr]
        images = apply_to_rows(images, rows, functools.partial(
            apply_op, op=op, magnitudes=magnitudes, interpolation=interpolation, fill=fill))
    return images


_PIL_MODES = {0: "nearest", 2: "bilinear"}


def interpolation_name(interpolation: Any) -> str:
    """``"nearest"`` or ``"bilinear"`` from a string, a torchvision ``InterpolationMode`` (read by
    value, torchvision is not imported) or Pillow's integer constant; the kernels have no other."""
    value = getattr(interpolation, "value", interpolation)
    value = _PIL_MODES.get(value, value) if isinstance(value, int) else value
    if value not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be 'nearest' or 'bilinear' (the batched kernels' modes), "
                         f"not {interpolation!r}")
    return str(value)


def fill_value(fill: Any) -> Fill:
    """``fill`` as torchvision keeps it: None (zeros), one number, or one number per channel."""
    if fill is None:
        return None
    if isinstance(fill, (int, float)):
        return float(fill)
    if isinstance(fill, Sequence) and all(isinstance(value, (int, float)) for value in fill):
        return [float(value) for value in fill]
    raise TypeError(f"fill must be None, a number or a sequence of numbers, not {fill!r}")


def torchvision_refuses(name: str) -> str:
    """Why the policy ``name`` refuses samples with boxes, masks or keypoints: torchvision v2's policies
    (``_AutoAugmentBase``) raise ``TypeError: Inputs of type BoundingBoxes are not supported by
    RandAugment()`` for them, and datakit keeps torchvision's semantics rather than invent its own."""
    return (f"{name} does not move boxes, masks or keypoints, as torchvision v2's {name} refuses them "
            f"(\"Inputs of type BoundingBoxes are not supported by {name}()\")")


def op_steps(draw: OpDraw | None, fill: Fill) -> tuple[Step, ...]:
    """The geometric steps of one drawn operation, for its boxes, masks and keypoints: the ``affine`` or
    ``rotate`` call torchvision's ``_apply_image_or_video_transform`` makes for the image (shears about
    the corner ``(0, 0)``, translations by whole pixels, rotations about the centre); none for the
    colour operations, Identity and a step that did not fire. Masks take ``fill`` when it is one number."""
    if draw is None:
        return ()
    masks = mask_fill(fill)
    if draw.op in ("ShearX", "ShearY"):
        degrees = math.degrees(math.atan(draw.magnitude))
        shear = (degrees, 0.0) if draw.op == "ShearX" else (0.0, degrees)
        return (Affine(shear=shear, center=(0.0, 0.0), fill=masks),)
    if draw.op in ("TranslateX", "TranslateY"):
        pixels = float(int(draw.magnitude))
        return (Affine(translate=(pixels, 0.0) if draw.op == "TranslateX" else (0.0, pixels), fill=masks),)
    if draw.op == "Rotate":
        return (Affine.rotate(draw.magnitude, fill=masks),)
    return ()
