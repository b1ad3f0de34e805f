"""torchvision v2's ``RandomPhotometricDistort`` (SSD) as a batched colour operation.

Each of brightness, contrast, saturation and hue fires with probability ``p``
and draws its factor uniformly from its range; contrast runs before or after
saturation and hue (a fair coin); with probability ``p`` the channels are
permuted uniformly. The draws follow torchvision's ``make_params`` in
distribution; the pixels come from :mod:`datakit.vision.kernels.colour`
(torchvision's tensor path, bit-exact), one kernel call per adjustment for
the samples that drew it. Pixels do not move, so boxes, masks and keypoints
are kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp, as_image_batch
from datakit.vision.augment.rows import apply_to_rows
from datakit.vision.kernels import colour as kernels
from datakit.vision.randomness import SampleRandom

__all__ = ["RandomPhotometricDistort", "DistortParams"]


@dataclass(frozen=True)
class DistortParams:
    """One sample's draw: each factor or None where it did not fire, the place of contrast, and the
    channels' order (None: not permuted), as torchvision's ``make_params`` gives them."""

    brightness: float | None
    contrast: float | None
    saturation: float | None
    hue: float | None
    contrast_before: bool
    permutation: tuple[int, ...] | None


def _pair(value: Sequence[float], name: str) -> tuple[float, float]:
    if not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError(f"{name}={value!r} should be a (min, max) pair")
    return float(value[0]), float(value[1])


class RandomPhotometricDistort(SampleOp):
    """SSD's photometric distortion: torchvision's ``RandomPhotometricDistort`` (exact, batched).

    Args:
        brightness, contrast, saturation: ``(min, max)`` of the factor.
        hue: ``(min, max)`` of the hue shift, within [-0.5, 0.5].
        p: the probability of each adjustment and of the channel permutation.
    """

    target_support = "kept"

    def __init__(self, brightness: Sequence[float] = (0.875, 1.125),
                 contrast: Sequence[float] = (0.5, 1.5), saturation: Sequence[float] = (0.5, 1.5),
                 hue: Sequence[float] = (-0.05, 0.05), p: float = 0.5) -> None:
        self.brightness = _pair(brightness, "brightness")
        self.contrast = _pair(contrast, "contrast")
        self.saturation = _pair(saturation, "saturation")
        self.hue = _pair(hue, "hue")
        if not -0.5 <= self.hue[0] <= self.hue[1] <= 0.5:
            raise ValueError(f"hue values should be between (-0.5, 0.5) and increasing, but got {self.hue}")
        for name in ("brightness", "contrast", "saturation"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} values should be non-negative and increasing, "
                                 f"but got {[low, high]}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p should be a floating point value in the interval [0.0, 1.0], got {p}")
        self.p = float(p)

    def draw(self, rand: SampleRandom, height: int, width: int) -> DistortParams:
        factors = [rand.uniform(*bounds) if rand.random() < self.p else None
                   for bounds in (self.brightness, self.contrast, self.saturation, self.hue)]
        contrast_before = rand.random() < 0.5
        permutation = None
        if rand.random() < self.p:
            order = [0, 1, 2]
            for last in (2, 1):  # Fisher-Yates: every order equally likely, as torch.randperm(3)
                pick = rand.integers(0, last + 1)
                order[last], order[pick] = order[pick], order[last]
            permutation = tuple(order)
        return DistortParams(factors[0], factors[1], factors[2], factors[3], contrast_before,
                             permutation)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = as_image_batch(images, "RandomPhotometricDistort")
        if len(params) != images.shape[0]:
            raise ValueError(f"RandomPhotometricDistort got {len(params)} parameters for a batch of "
                             f"{images.shape[0]}")
        drawn: list[DistortParams | None] = list(params)
        stages: list[tuple[Callable[..., torch.Tensor], str, Callable[[DistortParams], bool]]] = [
            (kernels.adjust_brightness, "brightness", lambda draw: True),
            (kernels.adjust_contrast, "contrast", lambda draw: draw.contrast_before),
            (kernels.adjust_saturation, "saturation", lambda draw: True),
            (kernels.adjust_hue, "hue", lambda draw: True),
            (kernels.adjust_contrast, "contrast", lambda draw: not draw.contrast_before),
        ]
        for kernel, name, when in stages:
            rows = [row for row, draw in enumerate(drawn)
                    if draw is not None and getattr(draw, name) is not None and when(draw)]
            factors = torch.tensor([getattr(drawn[row], name) for row in rows], dtype=torch.float64)
            images = apply_to_rows(images, rows, functools.partial(kernel, factors=factors))
        if images.shape[1] == 3:
            for row, draw in enumerate(drawn):
                if draw is not None and draw.permutation is not None and draw.permutation != (0, 1, 2):
                    images[row] = images[row][list(draw.permutation)]
        return images

    def __repr__(self) -> str:
        return (f"RandomPhotometricDistort(brightness={self.brightness}, contrast={self.contrast}, "
                f"hue={self.hue}, saturation={self.saturation}, p={self.p})")
