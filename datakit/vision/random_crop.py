"""torchvision v2's ``RandomCrop``: a crop of a fixed size at a uniformly drawn place, padded first if asked.

The segmentation and detection references crop this way (``RandomCrop(480)``
after padding images smaller than the crop). The arguments, defaults and
checks are torchvision's: ``padding`` (an int, or 1, 2 or 4 ints: all sides;
left/right and top/bottom; left, top, right, bottom) is added first; with
``pad_if_needed`` a side shorter than the crop gets the difference added on
*both* of its ends, as torchvision v2 does; then the crop's top and left are
drawn uniformly where the padded image is larger than the crop. Padding
pixels are ``fill``: one number, one per channel, or a dict keyed by
torchvision's types (``{tv_tensors.Mask: 255, "others": 0}``: the image takes
the ``Image`` or ``Tensor`` entry, masks the ``Mask`` entry, else
``"others"``). Only ``padding_mode="constant"`` is supported (torchvision
refuses to move boxes with the other modes too).

In a fused pipeline the padding is never materialised: the crop's box in
the source image is decoded (only its rows and columns of a JPEG) and the
part outside the image is filled (:mod:`datakit.vision.fused_decode`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.errors import TransformError
from datakit.vision.geometry import Box
from datakit.vision.randomness import SampleRandom, from_torch_generator
from datakit.vision.targets.steps import Crop, Pad, Step
from datakit.vision.transforms import Transform, crop_chw, size_pair, to_uint8_chw

__all__ = ["RandomCrop", "CropDraw"]

_IMAGE_KEYS = ("Image", "Tensor")


@dataclass(frozen=True)
class CropDraw:
    """One sample's ``RandomCrop``: the padding added, and the crop in the padded image.

    Attributes:
        padding: ``(left, top, right, bottom)`` pixels added.
        top, left: the crop's corner in the padded image.
        height, width: the crop's size.
        crops: whether the padded image is larger than the crop (torchvision
            crops only then).
    """

    padding: tuple[int, int, int, int]
    top: int
    left: int
    height: int
    width: int
    crops: bool

    def source_box(self) -> Box:
        """The crop in the source image's pixels (beyond its edges where padding shows)."""
        return Box(self.top - self.padding[1], self.left - self.padding[0], self.height, self.width)


