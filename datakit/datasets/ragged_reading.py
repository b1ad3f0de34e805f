"""Ragged reading: a batch of images of several sizes decoded straight into memory the loader gives.

:class:`datakit.DataLoader` gives a batch whose images differ in size (a
detection store, multiscale) a *ragged slot*: shared memory its workers fill
(:mod:`datakit.loader.transport.ragged`). The dataset's part is to say how
large one sample's image gets (:func:`ragged_sample_bytes`) and to decode
each image into the memory the slot hands out for its shape
(:func:`image_into`) instead of an array of its own; the samples are otherwise
built exactly as ``__getitems__`` builds them.
"""

from __future__ import annotations

import torch

from datakit.datasets.samples import decode_payload, planes_into
from datakit.format.manifest import Manifest
from datakit.format.records import PayloadKind, Record
from datakit.loader.workers.batch_contract import Place

__all__ = ["ragged_sample_bytes", "image_into"]


def ragged_sample_bytes(manifest: Manifest, overridden: bool) -> int | None:
    """The bytes of the store's largest image, uint8 RGB; None when the manifest does not say its sizes,
    or when the dataset's class ``overridden`` its ``__getitems__`` (the ragged path would not run it).

    A pipeline that enlarges images makes some larger than this: they then
    travel the ordinary way, with the same result (the loader checks).
    """
    widths, heights = manifest.stats.width_range, manifest.stats.height_range
    if overridden or not widths or not heights:
        return None
    return 3 * int(widths[1]) * int(heights[1])


def image_into(place: Place, record: Record, key: str) -> torch.Tensor:
    """The record's image as ``output="tensor"`` decodes it, ``(3, H, W)`` uint8, in ``place((3, H, W))``.

    The values equal :func:`~datakit.format.decoding.record_to_tensor`'s; the
    tensor is contiguous where that one is a channel-first view. Raw pixels of
    other than three channels are decoded as usual (they are not RGB).
    """
    header = record.header
    if header.kind is PayloadKind.RAW and header.channels != 3:
        image: torch.Tensor = decode_payload(record, key, "tensor")
        return image
    out = place((3, header.height, header.width))
    planes_into(record, key, out)
    return torch.from_numpy(out)
