"""torchvision v2's ``RandomErasing`` as a batched operation: a box drawn per sample, erased in place.

The box is drawn as ``RandomErasing.make_params`` draws it: up to ten
attempts, each an area fraction uniform in ``scale`` and an aspect ratio
(height / width) log-uniform in ``ratio``, rounded to whole pixels and kept
when strictly smaller than the image; the corner is then uniform over the
positions that fit. When no attempt fits, the sample is left as it is.

The erased pixels are torchvision's too. ``value="random"`` fills the box with
float32 standard normal noise (one value per channel and pixel), which
torchvision assigns to the image as it is: on a uint8 image that is torch's
cast (truncation towards zero, then modulo 256, so mostly 0-3 and 253-255).
The noise comes from a generator seeded by the sample's own draw, so it is
reproducible. Constant values are cast the same way (``0.7`` erases with 0).
The cast is done explicitly (through int64, as torch's CPU cast does) so that
a batch on another device gets the same pixels.

Batches may be uint8 (the worker's slot) or floating point (after
``Normalize``, where torchvision's references erase); other dtypes are refused.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp
from datakit.vision.randomness import SampleRandom, from_torch_generator

__all__ = ["RandomErasing", "ErasingParams", "erasing_noise"]


@dataclass(frozen=True)
class ErasingParams:
    """One sample's erased box; ``noise_seed`` seeds its noise where the value is ``"random"``."""

    top: int
    left: int
    height: int
    width: int
    noise_seed: int | None = None


def erasing_noise(seed: int, channels: int, height: int, width: int) -> torch.Tensor:
    """The float32 standard normal noise of a ``"random"`` erase, ``(channels, height, width)`` on the
    CPU, from a torch generator seeded with ``seed`` (torchvision's ``normal_()`` uses the global one)."""
    generator = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    return torch.empty((channels, height, width), dtype=torch.float32).normal_(generator=generator)


def _as_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``values`` as torch assigns them to a ``dtype`` image: uint8 truncates and wraps modulo 256."""
    if dtype == torch.uint8:
        return values.to(torch.int64).bitwise_and_(255).to(torch.uint8)
    return values.to(dtype)


class RandomErasing(SampleOp):
    """Erase a random box of the image with probability ``p``: torchvision's ``RandomErasing``.

    Args:
        p: probability that a sample is erased.
        scale: range of the box's area as a fraction of the image's.
        ratio: range of the box's aspect ratio (height / width), drawn log-uniformly.
        value: the erasing value: a number, one per channel, or ``"random"`` for
            normal noise per pixel (see the module's note on uint8 images).
        inplace: called on one tensor, erase it in place (batches are always
            written in place).
    """

    target_support = "kept"  # as torchvision's, which passes boxes, masks and keypoints through

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33),
                 ratio: Sequence[float] = (0.3, 3.3), value: Any = 0.0, inplace: bool = False) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"`p` should be a floating point value in the interval [0.0, 1.0], got {p}.")
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if not isinstance(scale, Sequence):
            raise TypeError("Scale should be a sequence")
        if not isinstance(ratio, Sequence):
            raise TypeError("Ratio should be a sequence")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            warnings.warn("Scale and ratio should be of kind (min, max)", stacklevel=2)
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        self.p = float(p)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value: list[float] | None = None  # "random"
        if isinstance(value, numbers.Real):
            self.value = [float(value)]
        elif isinstance(value, (tuple, list)):
            self.value = [float(item) for item in value]
        elif not isinstance(value, str):
            raise TypeError(f"value should be a real number, a sequence of them or 'random', not {value!r}")
        self.inplace = inplace

    def draw(self, rand: SampleRandom, height: int, width: int) -> ErasingParams | None:
        if rand.random() >= self.p:
            return None
        area = height * width
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            erased = area * rand.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rand.uniform(log_low, log_high))
            box_height = int(round(math.sqrt(erased * aspect)))
            box_width = int(round(math.sqrt(erased / aspect)))
            if box_height < height and box_width < width:
                seed = rand.next_u64() if self.value is None else None
                top = rand.integers(0, height - box_height + 1)
                left = rand.integers(0, width - box_width + 1)
                return ErasingParams(top, left, box_height, box_width, seed)
        return None

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or \
                not (images.dtype == torch.uint8 or images.dtype.is_floating_point):
            raise TypeError("RandomErasing takes a uint8 or floating point (N, C, H, W) batch")
        if len(params) != images.shape[0]:
            raise ValueError(f"RandomErasing got {len(params)} parameters for a batch of {images.shape[0]}")
        channels = int(images.shape[1])
        constant = None
        if self.value is not None:
            if len(self.value) not in (1, channels):
                raise ValueError("If value is a sequence, it should have either a single value or "
                                 f"{channels} (number of inpt channels)")
            constant = _as_dtype(torch.tensor(self.value, dtype=torch.float32), images.dtype)
            constant = constant.to(images.device).view(-1, 1, 1)
        for row, box in enumerate(params):
            if box is None:
                continue
            if constant is None:
                noise = erasing_noise(box.noise_seed, channels, box.height, box.width)
                fill = _as_dtype(noise, images.dtype).to(images.device)
            else:
                fill = constant
            images[row, :, box.top:box.top + box.height, box.left:box.left + box.width] = fill
        return images

    def __call__(self, image: Any) -> torch.Tensor:
        if not isinstance(image, torch.Tensor) or image.ndim != 3:
            return super().__call__(image)
        params = self.draw(from_torch_generator(), int(image.shape[-2]), int(image.shape[-1]))
        batch = image.unsqueeze(0) if self.inplace else image.unsqueeze(0).clone()
        return self.apply_batch(batch, [params])[0]

    def __repr__(self) -> str:
        value = "random" if self.value is None else self.value
        return (f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value}, "
                f"inplace={self.inplace})")
