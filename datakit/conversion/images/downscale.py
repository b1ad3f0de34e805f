"""Store-time downscaling: ``datakit convert --max-side N`` (FFCV's ``max_resolution``).

Training at 224 px from 4,000 px camera photos decodes 300 times the pixels
it uses. Images whose longer side exceeds ``max_side`` are resized once, at
conversion, so that the longer side is ``max_side`` (the shorter keeps the
aspect ratio, rounded); every other image is stored byte for byte. A JPEG
is re-encoded as JPEG at ``quality``; other formats are stored losslessly,
as PNG. JPEGs are decoded at the smallest DCT scale that still covers the
target (Pillow's ``draft``), then resized with Lanczos.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageOps

from datakit.format.decoding import HIGH_BIT_DEPTH_MODES, rgb_pixels

__all__ = ["DEFAULT_QUALITY", "smaller_size", "needs_downscaling", "downscale", "encode_downscaled",
           "downscaled_pixels"]

DEFAULT_QUALITY = 90
"""JPEG quality of re-encoded images: visually lossless for training, a third of quality 100's bytes."""


def needs_downscaling(width: int, height: int, max_side: int | None) -> bool:
    """Whether an image of this size is resized under ``max_side`` (None: never)."""
    return max_side is not None and max(width, height) > max_side


def smaller_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """The ``(width, height)`` whose longer side is ``max_side``, the aspect ratio kept."""
    if width >= height:
        return max_side, max(1, round(height * max_side / width))
    return max(1, round(width * max_side / height)), max_side


def downscale(image: Image.Image, max_side: int, orientation: int = 1) -> Image.Image:
    """``image`` (opened, not yet loaded) resized so that its longer side is ``max_side``.

    Args:
        image: the source, as Pillow opened it.
        max_side: the longer side of the result.
        orientation: an EXIF orientation to turn the image upright by first, or 1.

    16-bit and float images are scaled to 8 bits first (:func:`datakit.format.decoding.rgb_pixels`),
    as every reader would scale them.
    """
    width, height = image.size
    if orientation in (5, 6, 7, 8):  # turned by a quarter: the sides swap
        width, height = height, width
    target = smaller_size(width, height, max_side)
    if image.format == "JPEG" and image.mode in ("RGB", "L", "CMYK"):
        image.draft(image.mode, (max(target), max(target)))  # the smallest DCT scale that still covers it
    if orientation != 1:
        image = ImageOps.exif_transpose(image)
    if image.mode in HIGH_BIT_DEPTH_MODES:
        image = Image.fromarray(rgb_pixels(image))
    elif image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    return image.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)


def encode_downscaled(smaller: Image.Image, source_format: str, quality: int) -> tuple[bytes, str]:
    """The resized image as the bytes to store, and their format: JPEG stays JPEG, the rest PNG."""
    buffer = io.BytesIO()
    if source_format in ("JPEG", "MPO"):
        smaller.save(buffer, format="JPEG", quality=quality)
        return buffer.getvalue(), "JPEG"
    smaller.save(buffer, format="PNG")
    return buffer.getvalue(), "PNG"


def downscaled_pixels(smaller: Image.Image) -> np.ndarray:
    """The resized image's RGB pixels, for ``--format raw``."""
    pixels: np.ndarray = np.asarray(smaller.convert("RGB"))
    return pixels
