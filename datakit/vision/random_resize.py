"""The detection and segmentation references' random resizes, fused into decoding as ``Resize`` is.

``RandomShortestSize`` (the ``multiscale`` recipe), ``ScaleJitter`` (``lsj``)
and ``RandomResize`` (the segmentation reference) each draw one output size
per sample, then resize exactly as ``Resize`` to that size. The size is known
before the image is decoded (it depends on the image's size and the draw
only), so they take ``Resize``'s place in the fused prefix: the JPEG is
decoded at the smallest DCT scale that keeps it three times the output
(antialiased bilinear), only the rows and columns a following ``CenterCrop``
or ``RandomCrop`` keeps, and the boxes, masks and keypoints follow the same
``Resize`` step. Their arguments, defaults and size formulas are
torchvision v2's; the draws have its distributions, keyed on the sample as
every draw is (:mod:`datakit.vision.randomness`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from datakit.vision.geometry import resized_size
from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.resample import InterpolationMode, Resampling
from datakit.vision.transforms import Resize, to_uint8_chw

__all__ = ["RandomShortestSize", "ScaleJitter", "RandomResize"]

_FLOAT32_STEPS = 1 << 24
"""``torch.rand``'s float32 values are multiples of 2^-24 in [0, 1)."""


class _DrawnResize(Resize):
    """A ``Resize`` whose output size is drawn per sample (:meth:`drawn_size`)."""

    def __init__(self, interpolation: InterpolationMode | str | int, antialias: bool | None) -> None:
        self.size = None
        self.max_size = None
        self.resampling = Resampling.of(interpolation, antialias)
        self.interpolation = self.resampling.mode
        self.antialias = antialias

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        raise TypeError(f"{self!r} draws its size per sample: call drawn_size(width, height, random)")

    def drawn_size(self, width: int, height: int, random: SampleRandom) -> tuple[int, int]:
        raise NotImplementedError  # pragma: no cover - every resize overrides it

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        width, height = self.drawn_size(int(pixels.shape[2]), int(pixels.shape[1]), from_torch_generator())
        return self.resampling(pixels, height, width)

    def _modes(self) -> str:
        text = "" if self.interpolation is InterpolationMode.BILINEAR else \
            f", interpolation={self.interpolation.value!r}"
        return text if self.antialias is True else text + f", antialias={self.antialias}"


class RandomShortestSize(_DrawnResize):
    """Resize the shorter side to a length drawn from ``min_size``: torchvision's ``RandomShortestSize``.

    Args:
        min_size: the lengths to draw from (uniformly), or one length.
        max_size: the longest the longer side may be (the ratio shrinks to fit).
        interpolation, antialias: as ``Resize``'s.
    """

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None,
                 interpolation: InterpolationMode | str | int = "bilinear",
                 antialias: bool | None = True) -> None:
        super().__init__(interpolation, antialias)
        self.min_size = [min_size] if isinstance(min_size, int) else [int(size) for size in min_size]
        if not self.min_size or any(size <= 0 for size in self.min_size):
            raise ValueError(f"min_size must be positive lengths, got {min_size!r}")
        if max_size is not None and max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        self.max_size = max_size

    def draw_min_size(self, random: SampleRandom) -> int:
        """One sample's shorter side before ``max_size`` (torchvision's ``torch.randint`` over the list)."""
        return self.min_size[random.integers(0, len(self.min_size))]

    def drawn_size(self, width: int, height: int, random: SampleRandom) -> tuple[int, int]:
        ratio = self.draw_min_size(random) / min(height, width)
        if self.max_size is not None:
            ratio = min(ratio, self.max_size / max(height, width))
        return int(width * ratio), int(height * ratio)

    def __repr__(self) -> str:
        return f"RandomShortestSize(min_size={self.min_size}, max_size={self.max_size}{self._modes()})"


class ScaleJitter(_DrawnResize):
    """Fit the image in ``target_size``, times a scale drawn from ``scale_range``: torchvision's
    ``ScaleJitter`` (large-scale jitter, ``lsj``).

    The scale is drawn as torchvision's ``torch.rand(1)`` (a float32 multiple of
    2^-24) and the size computed in float32 as its ``make_params`` does (with
    NumPy's float32 scalars: the same IEEE products, a tenth of the cost), so
    the same draw gives the same size to the pixel.

    Args:
        target_size: ``(height, width)`` the image is fitted in before the scale.
        scale_range: ``(low, high)`` of the uniform scale.
        interpolation, antialias: as ``Resize``'s.
    """

    def __init__(self, target_size: Sequence[int], scale_range: Sequence[float] = (0.1, 2.0),
                 interpolation: InterpolationMode | str | int = "bilinear",
                 antialias: bool | None = True) -> None:
        super().__init__(interpolation, antialias)
        if len(target_size) != 2 or len(scale_range) != 2:
            raise ValueError(f"target_size and scale_range are pairs, got {target_size!r}, {scale_range!r}")
        self.target_size = (int(target_size[0]), int(target_size[1]))
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))

    def draw_scale(self, random: SampleRandom) -> Any:
        """One sample's scale, a float32 as torchvision's (``low + torch.rand(1) * (high - low)``)."""
        low, high = self.scale_range
        unit = np.float32(random.integers(0, _FLOAT32_STEPS) / _FLOAT32_STEPS)
        return np.float32(low) + unit * np.float32(high - low)  # a float32 scalar

    def drawn_size(self, width: int, height: int, random: SampleRandom) -> tuple[int, int]:
        """torchvision's sizes, every product rounded to float32 as its tensor arithmetic rounds it."""
        fit = min(self.target_size[1] / height, self.target_size[0] / width)
        ratio = np.float32(fit) * self.draw_scale(random)
        return int(np.float32(width) * ratio), int(np.float32(height) * ratio)

    def __repr__(self) -> str:
        return f"ScaleJitter(target_size={self.target_size}, scale_range={self.scale_range}{self._modes()})"


class RandomResize(_DrawnResize):
    """Resize the shorter side to a length drawn from ``[min_size, max_size)``: torchvision's
    ``RandomResize`` (the segmentation reference's).

    Args:
        min_size: the shortest length drawn.
        max_size: one past the longest (``torch.randint``'s bound).
        interpolation, antialias: as ``Resize``'s.
    """

    def __init__(self, min_size: int, max_size: int,
                 interpolation: InterpolationMode | str | int = "bilinear",
                 antialias: bool | None = True) -> None:
        super().__init__(interpolation, antialias)
        if not 0 < min_size < max_size:
            raise ValueError(f"RandomResize draws from [min_size, max_size): 0 < min_size < max_size, got "
                             f"{min_size}, {max_size}")
        self.min_size, self.max_size = int(min_size), int(max_size)
        self._upper = int(max_size)

    def draw_length(self, random: SampleRandom) -> int:
        """One sample's shorter side."""
        return random.integers(self.min_size, self._upper)

    def drawn_size(self, width: int, height: int, random: SampleRandom) -> tuple[int, int]:
        return resized_size(width, height, self.draw_length(random))

    def __repr__(self) -> str:
        return f"RandomResize(min_size={self.min_size}, max_size={self.max_size}{self._modes()})"
