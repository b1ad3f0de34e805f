"""torchvision's automatic augmentation policies, drawn per sample and applied per batch.

:class:`AutoAugment`, :class:`RandAugment` and :class:`TrivialAugmentWide`
take torchvision v2's arguments and defaults and draw each sample's
operations and magnitudes with torchvision's distributions (the spaces are
in :mod:`datakit.vision.augment.policy_ops`). ``draw`` returns what
torchvision would pass to ``_apply_image_or_video_transform`` for each step:
an :class:`~datakit.vision.augment.policy_ops.OpDraw` ``(op, magnitude)``,
a tuple of them for several steps, None for an AutoAugment step whose
probability did not fire. ``apply_batch`` applies step by step, each step as
one batched kernel call per operation name over the samples that drew it,
so a batch of 128 costs at most one call per operation in the space per
step rather than 128.

For fixed draws, the pixels are torchvision's tensor path's within the
kernels' bounds (:mod:`datakit.vision.kernels`): torchvision's PIL path
rounds affine coordinates and colour blends differently, and is not
followed. ``interpolation`` is ``"nearest"`` or ``"bilinear"``, the modes the
batched affine kernel has.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp, as_image_batch
from datakit.vision.augment.policy_ops import (
    OpDraw,
    apply_step,
    draw_magnitude,
    draw_op,
    fill_value,
    interpolation_name,
    normal,
    op_steps,
    torchvision_refuses,
)
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.steps import Step

__all__ = ["AutoAugmentPolicy", "AutoAugment", "RandAugment", "TrivialAugmentWide"]


class AutoAugmentPolicy(Enum):
    """The AutoAugment policies learned on ImageNet, CIFAR10 and SVHN, with torchvision's values,
    so torchvision's own ``AutoAugmentPolicy`` members (read by value) and strings are accepted."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


SubPolicy = tuple[tuple[str, float, int | None], tuple[str, float, int | None]]

# torchvision's sub-policies: (operation, probability, magnitude bin out of 10) twice.
_SUB_POLICIES: dict[AutoAugmentPolicy, tuple[SubPolicy, ...]] = {
    AutoAugmentPolicy.IMAGENET: (
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ),
    AutoAugmentPolicy.CIFAR10: (
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ),
    AutoAugmentPolicy.SVHN: (
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ),
}


class _Policy(SampleOp):
    """What the policies share: interpolation and fill, the step-by-step batched application, and
    ``move_targets``.

    torchvision v2's policies refuse samples with boxes, masks or keypoints
    (``TypeError``), and so do these by default (``target_support`` is
    ``"unsupported"``). ``move_targets=True`` is datakit's extension: each
    sample's ShearX/Y, TranslateX/Y and Rotate move its targets as
    torchvision's ``affine`` and ``rotate`` (the calls its policies make for
    the image) move them, and the colour operations keep them.
    """

    def __init__(self, interpolation: Any, fill: Any, move_targets: bool = False) -> None:
        self.interpolation = interpolation_name(interpolation)
        self.fill = fill_value(fill)
        self.move_targets = bool(move_targets)
        self.target_support = "moved" if self.move_targets else "unsupported"

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        """Each drawn operation's steps in turn (:func:`~.policy_ops.op_steps`), with ``move_targets``."""
        return tuple(step for draw in _steps(params) for step in op_steps(draw, self.fill))

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = as_image_batch(images, type(self).__name__)
        if len(params) != images.shape[0]:
            raise ValueError(f"{type(self).__name__}: {len(params)} draws for a batch of {images.shape[0]}")
        steps = [_steps(draws) for draws in params]
        for step in range(max((len(draws) for draws in steps), default=0)):
            images = apply_step(images, [draws[step] if step < len(draws) else None for draws in steps],
                                self.interpolation, self.fill)
        return images

    def target_refusal(self) -> str:
        return (f"{torchvision_refuses(type(self).__name__)}; move_targets=True moves them with its shears, "
                "translations and rotations (datakit's extension)")

    def _arguments(self) -> str:
        moved = ", move_targets=True" if self.move_targets else ""
        return f"interpolation={self.interpolation!r}, fill={self.fill!r}{moved}"


def _steps(draws: Any) -> tuple[OpDraw | None, ...]:
    """A sample's draw as its steps in order: an ``OpDraw``, a tuple of them (or of None), or None."""
    return () if draws is None else (draws,) if isinstance(draws, OpDraw) else tuple(draws)


