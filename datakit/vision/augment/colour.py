"""torchvision v2's colour augmentations as batched operations: per-sample draws, whole-batch pixels.

Each class has its torchvision namesake's constructor arguments, defaults,
validation (the same exception types) and repr. :meth:`draw` draws one
sample's parameters with torchvision's distributions (``p`` fires when a
uniform draw is below it, factors are uniform over their range, ColorJitter's
order is a uniform permutation of its four adjustments); :meth:`apply_batch`
applies them with :mod:`datakit.vision.kernels.colour` to the samples that
drew a change: torchvision's tensor path, GaussianBlur within one grey level.

torchvision's ``Grayscale`` is left out: its default of one output channel
changes the shape of a batch's slot; ``RandomGrayscale`` keeps the channels.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp, as_image_batch
from datakit.vision.kernels import colour as kernels
from datakit.vision.randomness import SampleRandom

__all__ = ["ColorJitter", "ColorJitterParams", "RandomGrayscale", "GaussianBlur", "BlurParams",
           "RandomSolarize", "RandomAutocontrast", "RandomEqualize", "RandomPosterize", "RandomInvert",
           "RandomAdjustSharpness", "Fired", "FIRED"]

Range = float | Sequence[float] | None


@dataclass(frozen=True)
class Fired:
    """The draw of an operation whose only randomness is its probability ``p``: it applies."""


FIRED = Fired()


@dataclass(frozen=True)
class ColorJitterParams:
    """One sample's ColorJitter draw.

    Attributes:
        order: the four adjustments (0 brightness, 1 contrast, 2 saturation,
            3 hue) in the order they are applied, as torchvision's ``fn_idx``.
        brightness, contrast, saturation, hue: the factors; None where the
            operation was built without that adjustment.
    """

    order: tuple[int, int, int, int]
    brightness: float | None
    contrast: float | None
    saturation: float | None
    hue: float | None

    def factor(self, adjustment: int) -> float | None:
        """The factor of adjustment ``adjustment`` (0..3, as in ``order``)."""
        return (self.brightness, self.contrast, self.saturation, self.hue)[adjustment]


@dataclass(frozen=True)
class BlurParams:
    """One sample's GaussianBlur draw: the sigma used along both axes."""

    sigma: float


def _checked_params(images: torch.Tensor, params: Sequence[Any], name: str) -> torch.Tensor:
    images = as_image_batch(images, name)
    if len(params) != images.shape[0]:
        raise ValueError(f"{name} got {len(params)} parameters for a batch of {images.shape[0]}")
    return images


def _apply_to(images: torch.Tensor, chosen: Sequence[int],
              change: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``images`` with the samples ``chosen`` (indices, in order) replaced by ``change`` of them.

    A subset is gathered, changed and written back into ``images``; a change
    of every sample is applied to the whole batch without the copies. On the
    CPU the subset moves one image at a time: torch's ``index_select`` and
    ``index_copy_`` copy uint8 images byte by byte, ten times slower than a
    copy per image.
    """
    if not chosen:
        return images
    if len(chosen) == images.shape[0]:
        return change(images)
    if images.device.type != "cpu":
        rows = torch.tensor(chosen, dtype=torch.int64, device=images.device)
        return images.index_copy_(0, rows, change(images.index_select(0, rows)))
    changed = change(torch.stack([images[row] for row in chosen]))
    for position, row in enumerate(chosen):
        images[row].copy_(changed[position])
    return images


def _check_probability(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p should be a floating point value in the interval [0.0, 1.0], got {p}")
    return p


def _jitter_range(value: Range, name: str, center: float = 1.0,
                  bound: tuple[float, float] = (0.0, float("inf")),
                  clip_first_on_zero: bool = True) -> tuple[float, float] | None:
    """torchvision's ColorJitter range rules: a number is ``center -+ value``, a pair is kept."""
    if value is None:
        return None
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        number = float(value)  # type: ignore[arg-type]
        if number < 0:
            raise ValueError(f"If {name} is a single number, it must be non negative.")
        low, high = center - number, center + number
        if clip_first_on_zero:
            low = max(low, 0.0)
    elif isinstance(value, Sequence) and len(value) == 2:
        low, high = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{name}={value} should be a single number or a sequence with length 2.")
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"{name} values should be between {bound} and increasing, but got {[low, high]}.")
    return None if low == high == center else (low, high)


_ADJUSTMENTS = (kernels.adjust_brightness, kernels.adjust_contrast, kernels.adjust_saturation,
                kernels.adjust_hue)


