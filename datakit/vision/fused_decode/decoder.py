"""A ``datakit.vision`` pipeline run as one fused decode per sample, and where its pixels came from.

For each sample: read the JPEG header, draw the crop, pick the smallest DCT
scale that keeps the crop three times the output size (antialiased bilinear
only; :data:`~datakit.format.jpeg.MIN_DOWNSCALE`), decode only the rows and
columns the crop needs
(:mod:`datakit.format.jpeg`), resize with the ATen kernel torchvision runs
for the pipeline's ``interpolation`` (:mod:`datakit.vision.resample`), flip,
and write channel-first uint8 pixels where the caller wants them (a batch
slot in shared memory). :meth:`FusedDecoder.decode_placed` also says where
the pixels came from (a :class:`~datakit.vision.targets.steps.Placement`:
torchvision's crop box in source pixels, the resize, the flip), which the
dataset applies to the sample's boxes, masks and keypoints. Other records (PNG, raw pixels, CMYK JPEGs) are
decoded whole and go through the same crop and resize. ``Normalize`` is left
to the caller: datasets apply it per sample for torch's loader, and
:class:`datakit.DataLoader` once per batch.

Exactness, against torchvision's ``transforms.v2`` on tensors decoded by
Pillow (which decodes JPEGs with the same libjpeg-turbo settings):

- At full decoding scale every mode gives torchvision's pixels. ``Resize(s)``
  + ``CenterCrop(c)`` decodes only the source rows and columns the kept
  output pixels read, into an image-sized canvas, and the kernel is given
  the whole resize's scale factors
  (:func:`~datakit.vision.fused_decode.partial_resize.resize_part`), so each
  kept pixel sees the same source pixels with the same weights.
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

import numpy as np
import torch

from datakit.format.jpeg import RegionDecoder, choose_scale, copy_planar, scaled_size
from datakit.format.records import Record
from datakit.vision.fused_decode.partial_resize import resize_part
from datakit.vision.fused_decode.plan import FusedPlan
from datakit.vision.fused_decode.source import RegionRefused, Source, as_chw, crop_padded
from datakit.vision.geometry import Box
from datakit.vision.randomness import SampleRandom
from datakit.vision.resample import InterpolationMode, Resampling
from datakit.vision.targets.steps import Crop, HorizontalFlip, Placement, Resize, Step
from datakit.vision.transforms import CenterCrop, crop_chw
from datakit.vision.transforms import Resize as ResizeOp

__all__ = ["FusedDecoder"]

Placed = tuple[torch.Tensor, tuple[Step, ...]]
"""Pixels before the flip, and the steps that made them from the source."""


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
            TransformError: the sample cannot be cropped as asked (smaller than a ``RandomCrop``).
            Exception: whatever decoding raises for a payload that is not a valid image.
        """
        return self.decode_placed(record, random, out)[0]

    def decode_placed(self, record: Record, random: SampleRandom,
                      out: np.ndarray | None = None) -> tuple[torch.Tensor, Placement]:
        """:meth:`decode`, and where the pixels came from: the steps from the source image to them.

        The steps are torchvision's (its crop box, not the one moved onto a
        DCT grid), with the same draws as the pixels'.
        """
        replay = random.copy()
        try:
            source = Source(record, self._regions)
            pixels, steps, mirror = self._placed(source, random)
        except RegionRefused:  # decode it whole: the full decode's answer, and the same draws
            source = Source(record, self._regions, whole=True)
            pixels, steps, mirror = self._placed(source, replay)
        # pixels may be a view of the decoder's scratch buffer: always copy them out
        if out is None:
            out = np.empty(tuple(pixels.shape), dtype=np.uint8)
        elif tuple(out.shape) != tuple(pixels.shape):
            raise ValueError(f"the sample is {tuple(pixels.shape)}, its slot {tuple(out.shape)}")
        if not copy_planar(pixels.permute(1, 2, 0).numpy(), out, mirror):
            torch.from_numpy(out).copy_(pixels.flip(-1) if mirror else pixels)
        return torch.from_numpy(out), Placement((source.height, source.width), steps)

    def _placed(self, source: Source, random: SampleRandom) -> tuple[torch.Tensor, tuple[Step, ...], bool]:
        """The pixels before the flip, the steps (the flip's among them) and whether to mirror them.

        A flip before the crop (``flip_first``) is drawn first and the crop
        drawn in the flipped image, as torchvision draws them; the pixels come
        from the mirrored box, unflipped, and are mirrored as they are copied
        out (a crop and a flip commute that way).
        """
        pixels, steps = self._geometry(source, random)
        if self.plan.flip_first:
            return pixels, steps, any(isinstance(step, HorizontalFlip) for step in steps)
        mirror = self._mirror(random)
        return pixels, steps + ((HorizontalFlip(),) if mirror else ()), mirror

    def _mirror(self, random: SampleRandom) -> bool:
        return bool(self.plan.flip) and random.random() < self.plan.flip

    def _geometry(self, source: Source, random: SampleRandom) -> Placed:
        """The crop, resize or centre crop of the plan, before the flip; with ``flip_first``, the flip
        drawn after the resize and before the crop, as torchvision draws them (its step then comes
        before the crop's, and the pixels are the unflipped ones under the mirrored box)."""
        plan = self.plan
        if plan.crop is not None:
            return self._random_crop(source, random)
        if plan.resize is not None:
            return self._resize_then_crop(source, plan.resize, random)
        flipped = plan.flip_first and self._mirror(random)
        flip: tuple[Step, ...] = (HorizontalFlip(),) if flipped else ()
        if plan.center is not None:
            box = plan.center.box(source.width, source.height)
            pixels = crop_padded(source, _mirrored(box, source.width, flipped))
            return pixels, flip + (Crop(box.top, box.left, box.height, box.width),)
        if plan.random_crop is not None:
            draw = plan.random_crop.draw(source.width, source.height, random)
            box = _mirrored(draw.source_box(), source.width, flipped)
            pixels = crop_padded(source, box, plan.random_crop.image_fill)
            return pixels, flip + plan.random_crop.steps(draw)
        return as_chw(source.region(8, 0, 0, source.width, source.height)), ()

    def crop_box(self, width: int, height: int, jpeg: bool, random: SampleRandom) -> tuple[Box, int]:
        """The random crop of a ``width`` x ``height`` image and the DCT scale it is decoded at.

        The box is torchvision's. When the image is a JPEG decoded at a reduced
        scale ``num``/8, the box's origin moves up and left onto that scale's
        pixel grid (by less than ``8 / num`` source pixels; its size is
        unchanged), so that the crop starts on a decoded pixel instead of
        between two, which would blur or shift it.
        """
        return self._crop_boxes(width, height, jpeg, random)[1:]

    def _crop_boxes(self, width: int, height: int, jpeg: bool,
                    random: SampleRandom) -> tuple[Box, Box, int]:
        """torchvision's box, the box decoded (on the DCT grid) and the scale numerator."""
        assert self.plan.crop is not None
        out_height, out_width = self.plan.crop.size
        box = self.plan.crop.box(width, height, random)
        scalable = jpeg and self.plan.crop.resampling.dct_scalable
        num = choose_scale(box.width, box.height, out_width, out_height) if scalable else 8
        step = 8 // num
        return box, Box(box.top - box.top % step, box.left - box.left % step, box.height, box.width), num

    def _random_crop(self, source: Source, random: SampleRandom) -> Placed:
        assert self.plan.crop is not None
        height, width = self.plan.crop.size
        resampling = self.plan.crop.resampling
        drawn, box, num = self._crop_boxes(source.width, source.height, source.jpeg, random)
        steps = (Crop(drawn.top, drawn.left, drawn.height, drawn.width),
                 Resize(height, width, _mask_mode(resampling)))
        if num == 8:
            region = source.region(8, box.left, box.top, box.width, box.height)
            return resampling(as_chw(region), height, width), steps
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
        return resampling(as_chw(region), height, width, scales=scales), steps

    def _resize_then_crop(self, source: Source, resize: ResizeOp, random: SampleRandom) -> Placed:
        new_width, new_height = resize.drawn_size(source.width, source.height, random)
        flipped = self.plan.flip_first and self._mirror(random)
        steps: tuple[Step, ...] = (Resize(new_height, new_width, _mask_mode(resize.resampling)),)
        steps += (HorizontalFlip(),) if flipped else ()
        box, fill = Box(0, 0, new_height, new_width), None
        center, random_crop = self.plan.center, self.plan.random_crop
        if isinstance(center, CenterCrop):
            box = center.box(new_width, new_height)
            steps += (Crop(box.top, box.left, box.height, box.width),)
        elif random_crop is not None:
            draw = random_crop.draw(new_width, new_height, random)
            box, fill = draw.source_box(), random_crop.image_fill
            steps += random_crop.steps(draw)
        box = _mirrored(box, new_width, flipped)
        resampling = resize.resampling
        num = 8
        if resampling.dct_scalable:
            num = source.scale_for(source.width, source.height, new_width, new_height)
        # the output pixels the crop keeps: rows [top, bottom) and columns [left, right) of the resize
        top, bottom = max(box.top, 0), min(box.top + box.height, new_height)
        left, right = max(box.left, 0), min(box.left + box.width, new_width)
        resized = resize_part(source, num, (new_height, new_width), (top, bottom, left, right), resampling)
        return crop_chw(resized, box, fill), steps


def _mirrored(box: Box, width: int, flipped: bool) -> Box:
    """``box`` of an image ``width`` wide mirrored left to right when ``flipped`` (the pixels under a
    crop of the flipped image are those under this box, mirrored)."""
    return Box(box.top, width - box.left - box.width, box.height, box.width) if flipped else box


def _mask_mode(resampling: Resampling) -> str:
    """How masks are resized beside this resize: torchvision's ``resize_mask`` samples the nearest pixel,
    exactly so when the image's mode is ``nearest-exact``."""
    return "nearest-exact" if resampling.mode is InterpolationMode.NEAREST_EXACT else "nearest"
