"""A ``datakit.vision`` pipeline run as one fused decode per sample.

For each sample: read the JPEG header, draw the crop, pick the smallest DCT
scale that keeps the crop three times the output size (antialiased bilinear
only; :data:`~datakit.format.jpeg.MIN_DOWNSCALE`), decode only the rows and
columns the crop needs
(:mod:`datakit.format.jpeg`), resize with the ATen kernel torchvision runs
for the pipeline's ``interpolation`` (:mod:`datakit.vision.resample`), flip,
and write channel-first uint8 pixels where the caller wants them (a batch
slot in shared memory). Other records (PNG, raw pixels, CMYK JPEGs) are
decoded whole and go through the same crop and resize. ``Normalize`` is left
to the caller: datasets apply it per sample for torch's loader, and
:class:`datakit.DataLoader` once per batch.

Exactness, against torchvision's ``transforms.v2`` on tensors decoded by
Pillow (which decodes JPEGs with the same libjpeg-turbo settings):

- At full decoding scale every mode gives torchvision's pixels. ``Resize(s)``
  + ``CenterCrop(c)`` decodes only the source rows and columns the kept
  output pixels read, into an image-sized canvas, and the kernel is given
  the whole resize's scale factors (:func:`_resize_part`), so each kept
  pixel sees the same source pixels with the same weights.
- ``RandomResizedCrop`` boxes are torchvision's integer boxes; at full scale
  the crop and resize are torchvision's. With antialiased bilinear, the
  image is decoded at the smallest of the 1/2, 1/4 and 1/8 scales at which
  the box is still three times the output on both sides (at 1/2, a box of
  six times the output), so that the resize still downscales 3x or more:
  the IDCT's downscaling replaces part of the antialiasing filter, and the
  box's origin moves onto the scaled pixel grid
  (:meth:`FusedDecoder.crop_box`; its size is kept exact through the
  resize's scale factors). ``Resize`` is DCT-scaled likewise when the scaled
  image is still three times its output. Against the reference, on real
  photographs, the mean difference measured 0.1-0.7 grey levels per image,
  within the bound of 1.0 (``docs/vision.md``; closer scales exceeded it on
  textured photos).

A record gets the same answer here as from a full decode (``output="numpy"``),
whatever crop is drawn: the checks a full decode makes before decoding (the
pixel limit, the record header's size) are made on the JPEG's frame header,
and a JPEG the region decoder refuses (corrupt, or a file of one scan whose
scan is not followed by the end-of-image marker, so possibly cut below the
crop) is decoded again, whole, by :func:`datakit.format.decoding.record_to_array`,
which refuses it or gives the pixels the crop is then cut from, with the
same random draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from datakit.format.bounds import check_pixels
from datakit.format.decoding import check_header_size, record_to_array
from datakit.format.headers import sniff_header
from datakit.format.jpeg import RegionDecoder, choose_scale, copy_planar, scaled_size
from datakit.format.records import PayloadKind, Record
from datakit.vision.geometry import Box
from datakit.vision.randomness import SampleRandom
from datakit.vision.resample import InterpolationMode, Resampling, exact_scale
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
        if self.resize is not None and isinstance(self.resize.size, tuple):
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
        def refuse(why: str, step: object = step, position: int = position) -> ValueError:
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
        mirror = bool(self.plan.flip) and random.random() < self.plan.flip
        # pixels may be a view of the decoder's scratch buffer: always copy them out
        if out is None:
            out = np.empty(tuple(pixels.shape), dtype=np.uint8)
        elif tuple(out.shape) != tuple(pixels.shape):
            raise ValueError(f"the sample is {tuple(pixels.shape)}, its slot {tuple(out.shape)}")
        if not copy_planar(pixels.permute(1, 2, 0).numpy(), out, mirror):
            torch.from_numpy(out).copy_(pixels.flip(-1) if mirror else pixels)
        return torch.from_numpy(out)

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
        scalable = jpeg and self.plan.crop.resampling.dct_scalable
        num = choose_scale(box.width, box.height, out_width, out_height) if scalable else 8
        step = 8 // num
        return Box(box.top - box.top % step, box.left - box.left % step, box.height, box.width), num

    def _random_crop(self, source: _Source, random: SampleRandom) -> torch.Tensor:
        assert self.plan.crop is not None
        height, width = self.plan.crop.size
        resampling = self.plan.crop.resampling
        box, num = self.crop_box(source.width, source.height, source.jpeg, random)
        if num == 8:
            region = source.region(8, box.left, box.top, box.width, box.height)
            return resampling(_as_chw(region), height, width)
        step = 8 // num
        scaled_width, scaled_height = scaled_size(source.width, source.height, num)
        left, top = box.left // step, box.top // step
        columns = min(-(-(box.left + box.width) // step), scaled_width) - left
        rows = min(-(-(box.top + box.height) // step), scaled_height) - top
        # ATen skips a side whose input and output lengths are equal, whatever the scale
        rows += rows == height and box.height != height * step and top + rows < scaled_height
        columns += columns == width and box.width != width * step and left + columns < scaled_width
        region = source.region(num, left, top, columns, rows)
        scales = (height * step / box.height, width * step / box.width)
        return resampling(_as_chw(region), height, width, scales=scales)

    def _resize_then_crop(self, source: _Source, resize: Resize, center: CenterCrop | None) -> torch.Tensor:
        new_width, new_height = resize.output_size(source.width, source.height)
        box = center.box(new_width, new_height) if center else Box(0, 0, new_height, new_width)
        resampling = resize.resampling
        num = 8
        if resampling.dct_scalable:
            num = source.scale_for(source.width, source.height, new_width, new_height)
        # the output pixels the crop keeps: rows [top, bottom) and columns [left, right) of the resize
        top, bottom = max(box.top, 0), min(box.top + box.height, new_height)
        left, right = max(box.left, 0), min(box.left + box.width, new_width)
        resized = _resize_part(source, num, (new_height, new_width), (top, bottom, left, right), resampling)
        return crop_chw(resized, box)


def _resize_part(source: _Source, num: int, size: tuple[int, int], kept: tuple[int, int, int, int],
                 resampling: Resampling) -> torch.Tensor:
    """Rows ``[0, bottom)`` x columns ``[0, right)`` of the image's resize to ``size``, decoded at ``num``/8.

    Only the pixels in ``kept`` (``top, bottom, left, right``) are the
    resize's; the rest are unspecified: only the source rows and columns
    that ``kept`` reads are decoded (:meth:`_Source.window`). The kernel is
    given the scale factors of the whole image's resize (at full scale with
    ``1.0 / scale == source / output`` exactly, :func:`exact_scale`), so each
    kept pixel is computed from the same pixels with the same weights as in
    the whole resize. Along a side where no such factor exists, and for the
    nearest modes (whose ATen kernels special-case some input sizes), the
    kernel gets the whole side instead (still decoded only where needed).
    """
    top, bottom, left, right = kept
    scaled_width, scaled_height = scaled_size(source.width, source.height, num)
    exact = num == 8 or (source.width * num % 8, source.height * num % 8) == (0, 0)
    if exact and (scaled_height, scaled_width) == size:  # the decode is the resize, as torchvision's
        return _as_chw(source.window(num, top, left, bottom, right))
    if num < 8:  # onto the grid of the image's true scaled size, not libjpeg's rounded-up one
        scales: tuple[float | None, float | None] = (size[0] * 8 / (source.height * num),
                                                     size[1] * 8 / (source.width * num))
    elif resampling.mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        scales = (None, None)
    else:
        scales = (exact_scale(source.height, size[0]), exact_scale(source.width, size[1]))
    ys = _side(top, bottom, scaled_height, size[0], scales[0], resampling)
    xs = _side(left, right, scaled_width, size[1], scales[1], resampling)
    canvas = source.window(num, ys[0], xs[0], ys[1], xs[1], ys[2], xs[2])
    resized = resampling(_as_chw(canvas), ys[3], xs[3], scales=scales)
    return resized[:, :bottom, :right]


def _side(first: int, end: int, length: int, output: int, scale: float | None,
          resampling: Resampling) -> tuple[int, int, int, int]:
    """How one side is resized: source ``[start, stop)`` decoded, the canvas's length, the outputs computed.

    With a scale factor the canvas ends after the last source pixel read and
    the kernel computes outputs ``[0, end)``; without one it gets the whole
    side (``length`` in, ``output`` out) so that ATen's ``length / output``
    is the whole resize's. ATen skips a side whose input and output lengths
    are equal, whatever the scale: then one more pixel is decoded, or one
    more output computed.
    """
    start, stop = _span(first, end, output / length if scale is None else scale, length, resampling)
    if scale is None:
        return start, stop, length, output
    if stop == end and stop < length:
        stop += 1
    elif stop == end and end < output:
        end += 1
    return start, stop, stop, end


def _span(first: int, end: int, scale: float, length: int, resampling: Resampling) -> tuple[int, int]:
    """Source pixels ``[start, stop)`` that outputs ``[first, end)`` read, with one pixel of margin each side.

    An output pixel ``i`` is centred on source ``(i + 0.5) / scale`` and reads
    up to :meth:`Resampling.support` pixels either side (ATen's kernels).
    """
    inverse = 1.0 / scale
    support = resampling.support(scale)
    start = int(inverse * (first + 0.5) - support + 0.5) - 1
    stop = int(inverse * (end - 0.5) + support + 0.5) + 1
    return max(start, 0), min(stop, length)


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
                raise _RegionRefused(str(exc)) from None
        assert num == 8
        return self._whole()[:height, :width]

    def _whole(self) -> np.ndarray:
        if self._pixels is None:
            self._pixels = record_to_array(self.record)
        return self._pixels


def _as_chw(region: np.ndarray) -> torch.Tensor:
    """A ``(3, H, W)`` view of ``(H, W, 3)`` pixels (channels-last in memory)."""
    return torch.from_numpy(region).permute(2, 0, 1)


def _crop_padded(source: _Source, box: Box) -> torch.Tensor:
    """The box of the full-scale image, zero-padded where it leaves the image."""
    top, left = max(box.top, 0), max(box.left, 0)
    bottom = min(box.top + box.height, source.height)
    right = min(box.left + box.width, source.width)  # a centred box always overlaps the image
    inside = _as_chw(source.region(8, left, top, right - left, bottom - top))
    return crop_chw(inside, Box(box.top - top, box.left - left, box.height, box.width))

