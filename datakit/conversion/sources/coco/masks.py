"""A COCO annotation's ``segmentation`` as the runs of an instance mask, exactly as torchvision makes it.

torchvision's COCO wrapper (``wrap_dataset_for_transforms_v2(CocoDetection(...))``)
rasterises polygons with pycocotools on the image's own size
(``mask.merge(mask.frPyObjects(polygons, height, width))``) and decodes an RLE
at the size it states. A store keeps each mask as COCO's column-major runs
(:class:`~datakit.format.fields.masks.MasksValue`), so polygons go through the
same pycocotools calls and their compressed RLE is read back into runs here
(:func:`rle_counts`); an RLE is read without pycocotools, its runs checked to
cover its size exactly (pycocotools' decoder would write past its buffer
otherwise). An RLE whose size is not the image's, a polygon of fewer than 3
points, a coordinate that is not a finite number or lies farther than the
image's size outside it, is a :class:`~datakit.conversion.images.checks.BadImage`
naming the annotation: the sample is skipped and listed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.images.checks import BadImage
from datakit.errors import SourceError
from datakit.format.fields.masks import MasksValue

__all__ = ["CocoMasks", "rle_counts", "needs_pycocotools", "require_pycocotools", "is_number"]

_INSTALL = "pip install 'datakit[coco]'"


@dataclass(frozen=True)
class CocoMasks:
    """One image's instance masks, rasterised on its canvas when the image's size is known
    (an :class:`~datakit.conversion.fields.OnCanvas` value).

    Attributes:
        segmentations: per instance, the words naming its annotation and its ``segmentation``
            (``None`` or ``[]``: an empty mask).
    """

    segmentations: Sequence[tuple[str, Any]]

    def on(self, canvas: tuple[int, int]) -> MasksValue:
        """The masks on an image of ``(height, width)``.

        Raises:
            BadImage: a segmentation is malformed, or its RLE is of another size (naming the annotation).
        """
        height, width = canvas
        runs = [_runs(segmentation, height, width, where) for where, segmentation in self.segmentations]
        return MasksValue(height, width, runs)


def needs_pycocotools(segmentation: Any) -> bool:
    """Whether ``segmentation`` holds polygons, which only pycocotools rasterises as torchvision does."""
    return isinstance(segmentation, list) and bool(segmentation)


def require_pycocotools(where: str) -> None:
    """Refuse, before anything is converted, polygons that this installation cannot rasterise.

    Raises:
        SourceError: pycocotools does not import; the message names ``where`` and the install command.
    """
    try:
        from pycocotools import mask  # noqa: F401
    except ImportError:
        raise SourceError(f"{where} holds polygon segmentations, which datakit rasterises with pycocotools "
                          f"as torchvision does; install it: {_INSTALL}") from None


def _runs(segmentation: Any, height: int, width: int, where: str) -> np.ndarray:
    """The column-major runs of one annotation's mask on a ``height`` x ``width`` image."""
    if segmentation is None or segmentation == []:
        return np.array([height * width], dtype=np.uint32)
    if isinstance(segmentation, list):
        return _polygon_runs(segmentation, height, width, where)
    if isinstance(segmentation, dict) and "counts" in segmentation and "size" in segmentation:
        return _rle_runs(segmentation, height, width, where)
    raise BadImage(f"{where}: 'segmentation' is neither a list of polygons nor an RLE "
                   f"{{size, counts}}: {segmentation!r:.60}")


def _polygon_runs(polygons: list[Any], height: int, width: int, where: str) -> np.ndarray:
    """Polygons rasterised and merged by pycocotools, as torchvision's wrapper does."""
    for polygon in polygons:
        _check_polygon(polygon, height, width, where)
    from pycocotools import mask

    merged = mask.merge(mask.frPyObjects(polygons, height, width))
    return _checked(rle_counts(merged["counts"]), height, width, where)


