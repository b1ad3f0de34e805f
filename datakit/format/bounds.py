"""The bounds of what a store may claim: the manifest's numbers and an image's pixels.

A store's numbers size memory before any record is read, and a hostile store
chooses them, so each is held to what an honest conversion can write.

**The manifest's numbers**, checked when a store opens.

:mod:`datakit.format.manifest` checks that every field has its JSON type; these
checks hold the values to what an honest conversion can write, since several
of them size memory before any record is read: the size ranges shape
``datakit.DataLoader``'s shared-memory batch slots (``[-5, -5]`` was a
``RuntimeError`` there, ``[10**6, 10**6]`` terabytes), the length sizes
permutations and the label table, the counts feed the summaries. Each failure
is a :class:`~datakit.errors.StoreError` naming the store and the field.

The functions take plain values, not a manifest, so that this module depends
on nothing else of datakit's; :mod:`datakit.format.manifest` calls them.

**The pixel limit**, the most pixels datakit decodes in one image. A
record's image size comes from the record itself (its JPEG frame header, its
PNG header), so a hostile store can claim 65535 x 65535 pixels in a few
bytes: 12 GiB to allocate and fill before the decoder notices that the data
ran out. Pillow refuses such images (``DecompressionBombError``) above twice
``PIL.Image.MAX_IMAGE_PIXELS``; every datakit read path applies that same
limit, whichever decoder runs, so a record gets the same answer on each of
them, and a user who raised Pillow's limit (to read a store converted with a
raised ``--max-pixels``) raised datakit's with it. The manifest's size
ranges are held to it when a store opens (:func:`check_pixel_floor`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PIL import Image

from datakit.errors import StoreError

__all__ = ["MAX_SIDE", "MAX_COUNT", "check_count", "check_counts", "check_size_range", "check_pixel_floor",
           "ImageTooLarge", "read_pixel_limit", "check_pixels"]

MAX_SIDE = 2**32 - 1
"""A record header holds each image side as an unsigned 32-bit number (docs/format.md)."""
MAX_COUNT = 2**63 - 1
"""Counts of bytes and files: what a signed 64-bit integer holds (a float still divides them)."""


def check_count(where: str, name: str, value: int, most: int = MAX_COUNT, least: int = 0) -> None:
    """``least <= value <= most``, or a StoreError naming manifest field ``name``."""
    if not least <= value <= most:
        raise StoreError(f"{where}: manifest field {name!r} is {value}; it must be from {least} to {most}")


def check_counts(where: str, name: str, values: Sequence[int] | Mapping[str, int], most: int) -> None:
    """Every count of a list or an object (per class, per format) from 0 to ``most``."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    for position, value in items:
        check_count(where, f"{name}[{position!r}]", value, most)


def check_size_range(where: str, name: str, bounds: Sequence[int], length: int) -> None:
    """An image size range: ``[]`` for an empty store, else ``[least, most]`` within a record's sides."""
    if length == 0 and len(bounds) == 0:
        return
    if len(bounds) != 2 or not 1 <= bounds[0] <= bounds[1] <= MAX_SIDE:
        expected = "[]" if length == 0 else f"[least, most] with 1 <= least <= most <= {MAX_SIDE}"
        raise StoreError(f"{where}: manifest field {name!r} is {list(bounds)!r} for a store of {length} "
                         f"records; it must be {expected}")


def check_pixel_floor(where: str, width_range: Sequence[int], height_range: Sequence[int]) -> None:
    """No image can be decoded past the read-time pixel limit (:func:`read_pixel_limit`), and
    every image is at least ``width_range[0]`` wide and ``height_range[0]`` tall: so the widest
    image has at least ``width_range[1] * height_range[0]`` pixels, the tallest at least
    ``width_range[0] * height_range[1]``. Past the limit, the ranges describe images no read
    could decode, and batch slots of that size would be allocated for nothing."""
    limit = read_pixel_limit()
    if not width_range or limit is None:
        return
    floor = max(width_range[1] * height_range[0], width_range[0] * height_range[1])
    if floor <= limit:
        return
    raise StoreError(
        f"{where}: manifest fields 'stats.width_range' {list(width_range)} and 'stats.height_range' "
        f"{list(height_range)} say some image has at least {floor} pixels, more than datakit decodes "
        f"({limit}, twice PIL.Image.MAX_IMAGE_PIXELS); raise PIL.Image.MAX_IMAGE_PIXELS to read this store")


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
