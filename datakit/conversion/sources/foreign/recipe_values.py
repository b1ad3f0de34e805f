"""What one value of the pickle recipe's stores holds: an image and its label.

The recipe stores ``pickle.dumps((image, label))`` per sample: ``image`` is
the encoded file's bytes, or a numpy pixel array (uint8; ``HxW``, ``HxWx1``,
``HxWx3``, ``1xHxW`` or ``3xHxW``); ``label`` an integer. For unlabelled data
it stores the pixel array alone, ``pickle.dumps(array)``. Values are loaded
through :func:`~datakit.format.unpickle.safe_loads` only, never
``pickle.loads``. A pixel array becomes raw RGB pixels
(:class:`~datakit.conversion.images.pixels.FramedPixels`: grey repeated into three
channels, channels-first turned channels-last), the form datakit's raw
records hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datakit.conversion.images.checks import BadImage
from datakit.conversion.images.pixels import FramedPixels, framed_array
from datakit.format.records import HEADER_SIZE
from datakit.format.unpickle import RefusedPickle, safe_loads

__all__ = ["RecipeValue", "load_value", "framed_image", "is_pixel_array", "integer_label", "describe"]

RecipeValue = tuple[Any, int | None]
"""An image (bytes, or a numpy array) and its integer label (``None``: a bare pixel array, unlabelled)."""


def load_value(data: bytes | memoryview) -> RecipeValue:
    """The image and label pickled in one recipe value.

    Raises:
        BadImage: the pickle is refused (:class:`~datakit.format.unpickle.RefusedPickle`),
            or holds something other than ``(image bytes or pixel array, integer label)`` or a
            bare pixel array.
    """
    try:
        value = safe_loads(data)
    except RefusedPickle as exc:
        raise BadImage(f"refused pickle: {exc}") from None
    if isinstance(value, np.ndarray):  # the recipe's unlabelled layout
        _pixel_shape(value)
        return value, None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise BadImage(f"the value is {describe(value)}, neither an (image, label) pair nor a pixel array "
                       "as the recipe stores")
    image, label = value
    number = integer_label(label)
    if number is None:
        raise BadImage(f"the label is {describe(label)}, not an integer of at most 64 bits")
    if isinstance(image, (bytes, bytearray)):
        return bytes(image), number
    if isinstance(image, np.ndarray):
        _pixel_shape(image)  # refuse what cannot be stored now, before anything is written
        return image, number
    raise BadImage(f"the image is {describe(image)}, neither encoded image bytes nor a numeric pixel array")


def integer_label(label: object) -> int | None:
    """``label`` as a Python integer (a numpy integer too), or ``None`` when it is not one that
    fits in 64 bits (the classes are the labels as text, and a pickle's integer can be of any size)."""
    if isinstance(label, (bool, np.bool_)):
        return None
    if isinstance(label, (int, np.integer)) and -(1 << 63) <= int(label) < 1 << 63:
        return int(label)
    return None


def is_pixel_array(image: object) -> bool:
    """Whether a loaded image is a pixel array (stored raw) rather than encoded bytes."""
    return isinstance(image, np.ndarray)


def framed_image(image: bytes | np.ndarray) -> bytearray:
    """The image after room for a record header: the file's bytes, or raw RGB pixels
    (:class:`~datakit.conversion.images.pixels.FramedPixels`) for a pixel array.

    Raises:
        BadImage: a pixel array that is not uint8, or of a shape that is no image.
    """
    if isinstance(image, np.ndarray):
        return _rgb_pixels(image)
    framed = bytearray(HEADER_SIZE + len(image))
    framed[HEADER_SIZE:] = image
    return framed


def _pixel_shape(array: np.ndarray) -> tuple[int, int, int, bool]:
    """``(height, width, channels, channels_first)`` of a uint8 image array.

    Raises:
        BadImage: not uint8 (a float array has no agreed 8-bit scale), or not
            ``HxW``, ``HxWxC`` or ``CxHxW`` with 1 or 3 channels.
    """
    if array.dtype != np.uint8:
        raise BadImage(f"a {array.dtype} pixel array {tuple(array.shape)}; datakit imports uint8 pixels only "
                       "(convert the array to uint8 with the scale you trained with, and store it again)")
    shape = tuple(int(side) for side in array.shape)
    if len(shape) == 2 and min(shape) > 0:
        return shape[0], shape[1], 1, False
    if len(shape) == 3 and shape[2] in (1, 3) and min(shape[:2]) > 0:
        return shape[0], shape[1], shape[2], False
    if len(shape) == 3 and shape[0] in (1, 3) and min(shape[1:]) > 0:
        return shape[1], shape[2], shape[0], True
    raise BadImage(f"a pixel array of shape {shape}; an image is HxW, HxWx1, HxWx3, 1xHxW or 3xHxW")


def _rgb_pixels(array: np.ndarray) -> FramedPixels:
    height, width, channels, first = _pixel_shape(array)
    pixels = np.moveaxis(array, 0, -1) if first else array.reshape(height, width, channels)
    if channels == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    return framed_array(pixels)


def describe(value: object) -> str:
    """A few words on a loaded value, in time and space bounded whatever it is (never its whole
    ``repr``: a list of shared references can stand for more items than memory holds)."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array {tuple(value.shape)}"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"  # its digits may be more than str() writes
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(value[:40])
        return f"{type(value).__name__} {text}{'...' if len(value) > 40 else ''}"
    return f"{type(value).__name__} {repr(value)[:40]}"
