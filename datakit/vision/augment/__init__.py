"""Batched augmentations after the fused decode: per-sample draws, whole-batch pixels.

See :mod:`datakit.vision.augment.base` for how an operation is split, and
``docs/vision.md`` for every operation's exactness against torchvision.
"""

from datakit.vision.augment.base import BatchOp, SampleOp, as_image_batch

__all__ = ["BatchOp", "SampleOp", "as_image_batch"]