def _check_polygon(polygon: Any, height: int, width: int, where: str) -> None:
    """A polygon pycocotools reads as one: at least 3 points of finite coordinates near the image.

    pycocotools takes a list of 4 numbers for a box, and sizes its buffers by the polygon's
    length in pixels: a coordinate of 1e12 would exhaust the memory.
    """
    if not isinstance(polygon, list) or not all(is_number(value) for value in polygon):
        raise BadImage(f"{where}: a polygon of 'segmentation' is a flat list of x, y numbers, not "
                       f"{polygon!r:.60}")
    if len(polygon) < 6 or len(polygon) % 2:
        raise BadImage(f"{where}: a polygon of 'segmentation' has {len(polygon) / 2:g} points; a polygon "
                       "has at least 3 (x, y pairs)")
    xs, ys = polygon[0::2], polygon[1::2]
    for values, side, axis in ((xs, width, "x"), (ys, height, "y")):
        if not all(math.isfinite(value) and -side <= value <= 2 * side for value in values):
            raise BadImage(f"{where}: a polygon of 'segmentation' has an {axis} coordinate that is not a "
                           f"number within one image size of the {width}x{height} image")


def _rle_runs(rle: dict[str, Any], height: int, width: int, where: str) -> np.ndarray:
    """An RLE's runs: compressed (a string, as pycocotools writes it) or a list of counts."""
    size = rle["size"]
    if not (isinstance(size, list) and len(size) == 2 and all(type(side) is int for side in size)):
        raise BadImage(f"{where}: the RLE's 'size' is [height, width], not {size!r:.40}")
    if size != [height, width]:
        raise BadImage(f"{where}: its RLE mask is {size[1]}x{size[0]}, the image is {width}x{height}")
    counts = rle["counts"]
    if isinstance(counts, str):
        try:
            runs: Sequence[int] | np.ndarray = rle_counts(counts.encode("ascii"))
        except (UnicodeEncodeError, ValueError) as exc:
            raise BadImage(f"{where}: the RLE's 'counts' is not a compressed RLE ({exc})") from None
    elif isinstance(counts, list) and all(type(count) is int and count >= 0 for count in counts):
        runs = counts
    else:
        raise BadImage(f"{where}: the RLE's 'counts' is a string or a list of counts, not {counts!r:.40}")
    return _checked(runs, height, width, where)


def _checked(runs: Sequence[int] | np.ndarray, height: int, width: int, where: str) -> np.ndarray:
    try:
        counts = np.asarray(runs, dtype=np.int64)
    except OverflowError:
        raise BadImage(f"{where}: the RLE has a run longer than any mask") from None
    total = int(counts.sum()) if counts.size and int(counts.max()) <= height * width else -1
    if (counts < 0).any() or total != height * width:
        shown = total if total >= 0 else "more than"
        raise BadImage(f"{where}: the RLE's runs add up to {shown} pixels, not the {height}x{width} "
                       f"= {height * width} of its mask")
    return counts.astype(np.uint32)


_MAX_GROUPS = 12
"""Characters of one run at most: 60 bits, more than any mask's pixel count needs."""


def rle_counts(data: bytes) -> np.ndarray:
    """The runs of a compressed RLE string, as pycocotools' ``rleFrString`` reads it.

    Each run is a little-endian sequence of 6-bit groups (each character minus 48: five
    bits of value, a continuation bit), sign-extended; from the fourth run on it is the
    difference from the run two before. Read with numpy (a mask is thousands of runs,
    and a loop per character cost the COCO conversion a third of its time).

    Raises:
        ValueError: a character outside the encoding, a run cut short, or a run of more
            groups than any mask's size needs.
    """
    groups = np.frombuffer(data, dtype=np.uint8).astype(np.int64) - 48
    bad = np.flatnonzero((groups < 0) | (groups >= 64))
    if bad.size:
        raise ValueError(f"character {chr(data[bad[0]])!r} at {bad[0]}")
    if not groups.size:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero((groups & 0x20) == 0)
    if not ends.size or ends[-1] != groups.size - 1:
        raise ValueError("it ends inside a run")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if int(lengths.max()) > _MAX_GROUPS:
        raise ValueError(f"a run of {int(lengths.max())} characters")
    place = np.arange(groups.size) - np.repeat(starts, lengths)
    values = np.zeros(ends.size, dtype=np.int64)
    np.add.at(values, np.repeat(np.arange(ends.size), lengths), (groups & 0x1F) << (5 * place))
    negative = (groups[ends] & 0x10) != 0
    values[negative] -= np.int64(1) << (5 * lengths[negative])  # sign-extend from the last group
    counts: np.ndarray = values.copy()
    counts[1::2] = np.cumsum(values[1::2])  # run i >= 3 is run i - 2 plus its value
    counts[2::2] = np.cumsum(values[2::2])
    return counts


def is_number(value: Any) -> bool:
    """A JSON number: an int or a float, not a boolean (which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
