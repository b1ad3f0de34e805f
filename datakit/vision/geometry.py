"""Where a crop lies in the source image, and what size an output is: torchvision's rules.

Each function reproduces the arithmetic of the torchvision transform it is
named after (``transforms.v2`` on tensors), so that a fused pipeline crops
the same pixels torchvision would. Boxes are in source pixels; the fused
decoder maps them onto the DCT-scaled image it actually decodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from datakit.vision.randomness import SampleRandom

__all__ = ["Box", "random_resized_crop_box", "resized_size", "center_crop_box"]


@dataclass(frozen=True)
class Box:
    """A crop: rows ``[top, top + height)`` and columns ``[left, left + width)``."""

    top: int
    left: int
    height: int
    width: int


def random_resized_crop_box(width: int, height: int, scale: tuple[float, float],
                            ratio: tuple[float, float], random: SampleRandom) -> Box:
    """torchvision's ``RandomResizedCrop`` box for a ``width`` x ``height`` image.

    Ten tries at an area fraction uniform in ``scale`` and an aspect ratio
    log-uniform in ``ratio``; the first box that fits is placed uniformly.
    When none fits, the central crop of the largest box whose aspect ratio is
    within ``ratio`` (the whole image when its own ratio is).
    """
    area = width * height
    for _ in range(10):
        target_area = area * random.uniform(scale[0], scale[1])
        aspect = random.log_uniform(ratio[0], ratio[1])
        crop_width = int(round(math.sqrt(target_area * aspect)))
        crop_height = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_width <= width and 0 < crop_height <= height:
            top = random.integers(0, height - crop_height + 1)
            left = random.integers(0, width - crop_width + 1)
            return Box(top, left, crop_height, crop_width)
    in_ratio = width / height
    if in_ratio < min(ratio):
        crop_width, crop_height = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        crop_width, crop_height = int(round(height * max(ratio))), height
    else:
        crop_width, crop_height = width, height
    return Box((height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width)


def resized_size(width: int, height: int, size: int | tuple[int, int] | None,
                 max_size: int | None = None) -> tuple[int, int]:
    """The ``(width, height)`` ``Resize(size, max_size=max_size)`` gives a ``width`` x ``height`` image.

    An int sets the shorter side, the longer one keeping the aspect ratio
    (rounded down); then, if the longer side exceeds ``max_size``, it becomes
    ``max_size`` and the shorter one shrinks in proportion (rounded down).
    ``None`` sets the longer side to ``max_size``. A pair is ``(height, width)``.
    """
    if size is not None and not isinstance(size, int):
        return size[1], size[0]
    short, long = (width, height) if width <= height else (height, width)
    if size is None:
        assert max_size is not None
        new_short, new_long = int(max_size * short / long), max_size
    else:
        new_short, new_long = size, int(size * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_short, new_long) if width <= height else (new_long, new_short)


def center_crop_box(width: int, height: int, size: tuple[int, int]) -> Box:
    """torchvision's ``CenterCrop(size)`` on a ``width`` x ``height`` image; ``size`` is ``(height, width)``.

    A crop larger than the image reaches past its edges (negative ``top`` or
    ``left``): torchvision pads those pixels with zeros, and so do the fused
    pipelines.
    """
    crop_height, crop_width = size
    return Box(_center_offset(height, crop_height), _center_offset(width, crop_width),
               crop_height, crop_width)


def _center_offset(length: int, crop: int) -> int:
    if crop > length:  # torchvision pads (crop - length) // 2 in front, then crops at 0
        return -((crop - length) // 2)
    return int(round((length - crop) / 2.0))
