"""torchvision v2's ``MixUp`` and ``CutMix``: drawn once per batch, mixing each sample with the previous one.

As torchvision's, both pair sample ``i`` with sample ``i - 1`` (the batch
rolled by one, so the batch should be shuffled), draw ``lambda`` from
``Beta(alpha, alpha)``, and return soft labels: integer labels ``(N,)``
become one-hot float32 rows of ``num_classes`` (required for them, as in
torchvision 0.28; probability rows ``(N, K)`` are taken as they are), then
``label * lambda + rolled * (1 - lambda)``. CutMix pastes the rolled batch's
box, centred on a uniform pixel, with half-sides ``int(0.5 * sqrt(1 - lambda)
* size)`` clipped to the image, and mixes the labels by the share of the
image the box left, ``1 - box area / image area``.

``lambda`` is drawn from the batch's :class:`SampleRandom` as the ratio of
two Gamma(alpha) draws (Marsaglia and Tsang's method, boosted below alpha =
1, in logarithms so tiny alphas cannot divide zero by zero), rounded to
float32 and clamped as torch's: the same distribution as torch's
``Beta.sample``, reproducible from the seed.

Pixels: float batches get torchvision's arithmetic exactly
(``rolled.mul_(1 - lambda).add_(images.mul(lambda))``, in the batch's dtype).
On a uint8 batch torchvision's MixUp raises (an in-place float product into
uint8); datakit mixes the pixels in float32 the same way and rounds back to
uint8 (half to even), so that the batch can stay uint8 until ``Normalize``.
CutMix copies pixels, so any dtype is exact.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.functional import one_hot

from datakit.vision.augment.base import BatchOp
from datakit.vision.randomness import SampleRandom, from_torch_generator

__all__ = ["MixUp", "CutMix", "MixUpParams", "CutMixParams", "beta"]

_FLOAT32_TINY = 2.0 ** -126
_BELOW_ONE = 1.0 - 2.0 ** -24
_CHUNK_VALUES = 1 << 19


@dataclass(frozen=True)
class MixUpParams:
    """One batch's MixUp draw: the weight ``lam`` of each sample against the previous one."""

    lam: float


@dataclass(frozen=True)
class CutMixParams:
    """One batch's CutMix draw: the pasted box ``(x1, y1, x2, y2)`` and the labels' weight ``lam``
    (torchvision's ``lam_adjusted``, the share of the image outside the box)."""

    box: tuple[int, int, int, int]
    lam: float


def _standard_normal(rand: SampleRandom) -> float:
    """Box-Muller: one standard normal draw from two uniforms."""
    radius = math.sqrt(-2.0 * math.log(1.0 - rand.random()))
    return radius * math.cos(2.0 * math.pi * rand.random())


def _log_gamma_draw(rand: SampleRandom, shape: float) -> float:
    """The logarithm of a Gamma(shape, 1) draw (Marsaglia and Tsang; shape < 1 by boosting)."""
    if shape < 1.0:
        return _log_gamma_draw(rand, shape + 1.0) + math.log(1.0 - rand.random()) / shape
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        x = _standard_normal(rand)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = 1.0 - rand.random()
        if u < 1.0 - 0.0331 * x ** 4 or math.log(u) < 0.5 * x * x + d * (1.0 - v + math.log(v)):
            return math.log(d) + math.log(v)


def beta(rand: SampleRandom, alpha: float) -> float:
    """A draw from ``Beta(alpha, alpha)`` as ``torch.distributions.Beta(alpha, alpha).sample()`` gives it:
    a float32 value, clamped to ``[2**-126, 1 - 2**-24]`` as torch's Dirichlet sampler clamps it.

    The float32 rounding matters to the distribution for small alphas: with
    alpha = 0.2, about 2 % of torch's draws sit on ``1 - 2**-24``.
    """
    difference = _log_gamma_draw(rand, alpha) - _log_gamma_draw(rand, alpha)  # log(x / y)
    if difference >= 0.0:
        lam = 1.0 / (1.0 + math.exp(-difference))
    else:
        ratio = math.exp(difference)
        lam = ratio / (1.0 + ratio)
    as_float32: float = struct.unpack("f", struct.pack("f", lam))[0]
    return min(max(as_float32, _FLOAT32_TINY), _BELOW_ONE)


def _second_input(inputs: tuple[Any, Any]) -> Any:
    """torchvision's default labels getter for a call ``op(images, labels)``: the labels."""
    return inputs[1]


def _no_labels(inputs: tuple[Any, Any]) -> None:
    return None


def _labels_getter(labels_getter: Any) -> Callable[[Any], Any]:
    """Module-level functions (not lambdas), so that an operation pickles into spawned workers."""
    if labels_getter == "default":
        return _second_input
    if callable(labels_getter):
        return labels_getter  # type: ignore[no-any-return]
    if labels_getter is None:
        return _no_labels
    raise ValueError("labels_getter should either be 'default', a callable, or None, "
                     f"but got {labels_getter}.")