class AutoAugment(_Policy):
    """AutoAugment: one of a policy's 25 sub-policies per sample, each of its two operations applied
    with its own probability and fixed magnitude bin (out of 10); torchvision's ``AutoAugment``.

    Args:
        policy: :class:`AutoAugmentPolicy`, its value (``"imagenet"``, ``"cifar10"``, ``"svhn"``)
            or torchvision's ``AutoAugmentPolicy`` member.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's ``InterpolationMode``).
        fill: the value of pixels moved in from outside by shears, translations and rotations:
            None (zeros), one number, or one per channel.
        move_targets: move boxes, masks and keypoints (datakit's extension; torchvision refuses them).

    ``draw`` returns two steps, each an ``OpDraw`` or None where its probability did not fire.
    """

    def __init__(self, policy: Any = AutoAugmentPolicy.IMAGENET, interpolation: Any = "nearest",
                 fill: Any = None, move_targets: bool = False) -> None:
        super().__init__(interpolation, fill, move_targets)
        try:
            self.policy = AutoAugmentPolicy(getattr(policy, "value", policy))
        except ValueError:
            raise ValueError(f"The provided policy {policy!r} is not recognized.") from None

    def draw(self, rand: SampleRandom, height: int, width: int) -> tuple[OpDraw | None, ...]:
        sub_policies = _SUB_POLICIES[self.policy]
        steps: list[OpDraw | None] = []
        for op, probability, level in sub_policies[rand.integers(0, len(sub_policies))]:
            fired = rand.random() < probability
            steps.append(draw_magnitude(rand, "AutoAugment", op, level or 0, 10, height, width)
                         if fired else None)
        return tuple(steps)

    def __repr__(self) -> str:
        return f"AutoAugment(policy={self.policy}, {self._arguments()})"


class RandAugment(_Policy):
    """RandAugment: ``num_ops`` operations per sample, each drawn uniformly from 14 (Identity
    included), all at magnitude bin ``magnitude`` of ``num_magnitude_bins``; torchvision's
    ``RandAugment``.

    Args:
        num_ops: how many operations each sample undergoes, one after the other.
        magnitude: the bin, ``0 <= magnitude < num_magnitude_bins``.
        num_magnitude_bins: how many magnitudes each operation's ramp has.
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's ``InterpolationMode``).
        fill: None (zeros), one number, or one per channel, for pixels moved in from outside.
        magnitude_std: a datakit extension for timm's ``mstd`` recipes (``rand-m9-mstd0.5``), not in
            torchvision: where positive, each operation's bin is drawn from
            ``Normal(magnitude, magnitude_std)`` clipped to ``[0, num_magnitude_bins - 1]``, and its
            magnitude read off the operation's straight ramp at that fractional bin (rounded for
            Posterize's bits). The default 0 is torchvision's RandAugment exactly.
        move_targets: move boxes, masks and keypoints (datakit's extension; torchvision refuses them).

    ``draw`` returns a tuple of ``num_ops`` ``OpDraw``.
    """

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Any = "nearest", fill: Any = None, magnitude_std: float = 0.0,
                 move_targets: bool = False) -> None:
        super().__init__(interpolation, fill, move_targets)
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops should be a non-negative integer, but got {num_ops} instead.")
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an integer >= 2, not {num_magnitude_bins!r}")
        if not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"magnitude must be an integer bin in [0, {num_magnitude_bins}), "
                             f"not {magnitude!r}")
        if not 0.0 <= magnitude_std < float("inf"):
            raise ValueError(f"magnitude_std must be a finite number >= 0, not {magnitude_std!r}")
        self.num_ops = num_ops
        self.magnitude = magnitude
        self.num_magnitude_bins = num_magnitude_bins
        self.magnitude_std = float(magnitude_std)

    def _level(self, rand: SampleRandom) -> float:
        if self.magnitude_std == 0.0:
            return float(self.magnitude)
        level = normal(rand, float(self.magnitude), self.magnitude_std)
        return min(max(level, 0.0), float(self.num_magnitude_bins - 1))

    def draw(self, rand: SampleRandom, height: int, width: int) -> tuple[OpDraw, ...]:
        return tuple(draw_op(rand, "RandAugment", self.num_magnitude_bins, height, width, self._level)
                     for _ in range(self.num_ops))

    def __repr__(self) -> str:
        extension = f", magnitude_std={self.magnitude_std}" if self.magnitude_std else ""
        return (f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude}, "
                f"num_magnitude_bins={self.num_magnitude_bins}, {self._arguments()}{extension})")


class TrivialAugmentWide(_Policy):
    """TrivialAugment Wide: one operation per sample, drawn uniformly from 14 (Identity included),
    at a bin drawn uniformly from ``num_magnitude_bins``; torchvision's ``TrivialAugmentWide``.

    Args:
        num_magnitude_bins: how many magnitudes each operation's ramp has (>= 2).
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's ``InterpolationMode``).
        fill: None (zeros), one number, or one per channel, for pixels moved in from outside.
        move_targets: move boxes, masks and keypoints (datakit's extension; torchvision refuses them).

    ``draw`` returns one ``OpDraw``.
    """

    def __init__(self, num_magnitude_bins: int = 31, interpolation: Any = "nearest",
                 fill: Any = None, move_targets: bool = False) -> None:
        super().__init__(interpolation, fill, move_targets)
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an integer >= 2, not {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins

    def draw(self, rand: SampleRandom, height: int, width: int) -> OpDraw:
        bins = self.num_magnitude_bins
        return draw_op(rand, "TrivialAugmentWide", bins, height, width, lambda r: r.integers(0, bins))

    def __repr__(self) -> str:
        return f"TrivialAugmentWide(num_magnitude_bins={self.num_magnitude_bins}, {self._arguments()})"

