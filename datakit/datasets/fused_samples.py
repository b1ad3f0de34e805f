"""A dataset's samples through its ``datakit.vision`` pipeline, their boxes, masks and keypoints moved along.

Given as ``transform=``, the pipeline makes the image alone: each record is
decoded by the fused prefix, the per-sample steps run over the batch's
images, and the image is put in its sample (a pair with its label, or its
dict of fields), which is then finished as the dataset's samples are.

Given as ``transforms=`` (``whole``), it takes the whole sample, as
torchvision's v2 transforms do: the sample is built first (its dict, or its
``(image, target)`` pair), with its masks left undecoded; the fused prefix's
placement (:meth:`FusedDecoder.decode_placed`: torchvision's crop box, the
resize, the flip, with the image's own draws) moves every target, decoding
masks only where the output shows them; then the per-sample steps run with
the targets (:func:`datakit.vision.recipe.run_sample_steps`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from datakit.datasets.samples import checked_decode, parse_record, record_label
from datakit.datasets.shapes import FieldSamples, no_image
from datakit.errors import TransformError
from datakit.format.manifest import Manifest
from datakit.vision.pipeline import FusedPipeline
from datakit.vision.targets.sample import TargetLayout, TargetSample
from datakit.vision.targets.steps import Placement

__all__ = ["Decoded", "FusedSamples", "fused_pipeline"]

Decoded = tuple[int, torch.Tensor, Placement, Any]
"""A fused record: where it came from (a skipped record's replacement), its pixels, where they came from,
and its label (or the rest of its fields)."""


class FusedSamples:
    """Reads a dataset's records through its ``datakit.vision`` pipeline.

    Args:
        pipeline: the compiled pipeline.
        manifest: the store's manifest.
        labels: the store's label table (``dataset.targets``).
        shapes: how a field store's samples are built, or None for ``(image, label)`` pairs.
        whole: the pipeline was given as ``transforms=`` and takes whole samples.
    """

    def __init__(self, pipeline: FusedPipeline, manifest: Manifest, labels: np.ndarray,
                 shapes: FieldSamples | None, whole: bool) -> None:
        self.pipeline = pipeline
        self.manifest = manifest
        self.labels = labels
        self.shapes = shapes
        self.whole = whole
        self.layout = shapes.layout() if shapes is not None else TargetLayout()

    def decode(self, position: int, data: bytes) -> Decoded:
        """One record through the fused prefix, with the rest of its sample."""
        key, record = parse_record(data, position, self.manifest, self.labels)
        pixels, placement = checked_decode(key, self.pipeline.decode_placed, record, position)
        label = record_label(record, position, self.manifest, self.labels)
        if self.shapes is None:
            return position, pixels, placement, label
        return position, pixels, placement, self.shapes.decode(record, key, label, no_image, self.whole)

    def samples(self, decoded: Sequence[Decoded], target_transform: Callable[[Any], Any] | None,
                transforms: Callable[[Any], Any] | None) -> list[Any]:
        """The batch's samples, as the dataset returns them (``transforms`` is not a ``datakit.vision``
        pipeline: that one is this)."""
        where = [position for position, _, _, _ in decoded]
        if self.whole:
            return self._whole(decoded, where, target_transform)
        images = self.pipeline.samples([pixels for _, pixels, _, _ in decoded], where)
        loaded = [self._built(image, rest) for image, (_, _, _, rest) in zip(images, decoded, strict=True)]
        if target_transform is not None:  # pairs: a classification sample, or a detection one
            loaded = [(sample, target_transform(target)) for sample, target in loaded]
        if transforms is not None:
            loaded = [transforms(sample) for sample in loaded]
        return loaded

    def _built(self, image: torch.Tensor, rest: Any) -> Any:
        """The sample of a fused image: with its label, or its fields with the image put in, finished."""
        if self.shapes is None:
            return (image, rest)
        rest[self.shapes.image_key] = image
        return self.shapes.finish(rest)

    def _whole(self, decoded: Sequence[Decoded], where: list[int],
               target_transform: Callable[[Any], Any] | None) -> list[Any]:
        samples = []
        for position, pixels, placement, rest in decoded:
            sample = self._built(pixels, rest)
            if target_transform is not None:
                sample = (sample[0], target_transform(sample[1]))
            target = TargetSample(sample, self.layout)
            _naming(position, target.move, placement.steps, placement.source)
            samples.append(target)
        images = self.pipeline.samples([target.image for target in samples], where, samples)
        for target, image in zip(samples, images, strict=True):
            target.image = image
        return [_naming(position, target.value) for position, target in zip(where, samples, strict=True)]


def _naming(position: int, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, a ``TransformError`` naming the sample (masks are decoded as they are given back,
    after every step has joined their placement)."""
    try:
        return call(*args)
    except TransformError as exc:
        raise TransformError(f"sample {position}: {exc}") from None


def fused_pipeline(transform: object, transforms: object) -> tuple[FusedPipeline | None, bool]:
    """A dataset's ``datakit.vision`` pipeline, if it has one, and whether it takes whole samples
    (given as ``transforms=``).

    Raises:
        ValueError: both are ``datakit.vision`` pipelines.
    """
    on_image, whole = FusedPipeline.from_transform(transform), FusedPipeline.from_transform(transforms)
    if whole is not None and on_image is not None:
        raise ValueError("transform= and transforms= are both datakit.vision pipelines: give one, as "
                         "transforms= to move boxes, masks and keypoints with the image")
    return whole or on_image, whole is not None
