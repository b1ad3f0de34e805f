"""torchvision v2's type and dtype conversions: ``ToImage``, ``PILToTensor``, ``ToDtype``, ``ToPureTensor``.

Code ported from torchvision's v2 writes them around its crops and
``Normalize`` (``PILToTensor(), ToDtype(torch.float32, scale=True),
Normalize(...), ..., ToPureTensor()``). Called directly, each does what
torchvision's does on a PIL image, an array or a tensor, and passes through
what torchvision's passes through; the one difference is that tensors come
out plain (``torch.Tensor``, not ``tv_tensors.Image``): datakit does not need
torchvision, and to every v2 transform a plain tensor is an image.

In a :class:`~datakit.vision.Compose` given to a dataset, samples are uint8
``(3, H, W)`` tensors from the fused decode: ``ToImage``, ``PILToTensor``,
``ToPureTensor`` and a ``ToDtype`` to the dtype the pixels already have change
nothing and are dropped from the plan (:func:`is_no_op`);
``ToDtype(torch.float32, scale=True)`` followed by ``Normalize`` is datakit's
``Normalize`` on uint8; a ``ToDtype`` to a float dtype otherwise runs once per
batch where ``Normalize`` would (:mod:`datakit.vision.recipe`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from datakit.vision.transforms import Normalize, Transform

__all__ = ["ToImage", "PILToTensor", "ToDtype", "ToPureTensor", "pil_to_tensor", "to_dtype", "is_no_op",
           "folds_into", "passes_through"]


def pil_to_tensor(picture: Image.Image) -> torch.Tensor:
    """torchvision's ``pil_to_tensor``: ``(C, H, W)``, the image's own channels and dtype, unscaled."""
    array = torch.as_tensor(np.array(picture, copy=True))
    return array.view(picture.size[1], picture.size[0], len(picture.getbands())).permute(2, 0, 1)


def _is_pure(value: Any) -> bool:
    return type(value) is torch.Tensor


class ToImage(Transform):
    """A PIL image, an ``(H, W[, C])`` array or a tensor as a ``(C, H, W)`` image tensor: torchvision's
    ``ToImage``, unscaled (a 2-D tensor gains its channel dimension). Other values pass through."""

    def __call__(self, image: Any) -> Any:
        if isinstance(image, np.ndarray):
            return torch.from_numpy(np.atleast_3d(image)).permute(2, 0, 1).contiguous()
        if isinstance(image, Image.Image):
            return pil_to_tensor(image)
        if _is_pure(image):
            if image.ndim < 2:
                raise ValueError(f"ToImage needs a tensor of 2 or more dimensions, got {image.ndim}-D")
            return image.unsqueeze(0) if image.ndim == 2 else image
        return image  # torchvision's tv_tensors (already typed) and anything else

    def __repr__(self) -> str:
        return "ToImage()"


class PILToTensor(Transform):
    """A PIL image as a ``(C, H, W)`` tensor of its own dtype, unscaled: torchvision's ``PILToTensor``.
    Anything else (a tensor, in a datakit pipeline) passes through, as torchvision's v2 passes it."""

    def __call__(self, image: Any) -> Any:
        return pil_to_tensor(image) if isinstance(image, Image.Image) else image

    def __repr__(self) -> str:
        return "PILToTensor()"


class ToPureTensor(Transform):
    """A tensor subclass (torchvision's ``tv_tensors``) as a plain ``torch.Tensor``: torchvision's
    ``ToPureTensor``. Plain tensors, PIL images and other values pass through."""

    def __call__(self, image: Any) -> Any:
        if isinstance(image, torch.Tensor) and not _is_pure(image):
            return image.as_subclass(torch.Tensor)
        return image

    def __repr__(self) -> str:
        return "ToPureTensor()"


def _max_value(dtype: torch.dtype) -> int:
    """The top of an integer dtype's range; 1 for floats (torchvision's ``_max_value``)."""
    if dtype.is_floating_point or dtype == torch.bool:
        return 1
    return int(torch.iinfo(dtype).max)