class ColorJitter(SampleOp):
    """Jitter brightness, contrast, saturation and hue, in a random order: torchvision's ``ColorJitter``.

    Args:
        brightness: a number ``b`` draws the factor from ``[max(0, 1 - b), 1 + b]``;
            a pair ``(min, max)`` from that range; None leaves brightness alone.
        contrast: as ``brightness``.
        saturation: as ``brightness``.
        hue: a number ``h`` in [0, 0.5] draws from ``[-h, h]``; a pair from
            that range, within [-0.5, 0.5].

    Each sample draws its own order of the four adjustments; a batch applies
    them in four stages, each stage grouping the samples by the adjustment
    they drew at that position (a few kernel calls per stage).
    """

    target_support = "kept"

    def __init__(self, brightness: Range = None, contrast: Range = None, saturation: Range = None,
                 hue: Range = None) -> None:
        self.brightness = _jitter_range(brightness, "brightness")
        self.contrast = _jitter_range(contrast, "contrast")
        self.saturation = _jitter_range(saturation, "saturation")
        self.hue = _jitter_range(hue, "hue", center=0.0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    def draw(self, rand: SampleRandom, height: int, width: int) -> ColorJitterParams | None:
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        if all(bounds is None for bounds in ranges):
            return None
        order = [0, 1, 2, 3]
        for last in range(3, 0, -1):  # Fisher-Yates: every order equally likely, as torch.randperm(4)
            pick = rand.integers(0, last + 1)
            order[last], order[pick] = order[pick], order[last]
        factors = [None if bounds is None else rand.uniform(*bounds) for bounds in ranges]
        return ColorJitterParams((order[0], order[1], order[2], order[3]), *factors)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked_params(images, params, "ColorJitter")
        for position in range(4):
            for adjustment, kernel in enumerate(_ADJUSTMENTS):
                chosen = [index for index, drawn in enumerate(params) if drawn is not None
                          and drawn.order[position] == adjustment and drawn.factor(adjustment) is not None]
                factors = torch.tensor([params[index].factor(adjustment) for index in chosen],
                                       dtype=torch.float64)
                images = _apply_to(images, chosen, functools.partial(kernel, factors=factors))
        return images

    def __repr__(self) -> str:
        named = (("brightness", self.brightness), ("contrast", self.contrast),
                 ("saturation", self.saturation), ("hue", self.hue))
        fields = [f"{name}={value}" for name, value in named if value is not None]
        return f"ColorJitter({', '.join(fields)})"


class _RandomApply(SampleOp):
    """An operation applied with probability ``p``, with no other randomness."""

    target_support = "kept"

    def __init__(self, p: float) -> None:
        self.p = _check_probability(p)

    def draw(self, rand: SampleRandom, height: int, width: int) -> Fired | None:
        return FIRED if rand.random() < self.p else None

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked_params(images, params, type(self).__name__)
        chosen = [index for index, drawn in enumerate(params) if drawn is not None]
        return _apply_to(images, chosen, self.change)

    def change(self, images: torch.Tensor) -> torch.Tensor:
        """The operation applied to every sample of ``images``."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def _fields(self) -> str:
        return f"p={self.p}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields()})"


class RandomGrayscale(_RandomApply):
    """Convert to grey (kept as 3 equal channels) with probability ``p``: torchvision's ``RandomGrayscale``.

    Args:
        p: probability of the conversion.
    """

    def __init__(self, p: float = 0.1) -> None:
        super().__init__(p)

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.grayscale(images, num_output_channels=int(images.shape[1]))


class RandomSolarize(_RandomApply):
    """Invert the pixels at or above ``threshold`` with probability ``p``: torchvision's ``RandomSolarize``.

    Args:
        threshold: pixels ``>= threshold`` are inverted; at most 255 for uint8
            images (torchvision raises TypeError above it, on the first call).
        p: probability of the change.
    """

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        super().__init__(p)
        if not isinstance(threshold, (int, float)) or threshold > 255:
            raise TypeError(f"Threshold should be a number at most 255 for uint8 images, got {threshold!r}")
        self.threshold: float = threshold

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.solarize(images, torch.full((images.shape[0],), float(self.threshold)))

    def _fields(self) -> str:
        return f"p={self.p}, threshold={self.threshold}"


class RandomAutocontrast(_RandomApply):
    """Stretch each channel to [0, 255] with probability ``p``: torchvision's ``RandomAutocontrast``.

    Args:
        p: probability of the change.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.autocontrast(images)


class RandomEqualize(_RandomApply):
    """Equalize each channel's histogram with probability ``p``: torchvision's ``RandomEqualize``.

    Args:
        p: probability of the change.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.equalize(images)


class RandomPosterize(_RandomApply):
    """Keep the ``bits`` highest bits of each pixel with probability ``p``: torchvision's ``RandomPosterize``.

    Args:
        bits: bits kept per channel, an int in [0, 8] (torchvision raises
            TypeError otherwise, on the first call; this raises it here).
        p: probability of the change.
    """

    def __init__(self, bits: int, p: float = 0.5) -> None:
        super().__init__(p)
        if not isinstance(bits, int) or isinstance(bits, bool) or not 0 <= bits <= 8:
            raise TypeError(f"bits must be a positive integer in the range [0, 8], got {bits} instead.")
        self.bits = bits

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.posterize(images, torch.full((images.shape[0],), self.bits))

    def _fields(self) -> str:
        return f"p={self.p}, bits={self.bits}"


class RandomInvert(_RandomApply):
    """Invert the pixels (``255 - x``) with probability ``p``: torchvision's ``RandomInvert``.

    Args:
        p: probability of the change.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.invert(images)


class RandomAdjustSharpness(_RandomApply):
    """Sharpen (factor > 1) or soften (< 1) with probability ``p``: torchvision's ``RandomAdjustSharpness``.

    Args:
        sharpness_factor: non-negative; 0 gives the 3x3-smoothed image, 1 the
            original, 2 doubles the sharpness.
        p: probability of the change.
    """

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        super().__init__(p)
        if sharpness_factor < 0:
            raise ValueError(f"sharpness_factor ({sharpness_factor}) is not non-negative.")
        self.sharpness_factor = sharpness_factor

    def change(self, images: torch.Tensor) -> torch.Tensor:
        return kernels.adjust_sharpness(images, torch.full((images.shape[0],), float(self.sharpness_factor)))

    def _fields(self) -> str:
        return f"p={self.p}, sharpness_factor={self.sharpness_factor}"


def _kernel_size(kernel_size: int | Sequence[int]) -> tuple[int, int]:
    """torchvision's GaussianBlur kernel size: an int or one or two ints, each odd and positive."""
    if isinstance(kernel_size, (int, float)):
        sizes = (int(kernel_size), int(kernel_size))
    elif isinstance(kernel_size, Sequence) and len(kernel_size) in (1, 2):
        sizes = (kernel_size[0], kernel_size[-1])
    elif isinstance(kernel_size, Sequence):
        raise ValueError("Kernel size should be a tuple/list of two integers")
    else:
        raise TypeError(f"Kernel size should be an int or a sequence of two ints, not {kernel_size!r}")
    for size in sizes:
        if not isinstance(size, int) or size <= 0 or size % 2 == 0:
            raise ValueError("Kernel size value should be an odd and positive number.")
    return sizes


def _sigma_range(sigma: float | Sequence[float]) -> tuple[float, float]:
    """torchvision's GaussianBlur sigma: a number is fixed, a pair ``(min, max)`` is drawn from."""
    if isinstance(sigma, Sequence):
        if len(sigma) not in (1, 2):
            raise ValueError(f"If sigma is a sequence its length should be 1 or 2. Got {len(sigma)}")
        if not all(isinstance(value, (int, float)) for value in sigma):
            raise ValueError(f"sigma should be a sequence of numbers. Got {sigma!r}")
        low, high = float(sigma[0]), float(sigma[-1])
    elif isinstance(sigma, (int, float)):
        low = high = float(sigma)
    else:
        raise TypeError(f"sigma should be a number or a sequence of numbers. Got {type(sigma)}")
    if not 0.0 < low <= high:
        raise ValueError(f"sigma values should be positive and of the form (min, max). Got {[low, high]}")
    return low, high


class GaussianBlur(SampleOp):
    """Blur with a Gaussian of a randomly drawn sigma: torchvision's ``GaussianBlur``.

    Args:
        kernel_size: ``(width, height)`` of the kernel, or one int for both; odd and positive.
        sigma: a number is the sigma itself; ``(min, max)`` draws it uniformly
            per sample (the same sigma along both axes, as torchvision's).

    Borders are reflected. The pixels are within one grey level of torchvision's
    (the blur is separable; see :func:`datakit.vision.kernels.colour.gaussian_blur`).
    """

    target_support = "kept"

    def __init__(self, kernel_size: int | Sequence[int], sigma: float | Sequence[float] = (0.1, 2.0)) -> None:
        self.kernel_size = _kernel_size(kernel_size)
        self.sigma = list(_sigma_range(sigma))

    def draw(self, rand: SampleRandom, height: int, width: int) -> BlurParams:
        return BlurParams(rand.uniform(self.sigma[0], self.sigma[1]))

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = _checked_params(images, params, "GaussianBlur")
        chosen = [index for index, drawn in enumerate(params) if drawn is not None]
        sigmas = torch.tensor([params[index].sigma for index in chosen], dtype=torch.float64)
        return _apply_to(images, chosen, functools.partial(
            kernels.gaussian_blur, kernel_size=self.kernel_size, sigmas=sigmas.unsqueeze(1).expand(-1, 2)))

    def __repr__(self) -> str:
        return f"GaussianBlur(kernel_size={self.kernel_size}, sigma={self.sigma})"
