"""Small generated image folders, for the demo, the benchmarks and the tests.

The images are deterministic for a seed and cheap to make, yet not trivially
compressible: each is a colour gradient, a class-specific pattern and noise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from PIL import Image

__all__ = ["make_image_folder", "make_photo_folder", "photo_pixels"]


def make_image_folder(
    root: str | os.PathLike[str],
    *,
    classes: Sequence[str] = ("cat", "dog", "bird"),
    per_class: int = 20,
    size: tuple[int, int] = (64, 48),
    image_format: str = "JPEG",
    seed: int = 0,
) -> list[str]:
    """Write ``per_class`` images into ``root/<class>/`` for each class.

    Args:
        root: the folder to create (it may exist).
        classes: class folder names.
        per_class: images per class.
        size: ``(width, height)`` of every image.
        image_format: a Pillow format name; sets the extension too.
        seed: makes the pixels reproducible.

    Returns:
        The written files' paths relative to ``root``, ``/``-separated.
    """
    rng = np.random.default_rng(seed)
    width, height = size
    extensions = {"JPEG": "jpg", "PNG": "png", "BMP": "bmp", "WEBP": "webp"}
    extension = extensions.get(image_format, image_format.lower())
    ys, xs = np.mgrid[0:height, 0:width]
    written = []
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for number in range(per_class):
            base = rng.integers(0, 256, size=3)
            pattern = ((xs // (4 + label) + ys // (4 + number % 5)) % 2) * 80
            pixels = (base[None, None, :] + xs[..., None] * 2 + ys[..., None] + pattern[..., None]
                      + rng.integers(0, 24, size=(height, width, 3)))
            image = Image.fromarray((pixels % 256).astype(np.uint8), "RGB")
            relative = f"{name}/{number:05d}.{extension}"
            image.save(os.path.join(root, relative), format=image_format)
            written.append(relative)
    return written


def photo_pixels(width: int, height: int, seed: int) -> np.ndarray:
    """An ``(height, width, 3)`` uint8 image with the structure of a photo rather than of noise.

    Smooth colour fields, a sharp-edged object and mild sensor noise: at JPEG
    quality 90 a 400x400 image takes about 50 KB, as ImageNet's photos do,
    and resizing it shows the edge and gradient behaviour of real pictures.
    """
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    pixels = np.stack([128 + 90 * np.sin(xs / (23 + 9 * c) + phase[c]) * np.cos(ys / (31 - 5 * c) - phase[c])
                       for c in range(3)], axis=-1)
    top, left = int(rng.integers(0, max(1, height // 2))), int(rng.integers(0, max(1, width // 2)))
    pixels[top:top + height // 4, left:left + width // 3] = rng.uniform(0, 255, 3)
    pixels += rng.normal(0, 6, pixels.shape).astype(np.float32)
    result: np.ndarray = np.clip(pixels, 0, 255).astype(np.uint8)
    return result


def make_photo_folder(
    root: str | os.PathLike[str],
    *,
    images: int = 3000,
    classes: int = 10,
    sides: tuple[int, int] = (300, 500),
    quality: int = 90,
    seed: int = 0,
) -> list[str]:
    """An ImageNet-shaped folder: JPEGs of photo-like content whose sides vary in ``sides``.

    Args:
        root: the folder to create (it may exist).
        images: how many images, spread evenly over the classes.
        classes: how many class folders (``class_000`` ...).
        sides: the range each side's length is drawn from (inclusive).
        quality: JPEG quality.
        seed: makes sizes and pixels reproducible.

    Returns:
        The written files' paths relative to ``root``, ``/``-separated.
    """
    rng = np.random.default_rng(seed)
    written = []
    for number in range(images):
        name = f"class_{number % classes:03d}"
        os.makedirs(os.path.join(root, name), exist_ok=True)
        width, height = (int(side) for side in rng.integers(sides[0], sides[1] + 1, 2))
        relative = f"{name}/{number:06d}.jpg"
        Image.fromarray(photo_pixels(width, height, seed * 1_000_003 + number)).save(
            os.path.join(root, relative), format="JPEG", quality=quality)
        written.append(relative)
    return written
