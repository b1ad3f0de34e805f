"""The most pixels datakit decodes in one image when reading a store.

A record's image size comes from the record itself (its JPEG frame header,
its PNG header), so a hostile store can claim 65535 x 65535 pixels in a few
bytes: 12 GiB to allocate and fill before the decoder notices that the data
ran out. Pillow refuses such images (``DecompressionBombError``) above twice
``PIL.Image.MAX_IMAGE_PIXELS``; every datakit read path applies that same
limit, whichever decoder runs, so a record gets the same answer on each of
them, and a user who raised Pillow's limit (to read a store converted with a
raised ``--max-pixels``) raised datakit's with it. The manifest's size
ranges are held to it when a store opens (:mod:`datakit.manifest_bounds`).
"""

from __future__ import annotations

from PIL import Image

__all__ = ["ImageTooLarge", "read_pixel_limit", "check_pixels"]


class ImageTooLarge(ValueError):
    """An image with more pixels than :func:`read_pixel_limit`; the message says how to allow it."""


def read_pixel_limit() -> int | None:
    """Pillow's hard limit, read now (None when the user turned Pillow's limit off)."""
    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else 2 * int(limit)


def check_pixels(width: int, height: int) -> None:
    """Refuse a ``width`` x ``height`` image over the limit, before anything is allocated for it.

    Raises:
        ImageTooLarge: it is over the limit.
    """
    limit = read_pixel_limit()
    if limit is not None and width * height > limit:
        raise ImageTooLarge(f"{width}x{height} is more than {limit} pixels (twice "
                            "PIL.Image.MAX_IMAGE_PIXELS; possible decompression bomb): raise "
                            "PIL.Image.MAX_IMAGE_PIXELS to read it")