class RandomCrop(Transform):
    """Crop a random part of ``size``, after padding: torchvision v2's ``RandomCrop``.

    Args:
        size: the crop's ``(height, width)``, or an int for a square.
        padding: pixels added before cropping (see the module).
        pad_if_needed: pad a side shorter than the crop (the difference on both ends).
        fill: the padding's value (see the module).
        padding_mode: ``"constant"`` only.

    Raises:
        ValueError: arguments torchvision refuses, and the padding modes datakit does not run.
    """

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None,
                 pad_if_needed: bool = False, fill: Any = 0, padding_mode: str = "constant") -> None:
        self.size = size_pair(size, "size")
        self.padding = _padding(padding) if padding else None
        self.pad_if_needed = bool(pad_if_needed)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        if padding_mode != "constant":
            raise ValueError(f"datakit.vision's RandomCrop pads with a constant fill, not {padding_mode!r} "
                             "(torchvision cannot move boxes with that mode either)")
        self.padding_mode = padding_mode
        self.fill = fill
        self.image_fill = _image_fill(_fill_for(fill, _IMAGE_KEYS))
        mask_fill = _fill_for(fill, ("Mask",))  # one per channel: refused when masks are padded, as there
        self.mask_fill = float(mask_fill or 0) if mask_fill is None or isinstance(mask_fill, numbers.Real) \
            else None

    def draw(self, width: int, height: int, random: SampleRandom) -> CropDraw:
        """The padding and the crop for a ``width`` x ``height`` image, as torchvision draws them.

        Raises:
            TransformError: the (padded) image is smaller than the crop.
        """
        left, right, top, bottom = self.padding or (0, 0, 0, 0)
        padded_height, padded_width = height + top + bottom, width + left + right
        crop_height, crop_width = self.size
        if self.pad_if_needed and padded_height < crop_height:
            more = crop_height - padded_height
            top, bottom, padded_height = top + more, bottom + more, padded_height + 2 * more
        if self.pad_if_needed and padded_width < crop_width:
            more = crop_width - padded_width
            left, right, padded_width = left + more, right + more, padded_width + 2 * more
        if padded_height < crop_height or padded_width < crop_width:
            padded = "padded " if self.padding is not None else ""
            raise TransformError(f"Required crop size {(crop_height, crop_width)} is larger than {padded}"
                                 f"input image size {(padded_height, padded_width)}: pass "
                                 f"pad_if_needed=True to {self!r} to pad smaller images")
        crop_top = random.integers(0, padded_height - crop_height + 1) if padded_height > crop_height else 0
        crop_left = random.integers(0, padded_width - crop_width + 1) if padded_width > crop_width else 0
        crops = padded_height > crop_height or padded_width > crop_width
        return CropDraw((left, top, right, bottom), crop_top, crop_left, crop_height, crop_width, crops)

    def steps(self, draw: CropDraw) -> tuple[Step, ...]:
        """What the draw does to the sample's targets: torchvision's pad then crop (each where it runs)."""
        pad: tuple[Step, ...] = (Pad(*draw.padding, fill=self.mask_fill),) if any(draw.padding) else ()
        crop: tuple[Step, ...] = (Crop(draw.top, draw.left, draw.height, draw.width),) if draw.crops else ()
        return pad + crop

    def __call__(self, image: Any) -> torch.Tensor:
        pixels = to_uint8_chw(image)
        draw = self.draw(int(pixels.shape[2]), int(pixels.shape[1]), from_torch_generator())
        return crop_chw(pixels, draw.source_box(), self.image_fill)

    def __repr__(self) -> str:
        padding = "" if self.padding is None else f", padding={list(self.padding)}"
        needed = ", pad_if_needed=True" if self.pad_if_needed else ""
        fill = "" if self.fill == 0 else f", fill={self.fill!r}"
        return f"RandomCrop(size={self.size}{padding}{needed}{fill})"


def _padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """torchvision's padding: ``(left, right, top, bottom)`` from an int or 1, 2 or 4 ints."""
    message = f"Padding must be an int or a 1, 2, or 4 element of tuple or list, got {padding}."
    if isinstance(padding, int):
        return (padding, padding, padding, padding)
    if not (isinstance(padding, Sequence) and len(padding) in (1, 2, 4)
            and all(isinstance(value, int) for value in padding)):
        raise ValueError(message)
    if len(padding) == 1:
        return (padding[0],) * 4
    if len(padding) == 2:
        return (padding[0], padding[0], padding[1], padding[1])
    return (padding[0], padding[2], padding[1], padding[3])


def _fill_for(fill: Any, names: tuple[str, ...]) -> Any:
    """The fill a kind of input takes: a dict's entry for a type named in ``names``, else ``"others"``."""
    if not isinstance(fill, Mapping):
        return fill
    for key, value in fill.items():
        if getattr(key, "__name__", None) in names:
            return value
    return fill.get("others", 0)


def _image_fill(fill: Any) -> tuple[int, int, int]:
    """The image's fill as three uint8 values."""
    if fill is None:
        return (0, 0, 0)
    values: list[Any] = [fill] if isinstance(fill, numbers.Real) else \
        list(fill) if isinstance(fill, Sequence) else []
    if len(values) not in (1, 3) or not all(
            isinstance(value, (int, float)) and 0 <= value <= 255 for value in values):
        raise ValueError(f"fill must be a number from 0 to 255 or one per channel, not {fill!r}")
    channels = [int(value) for value in values] * (3 if len(values) == 1 else 1)
    return (channels[0], channels[1], channels[2])
