"""Small generated image folders, for the demo, the benchmarks and the tests.

The images are deterministic for a seed and cheap to make, yet not trivially
compressible: each is a colour gradient, a class-specific pattern and noise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from PIL import Image

__all__ = ["make_image_folder"]


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
