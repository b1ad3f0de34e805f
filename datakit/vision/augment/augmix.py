"""AugMix: several short chains of policy operations per sample, mixed with the original in float.

Follows torchvision v2's ``AugMix`` arithmetic: per sample, ``m ~ Dirichlet(alpha, alpha)``
weighs the original against the chains, ``w ~ Dirichlet(alpha, ..., alpha)`` (one per chain)
weighs the chains; in float32,
``mix = m[0] * image + sum_i (w[i] * m[1]) * chain_i(image)``, converted to uint8 by
truncation (torchvision's ``.to(torch.uint8)``, not rounding). Each chain has ``chain_depth``
operations (1 to 3 drawn uniformly where negative), each drawn uniformly from the AugMix space
at a bin drawn uniformly from the first ``severity`` of 10.

The chains run batched: chain ``i``'s step ``d`` is one kernel call per operation name over the
samples whose chain ``i`` has that step. Given the draws, the float32 mixing is torchvision's
operation for operation, so the result is exact where the chains' operations are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from datakit.vision.augment.base import SampleOp, as_image_batch
from datakit.vision.augment.policy_ops import (
    OpDraw,
    apply_step,
    draw_op,
    fill_value,
    interpolation_name,
    normal,
    torchvision_refuses,
)
from datakit.vision.randomness import SampleRandom

__all__ = ["AugMix", "AugMixDraw", "gamma", "dirichlet"]

_PARAMETER_MAX = 10
_CPU_PIECE = 1 << 19  # values of float32 temporaries per piece of a CPU batch: a few 224x224 images


class AugMixDraw(NamedTuple):
    """One sample's AugMix draw: the Beta weights (original, chains), the chains' Dirichlet weights,
    and each chain's operations."""

    mix: tuple[float, float]
    weights: tuple[float, ...]
    chains: tuple[tuple[OpDraw, ...], ...]


def gamma(rand: SampleRandom, shape: float) -> float:
    """A ``Gamma(shape, 1)`` float: Marsaglia and Tsang's squeeze method, boosted for ``shape < 1``."""
    if shape < 1.0:
        return gamma(rand, shape + 1.0) * float((1.0 - rand.random()) ** (1.0 / shape))
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        x = normal(rand, 0.0, 1.0)
        v = (1.0 + c * x) ** 3
        if v > 0.0 and math.log(1.0 - rand.random()) < 0.5 * x * x + d - d * v + d * math.log(v):
            return d * v


def dirichlet(rand: SampleRandom, alphas: Sequence[float]) -> tuple[float, ...]:
    """A ``Dirichlet(alphas)`` draw: independent Gamma draws, normalised to sum to one."""
    draws = [gamma(rand, alpha) for alpha in alphas]
    total = sum(draws)
    if total == 0.0:  # every Gamma underflowed (a tiny alpha): the limit puts all weight on one
        draws[rand.integers(0, len(draws))] = total = 1.0
    return tuple(draw / total for draw in draws)


