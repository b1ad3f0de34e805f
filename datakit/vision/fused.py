"""A ``datakit.vision`` pipeline run as one fused decode per sample.

For each sample: read the JPEG header, draw the crop, pick the smallest DCT
scale that keeps the crop at least the output size, decode only the rows and
columns the crop needs (:mod:`datakit.vision.jpeg`), resize with torch's
antialiased uint8 kernel, flip, and write channel-first uint8 pixels where
the caller wants them (a batch slot in shared memory). Other records (PNG,
raw pixels, CMYK JPEGs) are decoded whole and go through the same crop and
resize. ``Normalize`` is left to the caller: datasets apply it per sample for
torch's loader, and :class:`datakit.DataLoader` once per batch.

Exactness, against torchvision's ``transforms.v2`` on tensors decoded by
Pillow (which decodes JPEGs with the same libjpeg-turbo settings):

- ``Resize(s)`` + ``CenterCrop(c)`` at full decoding scale gives the same
  pixels: the region decoded starts at the image's origin and the resize is
  given torchvision's scale factors, so each output pixel sees the same
  source pixels with the same weights (only the rows and columns past the
  crop's filter support are left undecoded).
- ``RandomResizedCrop`` boxes are torchvision's integer boxes; at full scale
  the crop and resize are torchvision's. When the box is at least twice the
  output on both sides the image is decoded at 1/2, 1/4 or 1/8 scale: the
  IDCT's downscaling replaces part of the antialiasing filter, and the box's
  origin moves onto the scaled pixel grid (:meth:`FusedDecoder.crop_box`;
  its size is kept exact through the resize's scale factors). Against the
  reference on that box, the mean difference measured 0.2-0.6 grey levels
  (at most 1.0) on photo-like images (``tests/vision/test_fused.py``).

A record gets the same answer here as from a full decode (``output="numpy"``),
whatever crop is drawn: the checks a full decode makes before decoding (the
pixel limit, the record header's size) are made on the JPEG's frame header,
and a JPEG the region decoder refuses (corrupt, or a file of one scan whose
scan is not followed by the end-of-image marker, so possibly cut below the
crop) is decoded again, whole, by :func:`datakit.decode.record_to_array`,
which refuses it or gives the pixels the crop is then cut from, with the
same random draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datakit.decode import check_header_size, record_to_array
from datakit.headers import sniff_header
from datakit.pixel_limit import check_pixels
from datakit.records import PayloadKind, Record
from datakit.vision.geometry import Box
from datakit.vision.jpeg import RegionDecoder, choose_scale, scaled_size
from datakit.vision.randomness import SampleRandom
from datakit.vision.transforms import (
    CenterCrop,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    Transform,
    crop_chw,
)

__all__ = ["FusedPlan", "compile_transform", "FusedDecoder"]


@dataclass(frozen=True)
class FusedPlan:
    """A pipeline in the one order the fused decoder runs: crop/resize, flip, normalise.

    Attributes:
        crop: the random crop, if any (then ``resize`` and ``center`` are None).
        resize: the resize, if any.
        center: the centre crop, if any (after ``resize``).
        flip: probability of a horizontal flip.
        normalize: the per-batch normalisation, if any.
    """

    crop: RandomResizedCrop | None = None
    resize: Resize | None = None
    center: CenterCrop | None = None
    flip: float = 0.0
    normalize: Normalize | None = None

    def output_shape(self) -> tuple[int, int, int] | None:
        """``(3, H, W)`` when every sample comes out the same size, else None."""
        if self.crop is not None:
            return (3, *self.crop.size)
        if self.center is not None:
            return (3, *self.center.size)
        if self.resize is not None and not isinstance(self.resize.size, int):
            return (3, *self.resize.size)
        return None


def compile_transform(transform: object) -> FusedPlan | None:
    """The fused form of a ``datakit.vision`` transform, or None for any other callable.

    Raises:
        ValueError: a ``datakit.vision`` pipeline the fused decoder cannot
            run, naming what to change (for example ``Normalize`` before the end).
    """
    if not isinstance(transform, Transform):
        return None
    steps = transform.transforms if isinstance(transform, Compose) else [transform]
    crop: RandomResizedCrop | None = None
    resize: Resize | None = None
    center: CenterCrop | None = None
    flip: RandomHorizontalFlip | None = None
    normalize: Normalize | None = None
    for position, step in enumerate(steps):
        def refuse(why: str, step: Transform = step, position: int = position) -> ValueError:
            return ValueError(f"datakit.vision cannot fuse {step!r} at position {position} of {transform!r}: "
                              f"{why}. Fused pipelines are [RandomResizedCrop | Resize, CenterCrop], "
                              "RandomHorizontalFlip, Normalize, in that order, each at most once.")
        if normalize is not None:
            raise refuse("Normalize must come last")
        if isinstance(step, RandomResizedCrop):
            if crop or resize or center or flip:
                raise refuse("RandomResizedCrop must come first and alone among the crops and resizes")
            crop = step
        elif isinstance(step, Resize):
            if crop or resize or center or flip:
                raise refuse("Resize must come before CenterCrop and the flip, once")
            resize = step
        elif isinstance(step, CenterCrop):
            if crop or center or flip:
                raise refuse("CenterCrop goes after Resize, before the flip, once")
            center = step
        elif isinstance(step, RandomHorizontalFlip):
            if flip:
                raise refuse("one flip only")
            flip = step
        elif isinstance(step, Normalize):
            if len(step.mean) != 3:
                raise refuse("the fused pipelines make RGB images: Normalize needs three means and stds")
            normalize = step
        else:  # pragma: no cover - every Transform subclass is handled above
            raise refuse("unknown operation")
    return FusedPlan(crop, resize, center, flip.p if flip else 0.0, normalize)


class FusedDecoder:
    """Runs a :class:`FusedPlan` on records; one per process (it keeps a scratch buffer).

    Args:
        plan: the compiled pipeline.
    """

    def __init__(self, plan: FusedPlan) -> None:
        self.plan = plan
        self._regions = RegionDecoder()

    def decode(self, record: Record, random: SampleRandom, out: np.ndarray | None = None) -> torch.Tensor:
        """The sample's uint8 ``(3, H, W)`` pixels, written into ``out`` when it is given.

        Raises:
            ValueError: ``out`` is not this sample's shape (sizes vary without a crop).
            Exception: whatever decoding raises for a payload that is not a valid image.
        """
        replay = random.copy()
        try:
            pixels = self._geometry(_Source(record, self._regions), random)
        except _RegionRefused:  # decode it whole: the full decode's answer, and the same draws
            random = replay
            pixels = self._geometry(_Source(record, self._regions, whole=True), random)
        if self.plan.flip and random.random() < self.plan.flip:
            pixels = pixels.flip(-1)
        # pixels may be a view of the decoder's scratch buffer: always copy them out
        if out is None:
            return torch.empty(pixels.shape, dtype=torch.uint8).copy_(pixels)
        if tuple(out.shape) != tuple(pixels.shape):
            raise ValueError(f"the sample is {tuple(pixels.shape)}, its slot {tuple(out.shape)}")
        return torch.from_numpy(out).copy_(pixels)

    def _geometry(self, source: _Source, random: SampleRandom) -> torch.Tensor:
        """The crop, resize or centre crop of the plan, before the flip."""
        plan = self.plan
        if plan.crop is not None:
            return self._random_crop(source, random)
        if plan.resize is not None:
            return self._resize_then_crop(source, plan.resize, plan.center)
        if plan.center is not None:
            return _crop_padded(source, plan.center.box(source.width, source.height))
        return _as_chw(source.region(8, 0, 0, source.width, source.height))

    def crop_box(self, width: int, height: int, jpeg: bool, random: SampleRandom) -> tuple[Box, int]:
        """The random crop of a ``width`` x ``height`` image and the DCT scale it is decoded at.

        The box is torchvision's. When the image is a JPEG decoded at a reduced
        scale ``num``/8, the box's origin moves up and left onto that scale's
        pixel grid (by less than ``8 / num`` source pixels; its size is
        unchanged), so that the crop starts on a decoded pixel instead of
        between two, which would blur or shift it.
        """
        assert self.plan.crop is not None
        out_height, out_width = self.plan.crop.size
        box = self.plan.crop.box(width, height, random)
        num = choose_scale(box.width, box.height, out_width, out_height) if jpeg else 8
        step = 8 // num
        return Box(box.top - box.top % step, box.left - box.left % step, box.height, box.width), num

    def _random_crop(self, source: _Source, random: SampleRandom) -> torch.Tensor:
        assert self.plan.crop is not None
        height, width = self.plan.crop.size
        box, num = self.crop_box(source.width, source.height, source.jpeg, random)
        if num == 8:
            region = source.region(8, box.left, box.top, box.width, box.height)
            return _resample(region, height, width)
        step = 8 // num
        scaled_width, scaled_height = scaled_size(source.width, source.height, num)
        left, top = box.left // step, box.top // step
        columns = min(-(-(box.left + box.width) // step), scaled_width) - left
        rows = min(-(-(box.top + box.height) // step), scaled_height) - top
        region = source.region(num, left, top, columns, rows)
        return _resample(region, height, width, scales=(height * step / box.height, width * step / box.width))

    def _resize_then_crop(self, source: _Source, resize: Resize, center: CenterCrop | None) -> torch.Tensor:
        new_width, new_height = resize.output_size(source.width, source.height)
        box = center.box(new_width, new_height) if center else Box(0, 0, new_height, new_width)
        num = source.scale_for(source.width, source.height, new_width, new_height)
        scaled_width, scaled_height = scaled_size(source.width, source.height, num)
        if (scaled_width, scaled_height) == (new_width, new_height):  # a DCT scale gave the size exactly
            return crop_chw(_as_chw(source.region(num, 0, 0, scaled_width, scaled_height)), box)
        scale_y, scale_x = new_height / scaled_height, new_width / scaled_width
        # Output rows [0, bottom) and columns [0, right) are computed; they need the source rows and
        # columns up to the filter support of the last one (ATen's antialiased kernel: centre
        # (i + 0.5) / scale, support max(1 / scale, 1)).
        bottom = min(box.top + box.height, new_height)
        right = min(box.left + box.width, new_width)
        rows = _source_extent(bottom, scale_y, scaled_height)
        columns = _source_extent(right, scale_x, scaled_width)
        region = source.region(num, 0, 0, columns, rows)
        if (rows, columns) == (scaled_height, scaled_width):
            resized = _resample(region, new_height, new_width)
        else:
            resized = _resample(region, bottom, right, scales=(scale_y, scale_x))
        return crop_chw(resized, box)


def _source_extent(outputs: int, scale: float, length: int) -> int:
    """Source pixels ``[0, n)`` that output pixels ``[0, outputs)`` read, with one pixel of margin."""
    inverse = 1.0 / scale
    support = max(inverse, 1.0)
    last_centre = inverse * (outputs - 0.5)
    return min(length, int(last_centre + support + 0.5) + 1)


class _RegionRefused(Exception):
    """The region decoder refused a JPEG: the record is decoded again, whole."""


class _Source:
    """One record's pixels, decoded lazily at the scale and region asked for.

    JPEGs with one or three components are decoded by region
    (:class:`RegionDecoder`) unless ``whole``; everything else is decoded whole, once.
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
            _RegionRefused: the region decoder refused the JPEG (decode the record whole).
        """
        if self.jpeg:
            try:
                return self._regions.decode(self.record.payload, num, left, top, width, height)
            except ValueError as exc:  # UnsupportedColourSpace too
                raise _RegionRefused(str(exc)) from None
        assert num == 8
        if self._pixels is None:
            self._pixels = record_to_array(self.record)
        return self._pixels[top:top + height, left:left + width]


def _as_chw(region: np.ndarray) -> torch.Tensor:
    """A ``(3, H, W)`` view of ``(H, W, 3)`` pixels (channels-last in memory)."""
    return torch.from_numpy(region).permute(2, 0, 1)


def _resample(region: np.ndarray, height: int, width: int,
              scales: tuple[float, float] | None = None) -> torch.Tensor:
    """Antialiased bilinear resize of ``(H, W, 3)`` pixels to ``(3, height, width)``.

    With ``scales``, output pixel ``i`` is centred on source ``(i + 0.5) / scale - 0.5``
    whatever the region's size, which lets a partial region give exactly the
    pixels of the whole image's resize.
    """
    pixels = _as_chw(region)
    if scales is None and tuple(pixels.shape[1:]) == (height, width):
        return pixels
    batch = pixels.unsqueeze(0)
    if not batch.is_contiguous(memory_format=torch.channels_last):
        batch = batch.contiguous(memory_format=torch.channels_last)
    scale_y, scale_x = scales if scales is not None else (None, None)
    # import-graph: allow-private: ATen's op behind F.interpolate (which takes sizes or scales, not both)
    resized: torch.Tensor = torch.ops.aten._upsample_bilinear2d_aa.default(
        batch, [height, width], False, scale_y, scale_x)
    return resized[0]


def _crop_padded(source: _Source, box: Box) -> torch.Tensor:
    """The box of the full-scale image, zero-padded where it leaves the image."""
    top, left = max(box.top, 0), max(box.left, 0)
    bottom = min(box.top + box.height, source.height)
    right = min(box.left + box.width, source.width)  # a centred box always overlaps the image
    inside = _as_chw(source.region(8, left, top, right - left, bottom - top))
    return crop_chw(inside, Box(box.top - top, box.left - left, box.height, box.width))

