"""``RandomHorizontalFlip`` after a per-sample step: batched, moving the targets.

A horizontal flip at the head of a pipeline is fused into decoding. In
torchvision's SSD recipe it comes after ``RandomIoUCrop``, where the fused
decoder cannot run it; given as a plain callable there it would get the whole
sample (``transforms=``), which datakit's flip does not take. The recipe runs
it as this batched operation instead (:func:`datakit.vision.recipe.compile_recipe`):
the flip fires when a uniform draw is below ``p``, keyed like every
per-sample draw, mirrors the pixels (torchvision's ``horizontal_flip``,
exact) and moves boxes, masks and keypoints with a
:class:`~datakit.vision.targets.steps.HorizontalFlip` step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from datakit.vision.augment.base import SampleOp
from datakit.vision.augment.rows import apply_to_rows
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.steps import HorizontalFlip, Step
from datakit.vision.transforms import RandomHorizontalFlip

__all__ = ["BatchedHorizontalFlip"]


class BatchedHorizontalFlip(SampleOp):
    """The batched form of a pipeline's ``RandomHorizontalFlip`` (its ``p``; its repr)."""

    target_support = "moved"

    def __init__(self, flip: RandomHorizontalFlip) -> None:
        self.flip = flip
        self.p = flip.p

    def draw(self, rand: SampleRandom, height: int, width: int) -> bool | None:
        return True if rand.random() < self.p else None

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        return (HorizontalFlip(),) if params else ()

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        if len(params) != images.shape[0]:
            raise ValueError(f"RandomHorizontalFlip got {len(params)} parameters for a batch of "
                             f"{images.shape[0]}")
        rows = [row for row, flip in enumerate(params) if flip]
        return apply_to_rows(images, rows, lambda chosen: chosen.flip(-1))

    def __repr__(self) -> str:
        return repr(self.flip)
