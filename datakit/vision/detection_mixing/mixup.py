"""Detection MixUp: each image blended with another of the batch, the boxes of both kept.

The YOLO recipes' ``MixUp`` (ultralytics' ``mixup`` hyperparameter is its
probability ``p``): output ``i`` is ``r * image_i + (1 - r) * image_j``, with
``j`` drawn uniformly among the batch's other samples (a batch of one is left as it is) and ``r`` from
``Beta(alpha, alpha)`` (``alpha = 32`` as the recipes: ``r`` near 0.5), and
its targets are both samples' targets joined, none weighted (a detector is
trained on both images' objects). Both images are laid from the top-left
corner: where the other image is smaller, the output's own pixels show
alone; where it is larger, it is cut to the output's canvas (its boxes
clipped there, kept when at least ``min_visibility`` of their area shows).
Per-image maps (a label map) are the output's own: a blend has no class per
pixel. uint8 pixels are blended in float32 and rounded half to even, float
pixels in their dtype.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.errors import TransformError
from datakit.vision.augment.mixing import beta
from datakit.vision.detection_mixing.assembly import Piece, assemble, placed
from datakit.vision.detection_mixing.base import SamplesOp, others
from datakit.vision.detection_mixing.instances import Instances
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.boxes import Canvas

__all__ = ["DetectionMixUp", "MixUpDraw", "concentration", "check_channels"]


@dataclass(frozen=True)
class MixUpDraw:
    """One output's MixUp: the batch position of the other image, and its own image's weight ``ratio``."""

    other: int
    ratio: float


def concentration(alpha: Any) -> float:
    """``alpha`` as a positive float; a ValueError naming it otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not float(alpha) > 0:
        raise ValueError(f"alpha must be a positive number (the Beta distribution's concentration), "
                         f"not {alpha!r}")
    return float(alpha)


def check_channels(op: SamplesOp, sources: Sequence[Instances], slot: int, other: int) -> None:
    """Refuse to mix images of different channel counts, naming both samples."""
    mine, theirs = sources[slot].pixels.shape[0], sources[other].pixels.shape[0]
    if mine != theirs:
        raise TransformError(f"{op!r}: sample {other} of the batch has {theirs} channels, sample {slot} "
                             f"{mine}")


class DetectionMixUp(SamplesOp):
    """Blend each image with another of the batch, keeping the boxes of both (datakit's own operation).

    Args:
        p: the probability that an output is blended (else its sample, unchanged).
        alpha: ``r ~ Beta(alpha, alpha)``, the output's own image's weight; 32 as the YOLO recipes.
        min_visibility: the least share of the other image's boxes' area that
            must lie on the output's canvas for them to be kept.

    Raises:
        ValueError: an argument out of its range, named.
    """

    def __init__(self, p: float = 1.0, alpha: float = 32.0, min_visibility: float = 0.0) -> None:
        super().__init__(p, min_visibility)
        self.alpha = concentration(alpha)

    def draw(self, rand: SampleRandom, slot: int, canvases: Sequence[Canvas]) -> MixUpDraw | None:
        if len(canvases) < 2:
            return None  # a batch of one: nothing to blend with (a sample with itself would repeat its boxes)
        other = others(rand, slot, len(canvases), 1)[0]
        return MixUpDraw(other, beta(rand, self.alpha))

    def build(self, sources: Sequence[Instances], slot: int, draw: Any) -> Any:
        check_channels(self, sources, slot, draw.other)
        base, other = sources[slot], sources[draw.other]
        canvas = base.canvas
        own = Piece(base, (0, 0), (0, 0, canvas[1], canvas[0]))
        laid = placed(other, (0, 0), canvas, maps=False)
        image = base.pixels.clone()
        x1, y1, x2, y2 = laid.region
        if x2 > x1 and y2 > y1:
            image[:, y1:y2, x1:x2] = blend(image[:, y1:y2, x1:x2], other.pixels[:, y1:y2, x1:x2], draw.ratio)
        return assemble(image, [own, laid], self.min_visibility, f"{self!r}, output {slot} of the batch")

    def __repr__(self) -> str:
        return f"DetectionMixUp(p={self.p}, alpha={self.alpha}, min_visibility={self.min_visibility})"


def blend(own: torch.Tensor, other: torch.Tensor, ratio: float) -> torch.Tensor:
    """``own * ratio + other * (1 - ratio)``: in float32 and rounded half to even for uint8, else in the
    pixels' dtype."""
    if own.dtype == torch.uint8:
        mixed = own.float().mul_(ratio).add_(other.float().mul_(1.0 - ratio))
        return mixed.round_().clamp_(0, 255).to(torch.uint8)
    return own * ratio + other.to(own.dtype) * (1.0 - ratio)