def _blend(images: torch.Tensor, lam: float) -> torch.Tensor:
    """``previous * (1 - lam) + images * lam`` with torchvision's roundings, in place, by chunks.

    torchvision computes ``images.roll(1, 0).mul_(1 - lam).add_(images.mul(lam))``;
    the same products and sum per element, over chunks of about 2^19 values on
    the CPU, stay in cache: 2 to 5 times faster than whole-batch passes
    (measured on 128 x 3 x 224 x 224), and the same bits. The chunks go from
    the last sample to the first, so each reads its predecessor before that is
    overwritten (the first reads a copy of the last), and no second batch is
    allocated. uint8 is mixed in float32 and rounded back.
    """
    count = int(images.shape[0])
    if count == 0 or images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        return images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))  # torchvision's error, if any
    per_sample = max(1, images[0].numel())
    step = max(1, _CHUNK_VALUES // per_sample) if images.device.type == "cpu" else count
    last = images[count - 1:].clone()  # sample 0's predecessor, before it is mixed
    for stop in range(count, 0, -step):
        start = max(stop - step, 0)
        previous = images[start - 1:stop - 1] if start else torch.cat((last, images[:stop - 1]))
        current = images[start:stop]
        if images.dtype == torch.uint8:
            mixed = previous.float().mul_(1.0 - lam).add_(current.float().mul_(lam))
            current.copy_(mixed.round_().clamp_(0, 255))
        else:
            mixed = previous.mul(1.0 - lam)
            current.mul_(lam)
            current.add_(mixed)  # previous * (1 - lam) + current * lam: the same two products and sum
    return images


class _Mixing(BatchOp):
    """What MixUp and CutMix share: arguments, label checks and mixing, the call on one batch."""

    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None,
                 labels_getter: Any = "default") -> None:
        if not alpha > 0:
            raise ValueError(f"alpha must be positive (the Beta distribution's concentration), got {alpha}")
        self.alpha = float(alpha)
        self.num_classes = num_classes
        self.labels_getter = labels_getter
        self._get_labels = _labels_getter(labels_getter)

    def _checked(self, images: torch.Tensor, labels: Any) -> None:
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"The labels must be a tensor, but got {type(labels)} instead.")
        if labels.ndim not in (1, 2):
            raise ValueError("labels should be index based with shape (batch_size,) or probability based "
                             "with shape (batch_size, num_classes), but got a tensor of shape "
                             f"{labels.shape} instead.")
        if labels.ndim == 2 and self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise ValueError("When passing 2D labels, the number of elements in last dimension must match "
                             f"num_classes: {labels.shape[-1]} != {self.num_classes}. "
                             "You can Leave num_classes to None.")
        if labels.ndim == 1 and self.num_classes is None:
            raise ValueError("num_classes must be passed if the labels are index-based (1D)")
        if not isinstance(images, torch.Tensor) or images.ndim != 4:
            raise ValueError(f"Expected a batched input with 4 dims, but got {getattr(images, 'ndim', None)} "
                             "dimensions instead.")
        if images.shape[0] != labels.shape[0]:
            raise ValueError("The batch size of the image or video does not match the batch size of the "
                             f"labels: {images.shape[0]} != {labels.shape[0]}.")

    def _mixed_labels(self, labels: torch.Tensor, lam: float) -> torch.Tensor:
        if labels.ndim == 1:
            labels = one_hot(labels, num_classes=self.num_classes)  # type: ignore[arg-type]
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    def __call__(self, images: Any, labels: Any = None) -> Any:
        labels = self._get_labels((images, labels))
        self._checked(images, labels)
        params = self.draw_batch(from_torch_generator(), int(images.shape[0]), int(images.shape[-2]),
                                 int(images.shape[-1]))
        return self.apply(images.clone(), labels, params)  # apply mixes in place; the caller's batch stays

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUp(_Mixing):
    """Blend each sample with the previous one: torchvision's ``MixUp``.

    Args:
        alpha: the Beta distribution's concentration (both of them).
        num_classes: the number of classes, for one-hot labels; may be None
            only when the labels are already probabilities ``(N, K)``.
        labels_getter: ``"default"`` (the call's second argument), a callable
            taking the ``(images, labels)`` pair, or None.
    """

    def draw_batch(self, rand: SampleRandom, batch_size: int, height: int, width: int) -> MixUpParams:
        return MixUpParams(beta(rand, self.alpha))

    def apply(self, images: torch.Tensor, labels: torch.Tensor,
              params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self._checked(images, labels)
        return _blend(images, params.lam), self._mixed_labels(labels, params.lam)


class CutMix(_Mixing):
    """Paste a box of the previous sample into each one: torchvision's ``CutMix``.

    Args: as :class:`MixUp`'s.
    """

    def draw_batch(self, rand: SampleRandom, batch_size: int, height: int, width: int) -> CutMixParams:
        lam = beta(rand, self.alpha)
        centre_x, centre_y = rand.integers(0, width), rand.integers(0, height)
        half = 0.5 * math.sqrt(1.0 - lam)
        half_width, half_height = int(half * width), int(half * height)
        x1, y1 = max(centre_x - half_width, 0), max(centre_y - half_height, 0)
        x2, y2 = min(centre_x + half_width, width), min(centre_y + half_height, height)
        return CutMixParams((x1, y1, x2, y2), float(1.0 - (x2 - x1) * (y2 - y1) / (width * height)))

    def apply(self, images: torch.Tensor, labels: torch.Tensor,
              params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self._checked(images, labels)
        x1, y1, x2, y2 = params.box
        images[..., y1:y2, x1:x2] = images[..., y1:y2, x1:x2].roll(1, 0)  # roll copies the boxes first
        return images, self._mixed_labels(labels, params.lam)
