"""One record's pixels for the fused decoder: decoded lazily, by region and DCT scale where it can.

JPEGs with one or three components are decoded by region
(:class:`~datakit.format.jpeg.RegionDecoder`); everything else (PNG, raw
pixels, CMYK JPEGs) is decoded whole, once, and cut. A JPEG the region
decoder refuses raises :class:`RegionRefused`, and the decoder decodes the
record again whole (:mod:`datakit.vision.fused_decode.decoder`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from datakit.format.bounds import check_pixels
from datakit.format.decoding import check_header_size, record_to_array
from datakit.format.headers import sniff_header
from datakit.format.jpeg import RegionDecoder, choose_scale
from datakit.format.records import PayloadKind, Record
from datakit.vision.geometry import Box
from datakit.vision.transforms import crop_chw

__all__ = ["RegionRefused", "Source", "as_chw", "crop_padded"]


class RegionRefused(Exception):
    """The region decoder refused a JPEG: the record is decoded again, whole."""


class Source:
    """One record's pixels, decoded lazily at the scale and region asked for.

    Args:
        record: the checked record.
        regions: this process's region decoder.
        whole: decode the record whole even where a region decode applies.

    Attributes:
        width, height: the image's size, from its header (the canvas its
            boxes, masks and keypoints lie on).
        jpeg: whether it is decoded by region.
    """

    def __init__(self, record: Record, regions: RegionDecoder, whole: bool = False) -> None:
        self.record = record
        self._regions = regions
        self._pixels: np.ndarray | None = None
        header = sniff_header(record.payload) if record.header.kind is PayloadKind.ENCODED else None
        self.jpeg = (not whole and header is not None and header[0] == "JPEG" and header[3] in (1, 3)
                     and regions.available)
        if self.jpeg:
            assert header is not None
            self.width, self.height = header[1], header[2]
            check_pixels(self.width, self.height)  # as a full decode checks, before decoding
            check_header_size(self.width, self.height, record.header)
        elif record.header.kind is PayloadKind.RAW:
            self.height, self.width = record.header.height, record.header.width
        else:
            self._pixels = record_to_array(record)
            self.height, self.width = self._pixels.shape[:2]

    def scale_for(self, box_width: float, box_height: float, width: int, height: int) -> int:
        """The DCT scale numerator to decode a box of this size for an output of that size."""
        return choose_scale(box_width, box_height, width, height) if self.jpeg else 8

    def region(self, num: int, left: int, top: int, width: int, height: int) -> np.ndarray:
        """Pixels ``[top, top + height) x [left, left + width)`` at scale ``num``/8, as (H, W, 3).

        Raises:
            RegionRefused: the region decoder refused the JPEG (decode the record whole).
        """
        if self.jpeg:
            try:
                return self._regions.decode(self.record.payload, num, left, top, width, height)
            except ValueError as exc:  # UnsupportedColourSpace too
                raise RegionRefused(str(exc)) from None
        assert num == 8
        return self._whole()[top:top + height, left:left + width]

    def window(self, num: int, top: int, left: int, bottom: int, right: int,
               height: int | None = None, width: int | None = None) -> np.ndarray:
        """An ``(height, width, 3)`` array (default ``(bottom, right, 3)``) of the image at scale ``num``/8.

        Only rows ``[top, bottom)`` x columns ``[left, right)`` hold the
        image's pixels (more of them may, when the image was decoded whole).
        """
        height, width = bottom if height is None else height, right if width is None else width
        if self.jpeg:
            try:
                return self._regions.window(self.record.payload, num, top, left, bottom, right, height, width)
            except ValueError as exc:  # UnsupportedColourSpace too
                raise RegionRefused(str(exc)) from None
        assert num == 8
        return self._whole()[:height, :width]

    def _whole(self) -> np.ndarray:
        if self._pixels is None:
            self._pixels = record_to_array(self.record)
        return self._pixels


def as_chw(region: np.ndarray) -> torch.Tensor:
    """A ``(3, H, W)`` view of ``(H, W, 3)`` pixels (channels-last in memory)."""
    return torch.from_numpy(region).permute(2, 0, 1)


def crop_padded(source: Source, box: Box, fill: Sequence[int] | None = None) -> torch.Tensor:
    """The box of the full-scale image, padded with ``fill`` (zeros by default) where it leaves the image."""
    top, left = max(box.top, 0), max(box.left, 0)
    bottom = min(box.top + box.height, source.height)
    right = min(box.left + box.width, source.width)  # a centred or random box always overlaps the image
    inside = as_chw(source.region(8, left, top, right - left, bottom - top))
    return crop_chw(inside, Box(box.top - top, box.left - left, box.height, box.width), fill)