def to_dtype(image: torch.Tensor, dtype: torch.dtype, scale: bool = False) -> torch.Tensor:
    """torchvision's ``to_dtype_image``: ``image`` as ``dtype``, its values rescaled with ``scale``.

    Integers map their range onto ``[0, 1]`` floats (``uint8 / 255``, as a
    multiplication by ``1 / 255``, as torchvision computes it), floats onto the
    integer range, and integers onto each other by bit shifts.

    Raises:
        RuntimeError: float32 to int32 or int64, or float64 to int64, with
            ``scale``: torchvision refuses them (they cannot be done exactly).
    """
    if image.dtype == dtype:
        return image
    if not scale:
        return image.to(dtype)
    if image.is_floating_point():
        if dtype.is_floating_point:
            return image.to(dtype)
        if (image.dtype == torch.float32 and dtype in (torch.int32, torch.int64)) or (
                image.dtype == torch.float64 and dtype == torch.int64):
            raise RuntimeError(f"The conversion from {image.dtype} to {dtype} cannot be performed safely.")
        return image.mul(float(_max_value(dtype)) + 1.0 - 1e-3).to(dtype)  # torchvision's rounding
    if dtype.is_floating_point:
        return image.to(dtype).mul_(1.0 / _max_value(image.dtype))
    bits_in, bits_out = _value_bits(image.dtype), _value_bits(dtype)
    shift = abs(bits_in - bits_out)
    if bits_in > bits_out:
        if image.dtype == torch.uint16:
            return (image / (1 << shift)).to(dtype)
        return image.bitwise_right_shift(shift).to(dtype)
    if dtype == torch.uint16:
        return image.to(dtype) * (1 << shift)
    return image.to(dtype).bitwise_left_shift_(shift)


def _value_bits(dtype: torch.dtype) -> int:
    """Bits that hold values (the sign bit apart), as torchvision's ``_num_value_bits``."""
    if dtype == torch.bool:
        return 1
    info = torch.iinfo(dtype)
    return info.bits - (1 if info.min < 0 else 0)


class ToDtype(Transform):
    """An image tensor converted to ``dtype``, rescaled with ``scale``: torchvision's ``ToDtype``.

    ``ToDtype(torch.float32, scale=True)`` makes uint8 pixels ``x / 255``;
    with ``scale=False`` it is a cast. PIL images pass through, as in
    torchvision (which converts images and videos only when ``dtype`` is one
    dtype). In a dataset's pipeline it runs once per batch (see the module).

    Args:
        dtype: the ``torch.dtype`` images become. torchvision's per-type
            dicts are refused: a datakit pipeline's images are plain tensors.
        scale: map the value range of the input dtype onto the output's.

    Raises:
        ValueError: ``dtype`` is not a ``torch.dtype``.
    """

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        if isinstance(dtype, dict):
            raise ValueError("datakit.vision.ToDtype takes one torch.dtype, for the images: a datakit "
                             f"pipeline's samples are plain image tensors; got the dict {dtype!r}")
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self.scale = bool(scale)

    def __call__(self, image: Any) -> Any:
        if not isinstance(image, torch.Tensor) or not (
                _is_pure(image) or type(image).__name__ in ("Image", "Video")):
            return image  # PIL images, boxes, masks..., as torchvision passes them through
        converted = to_dtype(image, self.dtype, self.scale)
        return converted if _is_pure(image) else converted.as_subclass(type(image))  # an Image stays one

    def __repr__(self) -> str:
        return f"ToDtype(dtype={self.dtype}, scale={self.scale})"


def passes_through(op: object) -> bool:
    """Whether ``op`` leaves every plain ``(C, H, W)`` tensor as it is, whatever its dtype."""
    return isinstance(op, (ToImage, PILToTensor, ToPureTensor))


def is_no_op(op: object, dtype: torch.dtype) -> bool:
    """Whether ``op`` leaves a plain image tensor of ``dtype`` as it is (a pipeline then drops it)."""
    return passes_through(op) or (isinstance(op, ToDtype) and op.dtype == dtype)


def folds_into(op: object, following: object) -> bool:
    """Whether ``op`` then ``following`` is ``following`` alone on uint8 pixels: datakit's
    ``Normalize`` takes uint8 and divides by 255 itself, i.e. it is ``ToDtype(float32, scale=True)``
    followed by torchvision's ``Normalize`` (equal within float rounding)."""
    return (isinstance(op, ToDtype) and op.dtype == torch.float32 and op.scale
            and isinstance(following, Normalize))
