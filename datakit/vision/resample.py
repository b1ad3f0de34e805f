"""Resizing as torchvision's v2 does it on tensors: its interpolation modes, antialiasing and kernels.

torchvision's ``Resize`` and ``RandomResizedCrop`` take ``interpolation``
(an ``InterpolationMode``, its string value, or a Pillow integer constant) and
``antialias``. On a uint8 tensor, ``torchvision.transforms.v2.functional.resize``
calls ``torch.nn.functional.interpolate``, which runs one of ATen's upsampling
kernels. :class:`Resampling` names the same kernel and calls it the same way,
so that the pixels are torchvision's:

- ``bilinear``, ``bicubic``, ``lanczos``: ``align_corners=False``; with
  ``antialias`` (the default) the antialiased kernels; ``lanczos`` requires it.
- ``nearest``, ``nearest-exact``: ``antialias`` is ignored, as in torchvision.
- uint8 pixels go to the kernel as they are where torchvision lets them (the
  nearest modes anywhere; bicubic and lanczos on the CPU; bilinear on CPUs
  with AVX2 or on ARM); elsewhere they are resized as float32, clamped
  (bicubic, lanczos) and rounded back, which is torchvision's other path.
- ``box`` and ``hamming`` exist only for Pillow images in torchvision; on a
  tensor it cannot run them, and neither does datakit: they are refused.

Passing ``scales`` to a kernel fixes where each output pixel's centre falls
in the source, ``(i + 0.5) / scale``, whatever the input's size: the fused
decoder uses it to resize a part of an image (or a DCT-scaled one) onto the
same grid as the whole image's resize.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

__all__ = ["InterpolationMode", "Resampling", "interpolation_mode", "exact_scale"]


class InterpolationMode(Enum):
    """torchvision's interpolation modes, with the same names and string values."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_PILLOW_CODES = {0: InterpolationMode.NEAREST, 1: InterpolationMode.LANCZOS, 2: InterpolationMode.BILINEAR,
                 3: InterpolationMode.BICUBIC, 4: InterpolationMode.BOX, 5: InterpolationMode.HAMMING}
_FILTERED = (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC, InterpolationMode.LANCZOS)
# Half the width of each mode's filter, in source pixels at scale 1 (ATen's interp_size / 2).
_HALF_WIDTH = {InterpolationMode.NEAREST: 1.0, InterpolationMode.NEAREST_EXACT: 1.0,
               InterpolationMode.BILINEAR: 1.0, InterpolationMode.BICUBIC: 2.0,
               InterpolationMode.LANCZOS: 3.0}


def interpolation_mode(value: Any) -> InterpolationMode:
    """The mode ``value`` names: a mode, its string, an object with that string as ``.value``, a Pillow int.

    torchvision's own ``InterpolationMode`` is taken by its ``.value``, so
    pipelines written for torchvision need no change (datakit never imports it).

    Raises:
        ValueError: not a mode, with torchvision's wording.
    """
    if isinstance(value, InterpolationMode):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in _PILLOW_CODES:
            raise ValueError(f"Pillow interpolation constant {value} is not one of {sorted(_PILLOW_CODES)}")
        return _PILLOW_CODES[value]
    name = value if isinstance(value, str) else getattr(value, "value", None)
    if not isinstance(name, str):
        raise ValueError("Argument interpolation should be an `InterpolationMode` or a corresponding Pillow "
                         f"integer constant, but got {value}.")
    try:
        return InterpolationMode(name)
    except ValueError:
        supported = [mode.value for mode in InterpolationMode]
        raise ValueError(f"Invalid interpolation mode: '{name}'. "
                         f"Supported string values are: {supported}.") from None


def exact_scale(length: int, output: int) -> float | None:
    """A scale factor ``s`` with ``1.0 / s == length / output`` in double precision, if there is one.

    ATen turns a given scale into the step between output pixels as
    ``1.0 / s``; without one it computes ``length / output``. With this ``s``
    a kernel run on the first rows of an image puts each output pixel where
    it would be in the whole image's resize, to the last bit.
    """
    target = length / output
    scale = output / length
    for _ in range(4):
        inverse = 1.0 / scale
        if inverse == target:
            return scale
        scale = math.nextafter(scale, math.inf if inverse > target else -math.inf)
    return None


def _native_uint8(mode: InterpolationMode, device: torch.device) -> bool:
    """Whether torchvision hands uint8 pixels to the kernel as they are (else it resizes float32)."""
    if mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        return True
    if device.type != "cpu":
        return False
    if mode is InterpolationMode.BILINEAR:
        capability = torch.backends.cpu.get_cpu_capability()
        return capability in ("AVX2", "AVX512") or platform.machine() in ("aarch64", "arm64")
    return True