def _mixed(images: torch.Tensor, chains: Sequence[torch.Tensor], original: torch.Tensor,
           weights: torch.Tensor) -> torch.Tensor:
    """``images`` becomes ``original * images + sum_i weights[:, i] * chains[i]`` in float32, truncated
    to uint8 (torchvision's operations in its order). A CPU batch is mixed a few images at a time:
    float32 temporaries of a whole batch go to memory on every pass, a few images' stay in cache."""
    count = images.shape[0]
    step = count if images.device.type != "cpu" else max(1, _CPU_PIECE // images[0].numel())
    for start in range(0, count, step):
        rows = slice(start, start + step)
        result = original[rows].reshape(-1, 1, 1, 1) * images[rows]
        for chain, augmented in enumerate(chains):
            result.add_(weights[rows, chain].reshape(-1, 1, 1, 1) * augmented[rows])
        images[rows] = result  # float32 to uint8 truncates, as torchvision's .to(torch.uint8)
    return images


class AugMix(SampleOp):
    """AugMix; torchvision's ``AugMix`` with its arguments and defaults.

    Args:
        severity: operations use the first ``severity`` of 10 magnitude bins (1 to 10).
        mixture_width: how many chains are mixed (>= 1).
        chain_depth: operations per chain; a value <= 0 draws 1 to 3 per chain.
        alpha: the Dirichlet and Beta concentration (> 0).
        all_ops: include Brightness, Color, Contrast and Sharpness (AugMix's paper leaves them out,
            as they overlap with ImageNet-C's corruptions).
        interpolation: ``"nearest"`` or ``"bilinear"`` (or torchvision's ``InterpolationMode``).
        fill: None (zeros), one number, or one per channel, for pixels moved in from outside.

    ``draw`` returns an :class:`AugMixDraw`.
    """

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0,
                 all_ops: bool = True, interpolation: Any = "bilinear", fill: Any = None) -> None:
        if not 1 <= severity <= _PARAMETER_MAX:
            raise ValueError(f"The severity must be between [1, {_PARAMETER_MAX}]. Got {severity} instead.")
        if not isinstance(mixture_width, int) or mixture_width < 1:
            raise ValueError(f"mixture_width must be a positive integer, not {mixture_width!r}")
        if not alpha > 0.0:
            raise ValueError(f"alpha must be positive, not {alpha!r}")
        self.severity = int(severity)
        self.mixture_width = mixture_width
        self.chain_depth = int(chain_depth)
        self.alpha = float(alpha)
        self.all_ops = bool(all_ops)
        self.interpolation = interpolation_name(interpolation)
        self.fill = fill_value(fill)

    def draw(self, rand: SampleRandom, height: int, width: int) -> AugMixDraw:
        original, augmented = dirichlet(rand, (self.alpha, self.alpha))
        weights = dirichlet(rand, (self.alpha,) * self.mixture_width)
        space = "AugMix" if self.all_ops else "AugMixPartial"
        severity = self.severity
        chains = []
        for _ in range(self.mixture_width):
            depth = self.chain_depth if self.chain_depth > 0 else rand.integers(1, 4)
            chains.append(tuple(draw_op(rand, space, _PARAMETER_MAX, height, width,
                                        lambda r: r.integers(0, severity)) for _ in range(depth)))
        return AugMixDraw((original, augmented), weights, tuple(chains))

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = as_image_batch(images, "AugMix")
        if len(params) != images.shape[0]:
            raise ValueError(f"AugMix: {len(params)} draws for a batch of {images.shape[0]}")
        unchanged = AugMixDraw((1.0, 0.0), (0.0,) * self.mixture_width, ((),) * self.mixture_width)
        draws = [unchanged if draw is None else draw for draw in params]
        mix = torch.tensor([draw.mix for draw in draws], dtype=torch.float32, device=images.device)
        weights = torch.tensor([draw.weights for draw in draws], dtype=torch.float32, device=images.device)
        weights = weights * mix[:, 1:2]  # float32 products, as torchvision's combined weights
        chains = []
        for chain in range(self.mixture_width):
            augmented = images.clone()
            for step in range(max(len(draw.chains[chain]) for draw in draws)):
                augmented = apply_step(
                    augmented, [draw.chains[chain][step] if step < len(draw.chains[chain]) else None
                                for draw in draws], self.interpolation, self.fill)
            chains.append(augmented)
        return _mixed(images, chains, mix[:, 0], weights)

    def target_refusal(self) -> str:
        return torchvision_refuses("AugMix")

    def __repr__(self) -> str:
        return (f"AugMix(severity={self.severity}, mixture_width={self.mixture_width}, "
                f"chain_depth={self.chain_depth}, alpha={self.alpha}, all_ops={self.all_ops}, "
                f"interpolation={self.interpolation!r}, fill={self.fill!r})")
