"""torchvision's detection and segmentation training recipes, in torchvision v2 and in datakit.vision.

``references/detection/presets.py`` (``DetectionPresetTrain``, ``use_v2=True``)
and ``references/segmentation/presets.py`` (``SegmentationPresetTrain``) with
their defaults, up to the uint8 images the issue measures (no ``ToDtype``
float at the end), each written twice with the same op names and arguments:

- ``ssd``: ``RandomPhotometricDistort``, ``RandomZoomOut`` (fill the mean),
  ``RandomIoUCrop``, ``RandomHorizontalFlip``;
- ``lsj``: ``ScaleJitter((1024, 1024))``, ``FixedSizeCrop((1024, 1024))``
  (fill the mean), ``RandomHorizontalFlip``;
- ``multiscale``: ``RandomShortestSize(480..800 step 32, max_size=1333)``,
  ``RandomHorizontalFlip``;
- ``segmentation``: ``RandomResize(260, 1040)`` (base size 520),
  ``RandomHorizontalFlip``, then a 480 crop padded where the image is
  smaller, with the instance masks.

The detection recipes end as the v2 preset does: ``ConvertBoundingBoxFormat
(XYXY)``, ``SanitizeBoundingBoxes()``, ``ToPureTensor()``. Two places where the
references use code of their own rather than torchvision's ops, written here as
the same work with v2's ops: the references' ``FixedSizeCrop`` (crop at one
random fraction of the excess in both directions, then pad bottom and right;
v2 has no such op, :class:`ReferenceFixedSizeCrop` below) and the segmentation
reference's ``PadIfSmaller`` + ``RandomCrop(480)``, written as
``RandomCrop(480, pad_if_needed=True)`` on both sides (the same pixels moved;
the padding lies on both sides instead of one). The segmentation recipe reads
COCO's instance masks (``target_keys`` boxes, labels, masks): the reference
draws a class-index map from the same polygons, which costs torchvision the
same decoding.
"""

from __future__ import annotations

from typing import Any

import torch

MEAN = (123, 117, 104)
MULTISCALE_SIZES = tuple(range(480, 801, 32))
PIPELINES = ("ssd", "lsj", "multiscale", "segmentation")
CROP = 480


def target_keys(pipeline: str) -> list[str]:
    """The target keys a recipe reads: its masks too for segmentation."""
    keys = ["image_id", "boxes", "labels"]
    return keys + ["masks"] if pipeline == "segmentation" else keys


def _recipe_ops(pipeline: str, ops: Any, fixed_size_crop: Any) -> list[Any]:
    """One recipe's augmentation, in ``ops`` (torchvision's ``v2`` or ``datakit.vision``)."""
    if pipeline == "ssd":
        return [ops.RandomPhotometricDistort(), ops.RandomZoomOut(fill=list(MEAN)), ops.RandomIoUCrop(),
                ops.RandomHorizontalFlip()]
    if pipeline == "lsj":
        return [ops.ScaleJitter(target_size=(1024, 1024), antialias=True),
                fixed_size_crop(size=(1024, 1024), fill=list(MEAN)), ops.RandomHorizontalFlip()]
    if pipeline == "multiscale":
        return [ops.RandomShortestSize(min_size=MULTISCALE_SIZES, max_size=1333), ops.RandomHorizontalFlip()]
    if pipeline == "segmentation":
        return [ops.RandomResize(min_size=260, max_size=1040), ops.RandomHorizontalFlip(),
                ops.RandomCrop(CROP, pad_if_needed=True)]
    raise ValueError(f"pipeline {pipeline!r}: the recipes are {', '.join(PIPELINES)}")


def _tail(pipeline: str, ops: Any) -> list[Any]:
    """What the v2 detection preset ends with (the segmentation preset has no boxes to sanitize)."""
    if pipeline == "segmentation":
        return []
    return [ops.ConvertBoundingBoxFormat("XYXY"), ops.SanitizeBoundingBoxes()]


def torchvision_recipe(pipeline: str, backend: str) -> Any:
    """The recipe as torchvision's v2 references run it: ``backend`` ``tensor`` (``ToImage()`` first) or
    ``pil`` (the ops on PIL images, ``PILToTensor()`` after them)."""
    from torchvision.transforms import v2

    first = [v2.ToImage()] if backend == "tensor" else []
    last = [v2.PILToTensor()] if backend == "pil" else []
    ops = _recipe_ops(pipeline, v2, reference_fixed_size_crop())
    return v2.Compose([*first, *ops, *last, *_tail(pipeline, v2), v2.ToPureTensor()])


def datakit_recipe(pipeline: str) -> Any:
    """The same recipe with ``datakit.vision``'s ops of the same names (its ``FixedSizeCrop`` is the
    references' op)."""
    import datakit.vision as dv

    return dv.Compose([*_recipe_ops(pipeline, dv, dv.FixedSizeCrop), *_tail(pipeline, dv)])


def reference_fixed_size_crop() -> Any:
    """:class:`ReferenceFixedSizeCrop`'s class, made once torchvision is importable."""
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    class ReferenceFixedSizeCrop(v2.Transform):
        """The detection references' ``FixedSizeCrop`` in v2's terms: a crop of at most ``size`` at the
        same random fraction of the excess height and width, then padding on the bottom and right to
        ``size``; boxes are cropped with the pixels (the preset's ``SanitizeBoundingBoxes`` then drops
        those left empty, as the reference's own check does)."""

        def __init__(self, size: tuple[int, int], fill: Any = 0) -> None:
            super().__init__()
            self.size, self.fill = size, fill

        def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
            height, width = v2.query_size(flat_inputs)
            crop_height, crop_width = min(height, self.size[0]), min(width, self.size[1])
            fraction = float(torch.rand(1))
            return {"top": int(max(height - self.size[0], 0) * fraction),
                    "left": int(max(width - self.size[1], 0) * fraction),
                    "height": crop_height, "width": crop_width,
                    "padding": [0, 0, self.size[1] - crop_width, self.size[0] - crop_height]}

        def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
            cropped = F.crop(inpt, params["top"], params["left"], params["height"], params["width"])
            if not any(params["padding"]):
                return cropped
            from torchvision import tv_tensors

            fill = 0 if isinstance(inpt, tv_tensors.Mask) else self.fill
            return F.pad(cropped, params["padding"], fill=fill)

    return ReferenceFixedSizeCrop