@dataclass(frozen=True)
class Resampling:
    """One of torchvision's ways to resize a tensor: an interpolation mode and whether to antialias.

    Build it with :meth:`of`, which validates the arguments as torchvision does
    (and refuses what it cannot run on tensors).

    Attributes:
        mode: the interpolation mode.
        antialias: whether the antialiased kernel runs (never for the nearest modes).
    """

    mode: InterpolationMode = InterpolationMode.BILINEAR
    antialias: bool = True

    @classmethod
    def of(cls, interpolation: Any = "bilinear", antialias: bool | None = True) -> Resampling:
        """torchvision's ``interpolation`` and ``antialias`` arguments, checked.

        Raises:
            ValueError: an unknown mode, ``box`` or ``hamming`` (Pillow-only in
                torchvision), or ``lanczos`` without antialiasing.
        """
        mode = interpolation_mode(interpolation)
        if mode in (InterpolationMode.BOX, InterpolationMode.HAMMING):
            raise ValueError(f"interpolation {mode.value!r} exists only for Pillow images in torchvision; "
                             "datakit.vision resizes tensors: use 'bilinear', 'bicubic', 'lanczos', "
                             "'nearest' or 'nearest-exact'")
        if mode is InterpolationMode.LANCZOS and not antialias:
            raise ValueError("InterpolationMode.LANCZOS requires antialias=True")
        return cls(mode, bool(antialias) and mode in _FILTERED)

    @property
    def dct_scalable(self) -> bool:
        """Whether a DCT-scaled decode may replace part of the filter (antialiased bilinear only).

        The other modes sample the source more sharply than an IDCT's
        downscaling does, so the fused decoder decodes them at full scale.
        """
        return self.antialias and self.mode is InterpolationMode.BILINEAR

    def support(self, scale: float) -> float:
        """How far from an output pixel's centre, in source pixels, the kernel reads at ``scale``."""
        half = _HALF_WIDTH[self.mode]
        return half * max(1.0 / scale, 1.0) if self.antialias else half

    def __call__(self, image: torch.Tensor, height: int, width: int,
                 scales: tuple[float | None, float | None] | None = None) -> torch.Tensor:
        """``image`` (uint8 ``(C, H, W)``) resized to ``(C, height, width)``, as torchvision resizes it.

        Args:
            image: the pixels; channels-last memory is resized without a copy.
            height: output rows.
            width: output columns.
            scales: ``(scale_y, scale_x)`` given to the kernel (see the module's
                docstring); None along a side leaves the kernel to use ``input / output``.
        """
        if scales == (None, None):
            scales = None
        if scales is None and tuple(image.shape[-2:]) == (height, width):
            return image  # torchvision returns the image itself
        batch = _channels_last_batch(image)
        native = _native_uint8(self.mode, image.device)
        pixels = batch if native else batch.to(torch.float32)
        scale_y, scale_x = scales if scales is not None else (None, None)
        if self.mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
            resized = _NEAREST[self.mode](pixels, [height, width], scale_y, scale_x)
        else:
            kernel = (_ANTIALIASED if self.antialias else _PLAIN)[self.mode]
            resized = kernel(pixels, [height, width], False, scale_y, scale_x)
        if not native:
            if self.mode is not InterpolationMode.BILINEAR:
                resized = resized.clamp_(0, 255)
            resized = resized.round_().to(torch.uint8)
        return resized[0]

    def __repr__(self) -> str:
        return f"Resampling({self.mode.value}, antialias={self.antialias})"


def _channels_last_batch(image: torch.Tensor) -> torch.Tensor:
    """``image`` as a ``(1, C, H, W)`` channels-last batch that ATen keeps channels-last.

    A batch of one made by ``unsqueeze`` has an ambiguous stride on its
    first dimension, and ATen then writes the output channel-first, repacking
    every pixel (torch issue 68430; torchvision restrides the same way).
    """
    batch = image.unsqueeze(0)
    if not batch.is_contiguous(memory_format=torch.channels_last):
        return batch.contiguous(memory_format=torch.channels_last)
    return batch.as_strided(batch.shape, (batch.numel(), *batch.stride()[1:]))


_Kernel = Callable[..., torch.Tensor]
# import-graph: allow-private: ATen's ops behind F.interpolate (which takes sizes or scales, not both)
_ANTIALIASED: dict[InterpolationMode, _Kernel] = {
    InterpolationMode.BILINEAR: torch.ops.aten._upsample_bilinear2d_aa.default,  # import-graph: allow-private
    InterpolationMode.BICUBIC: torch.ops.aten._upsample_bicubic2d_aa.default,  # import-graph: allow-private
    InterpolationMode.LANCZOS: torch.ops.aten._upsample_lanczos2d_aa.default,  # import-graph: allow-private
}
_PLAIN: dict[InterpolationMode, _Kernel] = {
    InterpolationMode.BILINEAR: torch.ops.aten.upsample_bilinear2d.default,
    InterpolationMode.BICUBIC: torch.ops.aten.upsample_bicubic2d.default,
}
_NEAREST: dict[InterpolationMode, _Kernel] = {
    InterpolationMode.NEAREST: torch.ops.aten.upsample_nearest2d.default,
    # import-graph: allow-private
    InterpolationMode.NEAREST_EXACT: torch.ops.aten._upsample_nearest_exact2d.default,
}
