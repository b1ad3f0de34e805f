"""The operations of ``datakit.vision``, named and parametrised like torchvision's.

Each operation is a plain description (sizes, scales, probabilities). Given
to an ``LMDBDataset``/``MongoDataset`` as ``transform``, a :class:`Compose`
of them is not called sample by sample: the dataset compiles it into one
fused decode (:mod:`datakit.vision.fused_decode`). Called directly, each works like
its torchvision namesake on a ``(3, H, W)`` uint8 tensor (or a PIL image,
taken as one), drawing its randomness from torch's global generator as
torchvision does; that is what runs where no fused path applies.

Resizes take torchvision's ``interpolation`` and ``antialias`` (and
``Resize`` its ``max_size``) and run the kernel torchvision's tensor path
runs (:mod:`datakit.vision.resample`). Differences from torchvision, on
purpose: ``box`` and ``hamming``, which torchvision runs only on PIL images,
are refused; and :class:`Normalize` takes uint8 pixels and returns float32,
i.e. it is ``ToDtype(float32, scale=True)`` followed by torchvision's
``Normalize``, so that batches cross processes as uint8 and become floats
once per batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from datakit.vision.geometry import Box, center_crop_box, random_resized_crop_box, resized_size
from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.recycled import RecycledOutputs
from datakit.vision.resample import InterpolationMode, Resampling

__all__ = ["Transform", "RandomResizedCrop", "Resize", "CenterCrop", "RandomHorizontalFlip",
           "Normalize", "Compose", "InterpolationMode", "to_uint8_chw", "resize_chw", "crop_chw",
           "size_pair"]

Size = int | tuple[int, int]

# Values a CPU batch is processed in at a time, so that float temporaries stay in cache.
_CHUNK_VALUES = 1 << 18


class Transform:
    """Base of the ``datakit.vision`` operations."""

    def __call__(self, image: Any) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - every operation overrides it


def size_pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``(height, width)`` from an int or a one- or two-element sequence, as torchvision reads sizes."""
    if isinstance(size, int):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) in (1, 2) and all(isinstance(v, int) for v in size):
        pair = (size[0], size[0]) if len(size) == 1 else (size[0], size[1])
    else:
        raise TypeError(f"{name} must be an int or a sequence of one or two ints, not {size!r}")
    if min(pair) <= 0:
        raise ValueError(f"{name} must be positive, not {size!r}")
    return pair


def to_uint8_chw(image: Any) -> torch.Tensor:
    """A ``(3, H, W)`` uint8 tensor from a PIL image, an ``(H, W, 3)`` array or a CHW tensor."""
    if isinstance(image, Image.Image):
        image = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
    elif isinstance(image, np.ndarray):
        image = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
    if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8 or image.ndim != 3:
        raise TypeError(f"expected a PIL image or a uint8 (3, H, W) tensor, not {_describe(image)}")
    return image


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


_BILINEAR = Resampling()


def resize_chw(image: torch.Tensor, height: int, width: int,
               resampling: Resampling = _BILINEAR) -> torch.Tensor:
    """A uint8 ``(3, H, W)`` tensor resized as torchvision's v2 resizes it (bilinear, antialiased by default).

    torch's native uint8 kernels run on channels-last pixels; a channel-first
    tensor is handed to them in that layout (one repacking copy).
    """
    return resampling(image, height, width)


def crop_chw(image: torch.Tensor, box: Box, fill: Sequence[int] | None = None) -> torch.Tensor:
    """``image[:, top:top + height, left:left + width]``, padded where the box leaves the image with
    ``fill`` (a value per channel; zeros by default)."""
    _, image_height, image_width = image.shape
    if box.top >= 0 and box.left >= 0 and box.top + box.height <= image_height \
            and box.left + box.width <= image_width:
        return image[:, box.top:box.top + box.height, box.left:box.left + box.width]
    out = image.new_zeros((image.shape[0], box.height, box.width))
    if fill is not None and any(fill):
        out[:] = torch.tensor(list(fill), dtype=image.dtype).view(-1, 1, 1)
    top, left = max(box.top, 0), max(box.left, 0)
    bottom, right = min(box.top + box.height, image_height), min(box.left + box.width, image_width)
    if bottom > top and right > left:
        inside = image[:, top:bottom, left:right]
        out[:, top - box.top:bottom - box.top, left - box.left:right - box.left] = inside
    return out


