"""``FixedSizeCrop``: the ``lsj`` recipe's crop to a fixed size, padded at the bottom and right, fused.

torchvision ships it in its detection references and its v2 prototype
(``torchvision.prototype.transforms.FixedSizeCrop``), not in ``transforms.v2``;
datakit follows the v2 prototype's ``make_params`` and ``transform``:

- a side longer than the crop is cut to the crop's length; one draw ``r``
  (``torch.rand(1)``, float32) places both sides: ``top = int((H - h) * r)``,
  ``left = int((W - w) * r)``;
- the boxes are cropped and clamped, and those left with no width or height
  are removed with the entries beside them (their labels and instance masks,
  as torchvision's; on a field store also the boxes' extras and keypoints,
  as ``SanitizeBoundingBoxes`` does here);
- a side shorter than the crop is padded at its end (bottom, right) with
  ``fill``: a number or one per channel (the ``lsj`` preset's ``fill=mean``)
  fills the image, and masks get 0, as the references pad them; a dict by
  type as ``RandomCrop``'s (``{tv_tensors.Mask: 0, "others": 105}``, or the
  v2 preset's ``defaultdict(lambda: mean, {tv_tensors.Mask: 0})``).

The crop's box is known from the image's size and the draw alone, so it is
fused into decoding after a ``Resize``/``ScaleJitter`` (the ``lsj`` recipe,
``ScaleJitter(1024)``, ``FixedSizeCrop(1024)``, flip, is one fused decode):
only the rows and columns inside the crop are decoded and resized, and the
padding is filled, never materialised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datakit.vision.random_crop import CropDraw, RandomCrop
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.steps import Crop, Pad, Step, TargetEdit

__all__ = ["FixedSizeCrop", "DropEmptyBoxes"]

_FLOAT32_STEPS = 1 << 24


class DropEmptyBoxes(TargetEdit):
    """The boxes clamped to the canvas, and those left without width or height removed with their
    per-box entries (``FixedSizeCrop``'s ``is_valid``)."""

    def edit(self, sample: Any, canvas: Canvas) -> None:
        key = sample.boxes_key()
        if key is None:
            return
        boxes, format, _ = sample.boxes(key)
        clamped = box_ops.clamp(boxes, format, canvas, "soft")
        sizes = box_ops.convert_format(clamped, format, "XYWH")[..., 2:]
        valid = (sizes > 0).all(dim=-1)
        sample.set_boxes(key, clamped)
        sample.keep(valid, [key, *sample.per_box_keys(key)])


class FixedSizeCrop(RandomCrop):
    """Crop to ``size`` where the image is larger, pad the bottom and right where it is smaller.

    Args:
        size: ``(height, width)``, or an int for a square.
        fill: the image's padding: a number or one per channel (masks get
            0); or a dict by torchvision type, a ``defaultdict`` among them.
        padding_mode: ``"constant"`` only.
    """

    def __init__(self, size: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant") -> None:
        if isinstance(fill, defaultdict) and fill.default_factory is not None:
            fill = {"others": fill.default_factory(), **fill}  # v2 preset: defaultdict(lambda: mean, ...)
        super().__init__(size, fill=fill, padding_mode=padding_mode)
        if not isinstance(fill, Mapping):
            self.mask_fill = 0.0  # the references pad masks with 0, whatever the image's fill
        self.crop_height, self.crop_width = self.size

    def draw_unit(self, random: SampleRandom) -> Any:
        """One sample's ``r``, a float32 as torchvision's ``torch.rand(1)``."""
        return np.float32(random.integers(0, _FLOAT32_STEPS) / _FLOAT32_STEPS)

    def draw(self, width: int, height: int, random: SampleRandom) -> CropDraw:
        """The crop (its corner and the part of the image it keeps) and the padding after it."""
        unit = self.draw_unit(random)
        top = int(np.float32(max(height - self.crop_height, 0)) * unit)
        left = int(np.float32(max(width - self.crop_width, 0)) * unit)
        kept_height, kept_width = min(height, self.crop_height), min(width, self.crop_width)
        padding = (0, 0, self.crop_width - kept_width, self.crop_height - kept_height)
        crops = (kept_height, kept_width) != (height, width)
        return CropDraw(padding, top, left, self.crop_height, self.crop_width, crops)

    def steps(self, draw: CropDraw) -> tuple[Step, ...]:
        """torchvision's order: the crop of the kept part, the empty boxes dropped, the pad."""
        right, bottom = draw.padding[2], draw.padding[3]
        steps: tuple[Step, ...] = ()
        if draw.crops:
            steps += (Crop(draw.top, draw.left, draw.height - bottom, draw.width - right), DropEmptyBoxes())
        if right or bottom:
            steps += (Pad(0, 0, right, bottom, fill=self.mask_fill),)
        return steps

    def __repr__(self) -> str:
        fill = "" if self.fill == 0 else f", fill={self.fill!r}"
        return f"FixedSizeCrop(size={self.size}{fill})"
