"""Operations that change an image's size and draw from the whole sample: run one sample at a time.

``RandomZoomOut`` pads each image to its own drawn size; ``RandomIoUCrop``
draws its crop from the sample's boxes. Neither keeps a batch's shape, and
the crop cannot be drawn from the image's size alone, so neither fits
:class:`~datakit.vision.augment.base.SampleOp`. A :class:`CanvasOp` draws one
sample's parameters from its image size and its targets
(:meth:`CanvasOp.draw_sample`, the targets already moved by the steps before
it), applies them to its pixels (:meth:`CanvasOp.apply_sample`) and reports
the steps that move its boxes, masks and keypoints
(:meth:`CanvasOp.target_steps`). :func:`datakit.vision.recipe.run_sample_steps`
runs it per sample, keyed on ``(epoch seed, index, position)`` as every draw.

Why not fused into the JPEG decode: in torchvision's SSD recipe both follow
``RandomPhotometricDistort``, whose contrast reads the mean of the whole
image, so the whole image is decoded anyway; the zoom-out's canvas is mostly
fill, which is written, not decoded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.targets.sample import TargetLayout, TargetSample, tv_kind
from datakit.vision.targets.steps import Step
from datakit.vision.transforms import Transform, to_uint8_chw

__all__ = ["CanvasOp", "uniform32", "times32"]


def uniform32(rand: SampleRandom) -> np.float32:
    """A float32 uniform in ``[0, 1)`` on torch's lattice (24 random bits, as ``torch.rand`` on the CPU)."""
    value: np.float32 = np.float32((rand.next_u64() >> 40) / (1 << 24))  # exact: 24 bits
    return value


def times32(count: int, factor: np.float32) -> int:
    """``int(count * factor)`` in float32, as torchvision's ``int(orig_w * r)`` with a float32 ``r``."""
    return int(np.float32(count) * factor)


class CanvasOp(Transform):
    """A per-sample operation that may change the image's size and may read the sample's targets.

    Called directly (as torchvision's transforms are), it takes an image, an
    ``(image, target)`` pair or a dict holding a ``tv_tensors.Image``, draws
    from torch's global generator, and returns the same structure with the
    targets moved.
    """

    target_support = "moved"

    def draw_sample(self, rand: SampleRandom, height: int, width: int, target: TargetSample | None) -> Any:
        """One sample's parameters for a ``height`` x ``width`` image whose targets are ``target`` (None
        for an image alone); None leaves the sample as it is."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def apply_sample(self, image: torch.Tensor, params: Any) -> torch.Tensor:
        """The ``(C, H, W)`` image changed by ``params`` (a new tensor, or ``image`` for None)."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        """The steps ``params`` apply to the targets of a ``height`` x ``width`` image."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def run(self, image: torch.Tensor, rand: SampleRandom, target: TargetSample | None) -> torch.Tensor:
        """Draw, move ``target``'s boxes, masks and keypoints, and return the changed image."""
        height, width = int(image.shape[-2]), int(image.shape[-1])
        params = self.draw_sample(rand, height, width, target)
        if target is not None:
            target.move(self.target_steps(params, height, width), (height, width))
        return self.apply_sample(image, params)

    def __call__(self, sample: Any) -> Any:
        if isinstance(sample, (tuple, list, dict)):
            sample = _copied(sample)  # torchvision returns new containers and leaves the given ones
            layout = TargetLayout(next((key for key, value in sample.items() if tv_kind(value) == "image"),
                                       None)) if isinstance(sample, dict) else TargetLayout()
            target = TargetSample(sample, layout)
            image = target.image
            pixels = image if isinstance(image, torch.Tensor) and image.ndim == 3 else to_uint8_chw(image)
            target.image = self.run(pixels.as_subclass(torch.Tensor), from_torch_generator(), target)
            return target.value()
        pixels = sample if isinstance(sample, torch.Tensor) and sample.ndim == 3 else to_uint8_chw(sample)
        return self.run(pixels, from_torch_generator(), None)


def _copied(sample: Any) -> Any:
    """A dict sample, or a pair and its target dict, in new containers (the same values)."""
    if isinstance(sample, dict):
        return dict(sample)
    if len(sample) == 2 and isinstance(sample[1], dict):
        return type(sample)((sample[0], dict(sample[1])))
    return sample