class RandomResizedCrop(Transform):
    """Crop a random part of the image and resize it to ``size``: torchvision's ``RandomResizedCrop``.

    Args:
        size: output ``(height, width)``, or an int for a square.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height), drawn log-uniformly.
        interpolation: torchvision's: an ``InterpolationMode`` (datakit's or
            torchvision's), its string value or a Pillow constant; ``bilinear``,
            ``bicubic``, ``lanczos``, ``nearest`` or ``nearest-exact``.
        antialias: torchvision's: antialias the bilinear, bicubic and lanczos
            kernels (``None`` means False, as on tensors in torchvision).
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: InterpolationMode | str | int = "bilinear",
                 antialias: bool | None = True) -> None:
        self.size = size_pair(size, "size")
        if not (len(scale) == 2 and 0 < scale[0] <= scale[1]):
            raise ValueError(f"scale must be (low, high) with 0 < low <= high, not {scale!r}")
        if not (len(ratio) == 2 and 0 < ratio[0] <= ratio[1]):
            raise ValueError(f"ratio must be (low, high) with 0 < low <= high, not {ratio!r}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.resampling = Resampling.of(interpolation, antialias)
        self.interpolation = self.resampling.mode
        self.antialias = antialias

    def box(self, width: int, height: int, random: SampleRandom) -> Box:
        """The crop for a ``width`` x ``height`` image."""
        return random_resized_crop_box(width, height, self.scale, self.ratio, random)

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        box = self.box(pixels.shape[2], pixels.shape[1], from_torch_generator())
        return self.resampling(crop_chw(pixels, box), *self.size)

    def __repr__(self) -> str:
        ratio = tuple(round(value, 4) for value in self.ratio)
        return (f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={ratio}"
                f"{_resampling_repr(self.interpolation, self.antialias)})")


def _resampling_repr(interpolation: InterpolationMode, antialias: bool | None) -> str:
    """The arguments that differ from the defaults, for a ``repr``."""
    text = "" if interpolation is InterpolationMode.BILINEAR else f", interpolation={interpolation.value!r}"
    return text if antialias is True else text + f", antialias={antialias}"


class Resize(Transform):
    """Resize the image: torchvision's ``Resize``.

    Args:
        size: an int (or a one-element sequence) sets the shorter side, the
            longer keeping the aspect ratio; a pair is the output ``(height,
            width)``; None leaves the size to ``max_size``.
        interpolation: as :class:`RandomResizedCrop`'s.
        max_size: with an int ``size``, the longest the longer side may be
            (it then becomes ``max_size`` and the shorter side shrinks); with
            ``size=None``, the longer side's length.
        antialias: as :class:`RandomResizedCrop`'s.

    Raises:
        ValueError: the arguments torchvision refuses (at construction here,
            where torchvision refuses some when called).
    """

    def __init__(self, size: int | Sequence[int] | None,
                 interpolation: InterpolationMode | str | int = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True) -> None:
        if isinstance(size, Sequence) and len(size) == 1:
            size = size[0]
        self.size: Size | None
        if size is None:
            if not isinstance(max_size, int):
                raise ValueError(f"max_size must be an integer when size is None, "
                                 f"but got {max_size} instead.")
            self.size = None
        elif isinstance(size, int) and size > 0:
            self.size = size
        elif isinstance(size, Sequence) and len(size) == 2:
            self.size = size_pair(size, "size")
        else:
            raise ValueError(f"size can be an integer, a sequence of one or two integers, or None, "
                             f"but got {size} instead.")
        _check_max_size(self.size, max_size)
        self.max_size = max_size
        self.resampling = Resampling.of(interpolation, antialias)
        self.interpolation = self.resampling.mode
        self.antialias = antialias

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """The ``(width, height)`` this gives a ``width`` x ``height`` image."""
        return resized_size(width, height, self.size, self.max_size)

    def drawn_size(self, width: int, height: int, random: SampleRandom) -> tuple[int, int]:
        """The ``(width, height)`` of one sample: :meth:`output_size` here; the random resizes
        (:mod:`datakit.vision.random_resize`) draw it from ``random``."""
        return self.output_size(width, height)

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        width, height = self.output_size(pixels.shape[2], pixels.shape[1])
        return self.resampling(pixels, height, width)

    def __repr__(self) -> str:
        max_size = "" if self.max_size is None else f", max_size={self.max_size}"
        return f"Resize(size={self.size}{max_size}{_resampling_repr(self.interpolation, self.antialias)})"


def _check_max_size(size: Size | None, max_size: int | None) -> None:
    """torchvision's checks of ``max_size`` against ``size``."""
    if max_size is None or size is None:
        if max_size is not None and max_size <= 0:
            raise ValueError(f"max_size must be positive, not {max_size}")
        return
    if not isinstance(size, int):
        raise ValueError("max_size should only be passed if size is None or specifies the length of the "
                         "smaller edge, i.e. size should be an int or a sequence of length 1 in torchscript "
                         "mode.")
    if max_size <= size:
        raise ValueError(f"max_size = {max_size} must be strictly greater than the requested size "
                         f"for the smaller edge size = {[size]}")


