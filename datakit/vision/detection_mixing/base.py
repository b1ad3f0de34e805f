"""What Mosaic and detection MixUp / CutMix share: drawn once per batch, each output from whole samples.

A :class:`SamplesOp` draws, for each output slot of a batch, whether it
fires (probability ``p``) and what it takes (the other samples, a place, a
ratio), from one :class:`~datakit.vision.randomness.SampleRandom` per slot
derived from the batch's (keyed on the epoch seed and the batch's indices by
:func:`datakit.vision.recipe.batch_random`); then it builds every output from
the samples as they were before it (:mod:`.instances`, :mod:`.assembly`).
The other samples are the batch's: output ``i`` is built on sample ``i`` and
others drawn uniformly among the batch's other samples (distinct while the
batch has enough of them), so a batch is the same with any worker count and
after a resume, and no sample is read twice.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch

from datakit.errors import TransformError
from datakit.vision.augment.choice import RandomChoice
from datakit.vision.detection_mixing.instances import Instances, read_instances
from datakit.vision.randomness import SampleRandom, from_torch_generator, mix_seed
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.sample import TargetLayout, TargetSample
from datakit.vision.transforms import Transform

__all__ = ["SamplesOp", "DEFAULT_LAYOUT", "others", "probability", "mix_samples", "check_no_mixing_choice"]

DEFAULT_LAYOUT = TargetLayout(image="image", per_box=("labels",))
"""How a sample given to an operation directly is read: a dict's image under ``"image"`` (or a pair's
first item), torchvision's types for its targets, and ``labels`` aligned with the boxes."""


def probability(value: Any, name: str) -> float:
    """``value`` as a float in ``[0, 1]``; a ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], not {value!r}")
    return float(value)


def others(rand: SampleRandom, slot: int, size: int, count: int) -> list[int]:
    """``count`` batch positions other than ``slot``, drawn uniformly: distinct when the batch has
    ``count`` others, drawn with repetition when it has fewer, and ``slot`` itself in a batch of one."""
    pool = [position for position in range(size) if position != slot] or [slot]
    if len(pool) < count:
        return [pool[rand.integers(0, len(pool))] for _ in range(count)]
    for chosen in range(count):  # the first steps of a Fisher-Yates shuffle
        swap = rand.integers(chosen, len(pool))
        pool[chosen], pool[swap] = pool[swap], pool[chosen]
    return pool[:count]


class SamplesOp(Transform):
    """A batch operation that builds each output sample from several whole samples of the batch.

    Subclasses implement :meth:`draw` (one output's parameters) and
    :meth:`build` (the output, from the sources as read). In a pipeline given
    as ``transforms=``, the dataset runs it over each batch it reads; called
    directly, ``op(samples)`` mixes a list of samples (dicts or ``(image,
    target)`` pairs) drawing from torch's global generator.

    Args:
        p: the probability that an output is mixed; otherwise it is its sample, unchanged.
        min_visibility: the least share of a box's area that must still show for it to be kept.
    """

    def __init__(self, p: float, min_visibility: float) -> None:
        self.p = probability(p, "p")
        self.min_visibility = probability(min_visibility, "min_visibility")

    def draw(self, rand: SampleRandom, slot: int, canvases: Sequence[Canvas]) -> Any:
        """Output ``slot``'s parameters, for a batch whose images have ``canvases`` ``(height, width)``;
        None leaves the sample as it is."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def build(self, sources: Sequence[Instances], slot: int, draw: Any) -> Any:
        """Output ``slot``'s sample, from the batch's samples as read (:func:`read_instances`)."""
        raise NotImplementedError  # pragma: no cover - every operation overrides it

    def draw_samples(self, rand: SampleRandom, canvases: Sequence[Canvas]) -> list[Any]:
        """Every output's parameters (None where it does not fire): one generator per slot, derived
        from ``rand``, so that one slot's draws do not depend on another's."""
        key = rand.next_u64()
        draws = []
        for slot in range(len(canvases)):
            slot_rand = SampleRandom(mix_seed(key, slot))
            fires = slot_rand.random() < self.p
            draws.append(self.draw(slot_rand, slot, canvases) if fires else None)
        return draws

    def apply_samples(self, samples: Sequence[TargetSample], draws: Sequence[Any]) -> None:
        """Replace each sample of the batch by its output, all built from the samples as they were.

        Raises:
            ValueError: ``draws`` is not one per sample.
            TransformError: a sample this operation cannot read or place (named).
        """
        if len(draws) != len(samples):
            raise ValueError(f"{self!r} drew for {len(draws)} samples and was given {len(samples)}")
        if all(draw is None for draw in draws):
            return
        read = [read_instances(sample, f"{self!r}, sample {slot} of the batch")
                for slot, sample in enumerate(samples)]
        built = [None if draw is None else self.build(read, slot, draw) for slot, draw in enumerate(draws)]
        for sample, value in zip(samples, built, strict=True):
            if value is not None:
                sample.take(value, repr(self))

    # a batch of samples, not one image: it mixes samples, so its call cannot be a Transform's
    def __call__(self, samples: Sequence[Any],  # type: ignore[override]
                 layout: TargetLayout | None = None) -> list[Any]:
        """The batch ``samples`` mixed, drawing from torch's global generator.

        Args:
            samples: dict samples or ``(image, target)`` pairs, images ``(C, H, W)`` tensors.
            layout: which plain tensors are targets (:data:`DEFAULT_LAYOUT` if None).
        """
        targets = [TargetSample(sample, layout or DEFAULT_LAYOUT) for sample in samples]
        canvases = [(int(target.image.shape[-2]), int(target.image.shape[-1])) for target in targets]
        self.apply_samples(targets, self.draw_samples(from_torch_generator(), canvases))
        return [target.value() for target in targets]


def mix_samples(op: SamplesOp, images: torch.Tensor | Sequence[torch.Tensor],
                targets: Sequence[TargetSample] | None, rand: SampleRandom) -> list[torch.Tensor]:
    """``op`` over a batch's whole samples (a pipeline's step, :mod:`datakit.vision.recipe`): each
    sample's image is ``images[i]`` (what the steps before made), ``rand`` the batch's generator (keyed
    on the epoch seed, the batch's first index and size, the step's position); the images after.

    Raises:
        TransformError: no whole samples (the pipeline was given as ``transform=``).
    """
    if targets is None:
        raise TransformError(f"{op!r} builds samples from whole samples (their boxes along): give the "
                             "pipeline as transforms=")
    canvases = []
    for sample, target in zip(images, targets, strict=True):
        target.image = sample
        canvases.append((int(sample.shape[-2]), int(sample.shape[-1])))
    op.apply_samples(targets, op.draw_samples(rand, canvases))
    return [target.image for target in targets]


def check_no_mixing_choice(op: object) -> None:
    """Refuse a ``RandomChoice`` among Mosaic and the detection MixUp/CutMix: it would call one on each
    sample alone, and they mix whole batches.

    Raises:
        ValueError: naming the choice and what to write instead.
    """
    if isinstance(op, RandomChoice) and any(isinstance(each, SamplesOp) for each in op.transforms):
        raise ValueError(f"{op!r}: a RandomChoice between Mosaic, DetectionMixUp or DetectionCutMix is not "
                         "supported: give each its own p= (Mosaic(p=0.5), DetectionMixUp(p=0.1)) in the "
                         "Compose")
