"""torchvision v2's ``RandomChoice``: one of several transforms, picked with probabilities ``p``.

torchvision picks once per call (``torch.multinomial`` over the normalised
``p``). What one call is depends on what is chosen between:

- batch operations (``RandomChoice([MixUp(...), CutMix(...)])``, as
  torchvision's references do): a :class:`~datakit.vision.augment.BatchOp`,
  picking once per batch;
- per-sample batched operations: a :class:`~datakit.vision.augment.SampleOp`
  picking once per sample, each pick drawn with the sample's own randomness;
  a batch is applied one chosen operation at a time, over the samples that
  chose it;
- anything else (plain callables, or a mix of kinds): picked once per call,
  from torch's global generator, as torchvision does.

``RandomChoice(...)`` returns an instance of the class that fits, so
``isinstance(choice, SampleOp)`` tells a pipeline how to run it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from datakit.vision.augment.base import BatchOp, SampleOp, TargetSupport, as_image_batch
from datakit.vision.augment.rows import apply_to_rows
from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.targets.steps import Step
from datakit.vision.transforms import Transform

__all__ = ["RandomChoice", "SampleOpChoice", "BatchOpChoice"]


class RandomChoice(Transform):
    """Apply one transform picked at random from ``transforms``: torchvision's ``RandomChoice``.

    Args:
        transforms: the transforms to pick from (a non-empty sequence).
        p: the weight of each; normalised to sum to one. None weighs them equally.
    """

    def __new__(cls, transforms: Sequence[Callable[..., Any]] = (),
                p: Sequence[float] | None = None) -> RandomChoice:
        # the defaults let pickle rebuild an instance (it calls ``cls.__new__(cls)``)
        if cls is RandomChoice and isinstance(transforms, Sequence) and transforms:
            if all(isinstance(transform, SampleOp) for transform in transforms):
                return super().__new__(SampleOpChoice)
            if all(isinstance(transform, BatchOp) for transform in transforms):
                return super().__new__(BatchOpChoice)
        return super().__new__(cls)

    def __init__(self, transforms: Sequence[Callable[..., Any]], p: Sequence[float] | None = None) -> None:
        if not isinstance(transforms, Sequence):
            raise TypeError("Argument transforms should be a sequence of callables")
        if not transforms:
            raise ValueError("Pass at least one transform")
        weights = [1.0] * len(transforms) if p is None else [float(weight) for weight in p]
        if len(weights) != len(transforms):
            raise ValueError(f"Length of p doesn't match the number of transforms: {len(weights)} != "
                             f"{len(transforms)}")
        total = sum(weights)
        self.transforms: Sequence[Callable[..., Any]] = list(transforms)
        self.p = [weight / total for weight in weights]

    def pick(self, rand: SampleRandom) -> int:
        """The index of the transform drawn from ``rand``, each with its probability ``p``."""
        uniform = rand.random()
        cumulative = 0.0
        for index, weight in enumerate(self.p):
            cumulative += weight
            if uniform < cumulative and weight > 0:
                return index
        return max(index for index, weight in enumerate(self.p) if weight > 0)  # rounding at the top

    def __call__(self, *inputs: Any) -> Any:
        return self.transforms[self.pick(from_torch_generator())](*inputs)

    def __repr__(self) -> str:
        """What the user wrote: ``RandomChoice([...])`` whichever class it became, ``p`` when not uniform."""
        inner = ", ".join(repr(transform) for transform in self.transforms)
        uniform = all(weight == self.p[0] for weight in self.p)
        weights = "" if uniform else f", p={[round(weight, 4) for weight in self.p]}"
        return f"RandomChoice([{inner}]{weights})"


def _apply_picked(transform: SampleOp, params: list[Any], images: torch.Tensor) -> torch.Tensor:
    return transform.apply_batch(images, params)


class SampleOpChoice(RandomChoice, SampleOp):
    """A :class:`RandomChoice` between per-sample operations: each sample picks, then draws its pick's
    parameters; a batch runs each picked operation once, over the samples that picked it."""

    transforms: Sequence[SampleOp]

    def __init__(self, transforms: Sequence[Callable[..., Any]], p: Sequence[float] | None = None) -> None:
        super().__init__(transforms, p)
        supports = {transform.target_support for transform in self.transforms}
        support: TargetSupport = "unsupported" if "unsupported" in supports else \
            "moved" if "moved" in supports else "kept"
        self.target_support = support

    def draw(self, rand: SampleRandom, height: int, width: int) -> tuple[int, Any] | None:
        index = self.pick(rand)
        params = self.transforms[index].draw(rand, height, width)
        return None if params is None else (index, params)

    def apply_batch(self, images: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        images = as_image_batch(images, "RandomChoice")
        if len(params) != images.shape[0]:
            raise ValueError(f"RandomChoice got {len(params)} parameters for a batch of {images.shape[0]}")
        for index, transform in enumerate(self.transforms):
            rows = [row for row, draw in enumerate(params) if draw is not None and draw[0] == index]
            images = apply_to_rows(images, rows, functools.partial(
                _apply_picked, transform, [params[row][1] for row in rows]))
        return images

    def target_steps(self, params: Any, height: int, width: int) -> tuple[Step, ...]:
        return () if params is None else self.transforms[params[0]].target_steps(params[1], height, width)

    def __call__(self, image: Any) -> torch.Tensor:
        return SampleOp.__call__(self, image)


class BatchOpChoice(RandomChoice, BatchOp):
    """A :class:`RandomChoice` between batch operations (MixUp or CutMix): one pick per batch."""

    transforms: Sequence[BatchOp]

    def draw_batch(self, rand: SampleRandom, batch_size: int, height: int, width: int) -> tuple[int, Any]:
        index = self.pick(rand)
        return index, self.transforms[index].draw_batch(rand, batch_size, height, width)

    def apply(self, images: torch.Tensor, labels: torch.Tensor,
              params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        index, picked = params
        mixed_images, mixed_labels = self.transforms[index].apply(images, labels, picked)
        return mixed_images, mixed_labels

    def __call__(self, images: Any, labels: Any = None) -> Any:
        return self.transforms[self.pick(from_torch_generator())](images, labels)