class CenterCrop(Transform):
    """Crop the centre of the image: torchvision's ``CenterCrop`` (zero-padded when larger).

    Args:
        size: output ``(height, width)``, or an int for a square.
    """

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size_pair(size, "size")

    def box(self, width: int, height: int) -> Box:
        """The crop for a ``width`` x ``height`` image."""
        return center_crop_box(width, height, self.size)

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        return crop_chw(pixels, self.box(pixels.shape[2], pixels.shape[1]))

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class RandomHorizontalFlip(Transform):
    """Mirror the image left to right with probability ``p``: torchvision's ``RandomHorizontalFlip``."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be between 0 and 1, not {p!r}")
        self.p = float(p)

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        return pixels.flip(-1) if from_torch_generator().random() < self.p else pixels

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class Normalize(Transform):
    """uint8 pixels to float32 ``(pixels / 255 - mean) / std``, per channel.

    In a fused dataset this runs once per batch, not per sample: on the GPU
    after the copy when :class:`datakit.DataLoader` has a ``device``, else
    vectorised in the main process. Called on a tensor (one image or a
    batch, channels at dimension -3) it normalises that tensor.

    Args:
        mean: per-channel means, in the 0-1 range of ``pixels / 255``.
        std: per-channel standard deviations, same range.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = tuple(float(value) for value in mean)
        self.std = tuple(float(value) for value in std)
        if len(self.mean) != len(self.std) or not self.mean:
            raise ValueError(f"mean and std need one value per channel, got {mean!r} and {std!r}")
        if any(value == 0 or not math.isfinite(value) for value in self.std):
            raise ValueError(f"std must be finite and non-zero, not {std!r}")
        self._outputs = RecycledOutputs()

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = image if isinstance(image, torch.Tensor) else to_uint8_chw(image)
        if pixels.ndim < 3 or pixels.shape[-3] != len(self.mean):
            raise ValueError(f"Normalize has {len(self.mean)} channels; it was given {_describe(pixels)}")
        # uint8 x: (x / 255 - m) / s == x * (1 / (255 s)) - m / s, one multiply-add per pixel;
        # a float tensor is taken as already in [0, 1], as torchvision's Normalize takes it
        unit = 255.0 if pixels.dtype == torch.uint8 else 1.0
        shape = (len(self.mean), 1, 1)
        scale = torch.tensor([1.0 / (unit * s) for s in self.std], device=pixels.device).view(shape)
        shift = torch.tensor([-m / s for m, s in zip(self.mean, self.std, strict=True)],
                             device=pixels.device).view(shape)
        if pixels.ndim < 4 or pixels.device.type != "cpu":
            return torch.addcmul(shift, pixels.to(torch.float32), scale)
        # A CPU batch a few samples at a time: the float temporaries stay in cache (about twice as
        # fast as whole-batch passes on 128 x 3 x 176 x 176), and the same bits; into the memory of
        # a batch the caller has dropped, whose pages are mapped already (datakit.vision.recycled).
        out = self._outputs.empty(tuple(pixels.shape), torch.float32)
        step = max(1, _CHUNK_VALUES // max(1, pixels[0].numel()))
        for start in range(0, int(pixels.shape[0]), step):
            torch.addcmul(shift, pixels[start:start + step].to(torch.float32), scale,
                          out=out[start:start + step])
        return out

    def __repr__(self) -> str:
        return f"Normalize(mean={list(self.mean)}, std={list(self.std)})"


class Compose(Transform):
    """Operations applied in order: torchvision's ``Compose``.

    Args:
        transforms: ``datakit.vision`` operations and any other callable that
            torchvision's v2 ``Compose`` would take on tensors (torchvision's
            own transforms, your functions): each gets a uint8 ``(C, H, W)``
            tensor. Given to a datakit dataset, the leading crops, resizes and
            flips are fused into decoding and the rest runs over whole
            batches where it can (:mod:`datakit.vision.recipe`); the result
            is the same as calling the operations in order.
    """

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms: list[Callable[[Any], Any]] = []
        for transform in transforms:
            if isinstance(transform, Compose):
                self.transforms.extend(transform.transforms)
            elif callable(transform):
                self.transforms.append(transform)
            else:
                raise TypeError(f"Compose takes operations (callables), not {transform!r}")

    def __call__(self, image: Any) -> torch.Tensor:
        result = to_uint8_chw(image)
        for transform in self.transforms:
            result = transform(result)
        return result

    def __repr__(self) -> str:
        inner = "".join(f"\n    {transform!r}," for transform in self.transforms)
        return f"Compose([{inner}\n])"
