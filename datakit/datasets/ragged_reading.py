"""Ragged reading: a batch of images of several sizes decoded straight into memory the loader gives.

:class:`datakit.DataLoader` gives a batch whose images differ in size (a
detection store, multiscale) a *ragged slot*: shared memory its workers fill
(:mod:`datakit.loader.transport.ragged`). The dataset's part is to say how
large one sample's image gets (:func:`ragged_sample_bytes`) and to decode
each colour JPEG into the memory the slot hands out for its shape
(:func:`image_into`) instead of an array of its own; the samples are otherwise
built exactly as ``__getitems__`` builds them.
"""

from __future__ import annotations

import torch

from datakit.datasets.samples import checked_decode, decode_payload
from datakit.format.decoding import check_header_size, decode_jpeg_into
from datakit.format.manifest import Manifest
from datakit.format.records import Record
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
    """The record's image as ``output="tensor"`` decodes it: a colour JPEG decoded into
    ``place((H, W, 3))``, given as its ``(3, H, W)`` channel-first view, as
    :func:`~datakit.format.decoding.record_to_tensor` gives it (the same
    pixels, the same strides); any other image decoded the usual way (the loader
    copies it into its slot).
    """
    decoded = checked_decode(key, decode_jpeg_into, record.payload, place)
    if decoded is None:
        image: torch.Tensor = decode_payload(record, key, "tensor")
        return image
    checked_decode(key, check_header_size, decoded.shape[1], decoded.shape[0], record.header)
    return torch.from_numpy(decoded).permute(2, 0, 1)
