"""What to say when the samples of a batch cannot be stacked because their sizes differ.

The usual cause is a dataset of photos read as tensors without a transform
that gives every image one size: ``LMDBDataset(..., output="tensor")`` and a
batch size above 1. torch says only ``stack expects each tensor to be equal
size, but got [3, 375, 500] at entry 0 and [3, 333, 500] at entry 1``, and in
a worker whose batch is stacked into shared memory sized after the first
sample, sometimes ``Trying to resize storage that is not resizable``. The
error built here keeps torch's type (``RuntimeError``) and torch's sentence
first, so that whatever matches torch's error matches this one, then names
the two samples and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["size_mismatch"]

# Channel counts of a (C, H, W) image: grey, RGB, RGBA.
_IMAGE_CHANNELS = frozenset({1, 3, 4})

_IMAGE_ADVICE = (
    "For images of mixed sizes (photos), give the dataset a transform that makes every image one size, "
    "such as transform=datakit.vision.Compose([datakit.vision.RandomResizedCrop(224), ...]) for training "
    "or transform=datakit.vision.Resize((224, 224)) on a datakit dataset (torchvision's transforms on "
    "another dataset), or pass a collate_fn that pads them."
)

_OTHER_ADVICE = "Make the samples one size, or pass a collate_fn that pads or packs them."


def size_mismatch(batch: Sequence[torch.Tensor]) -> RuntimeError | None:
    """The error for a batch whose tensors do not all have the first one's shape; None if they do.

    Args:
        batch: The tensors about to be stacked.

    Returns:
        A ``RuntimeError`` whose message starts with torch's ``stack``
        message for the first tensor of another shape, then names the two
        samples and says how to give them one size (a ``datakit.vision``
        transform for images); None when every shape is the first's.
    """
    first = batch[0].shape
    position = next((index for index, item in enumerate(batch) if item.shape != first), None)
    if position is None:
        return None
    other = batch[position].shape
    message = (
        f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 and "
        f"{list(other)} at entry {position}. default_collate stacks the samples of a batch into one "
        "tensor, so they must all have one size"
    )
    if _is_image(first) and _is_image(other):
        return RuntimeError(
            f"{message}: samples 0 and {position} of the batch are {first[1]}x{first[2]} and "
            f"{other[1]}x{other[2]} images. {_IMAGE_ADVICE}"
        )
    return RuntimeError(f"{message}. {_OTHER_ADVICE}")


def _is_image(shape: torch.Size) -> bool:
    """Whether ``shape`` reads as one (C, H, W) image."""
    return len(shape) == 3 and shape[0] in _IMAGE_CHANNELS
