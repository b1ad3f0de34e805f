"""Mosaic: four images of a batch on one ``2 * imgsz`` canvas, their boxes, masks and keypoints moved along.

The YOLO recipes' four-image mosaic (ultralytics' ``Mosaic(imgsz, p, n=4)``):
a canvas of ``2 * imgsz`` x ``2 * imgsz`` filled with ``fill`` (114, grey);
a centre ``(xc, yc)`` drawn uniformly in ``[-border, 2 * imgsz + border)``
on each axis and truncated to an integer (the default border,
``-imgsz // 2``, keeps it in the middle half); the output's own sample is
placed with its bottom-right corner on the centre, then three others with
their bottom-left, top-right and top-left corners on it (top-right,
bottom-left and bottom-right quadrants). Each image keeps its size: the
parts that leave the canvas are cut (give the images their size before, as
the recipes do with a resize of the long side to ``imgsz``:
``Resize(None, max_size=imgsz)``). The recipes then crop the canvas back to
``imgsz`` with a random affine transform.

Targets follow :mod:`.assembly`: boxes translated and clipped to the part of
their own image the canvas shows (ultralytics clips to the whole canvas; a
box that crossed its image's edge would otherwise frame a neighbour's
pixels), kept when some of them and at least ``min_visibility`` of their
area still shows; instance masks placed on the canvas; keypoints translated.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from datakit.errors import TransformError
from datakit.vision.detection_mixing.assembly import assemble, placed
from datakit.vision.detection_mixing.base import SamplesOp, others
from datakit.vision.detection_mixing.instances import Instances
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.boxes import Canvas

__all__ = ["Mosaic", "MosaicDraw"]

# Where each of the four images lies against the centre: (left of it, above it).
_QUADRANTS = ((True, True), (False, True), (True, False), (False, False))


@dataclass(frozen=True)
class MosaicDraw:
    """One output's mosaic: the batch positions of its four images (its own first) and the centre
    ``(x, y)`` on the canvas."""

    sources: tuple[int, int, int, int]
    centre: tuple[int, int]


class Mosaic(SamplesOp):
    """Four images of the batch on one canvas: the YOLO recipes' ``Mosaic`` (datakit's own operation).

    Args:
        imgsz: the size the recipe trains at; the canvas is ``2 * imgsz`` on each side.
        p: the probability that an output is a mosaic (else its sample, unchanged and of its own size).
        n: the number of images: 4 (a 2 x 2 mosaic).
        border: ``(y, x)`` (or one int for both): the centre is drawn in
            ``[-border, 2 * imgsz + border)``; ``-imgsz // 2`` by default. Must
            be in ``(-imgsz, 0]``.
        fill: the canvas where no image lies: one number, or one per channel,
            in the images' units (uint8 pixels before ``Normalize``).
        min_visibility: the least share of a box's area that must show on the canvas for it to be kept.

    Raises:
        ValueError: an argument out of its range, named.
    """

    def __init__(self, imgsz: int = 640, p: float = 1.0, n: int = 4,
                 border: int | Sequence[int] | None = None, fill: float | Sequence[float] = 114,
                 min_visibility: float = 0.0) -> None:
        super().__init__(p, min_visibility)
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz <= 0:
            raise ValueError(f"imgsz must be a positive int (the canvas is 2 * imgsz), not {imgsz!r}")
        if n != 4:
            raise ValueError(f"n must be 4 (a 2 x 2 mosaic), not {n!r}: datakit's Mosaic has no 3 x 3 form")
        self.imgsz, self.n = imgsz, n
        self.border = _border(border, imgsz)
        self.fill = _fill(fill)

    def draw(self, rand: SampleRandom, slot: int, canvases: Sequence[Canvas]) -> MosaicDraw:
        chosen = others(rand, slot, len(canvases), 3)
        span = 2 * self.imgsz
        centre_y = int(rand.uniform(-self.border[0], span + self.border[0]))
        centre_x = int(rand.uniform(-self.border[1], span + self.border[1]))
        return MosaicDraw((slot, chosen[0], chosen[1], chosen[2]), (centre_x, centre_y))

    def build(self, sources: Sequence[Instances], slot: int, draw: Any) -> Any:
        base = sources[slot]
        span = 2 * self.imgsz
        canvas = (span, span)
        pixels = base.pixels
        image = pixels.new_empty((pixels.shape[0], span, span))
        image[:] = self._fill_for(image, slot)
        centre_x, centre_y = draw.centre
        pieces = []
        for (left, above), position in zip(_QUADRANTS, draw.sources, strict=True):
            source = sources[position]
            height, width = source.canvas
            if source.pixels.shape[0] != pixels.shape[0]:
                raise TransformError(f"{self!r}: sample {position} of the batch has {source.pixels.shape[0]} "
                                     f"channels, sample {slot} {pixels.shape[0]}")
            offset = (centre_x - width if left else centre_x, centre_y - height if above else centre_y)
            piece = placed(source, offset, canvas)
            x1, y1, x2, y2 = piece.region
            if x2 > x1 and y2 > y1:
                dx, dy = offset
                image[:, y1:y2, x1:x2] = source.pixels[:, y1 - dy:y2 - dy, x1 - dx:x2 - dx]
            pieces.append(piece)
        return assemble(image, pieces, self.min_visibility, f"{self!r}, output {slot} of the batch")

    def _fill_for(self, image: torch.Tensor, slot: int) -> torch.Tensor:
        values = torch.tensor(self.fill, dtype=torch.float64)
        if values.numel() not in (1, image.shape[0]):
            raise TransformError(f"{self!r}: fill has {values.numel()} values and sample {slot}'s image "
                                 f"{image.shape[0]} channels")
        return values.view(-1, 1, 1).to(image.dtype)

    def __repr__(self) -> str:
        return (f"Mosaic(imgsz={self.imgsz}, p={self.p}, n={self.n}, border={self.border}, "
                f"fill={self.fill}, min_visibility={self.min_visibility})")


def _border(border: int | Sequence[int] | None, imgsz: int) -> tuple[int, int]:
    if border is None:
        return (-imgsz // 2, -imgsz // 2)
    pair = (border, border) if isinstance(border, int) else tuple(border)
    if len(pair) != 2 or not all(isinstance(value, int) and not isinstance(value, bool)
                                 and -imgsz < value <= 0 for value in pair):
        raise ValueError(f"border must be an int or (y, x) ints in (-imgsz, 0] = ({-imgsz}, 0] (the centre "
                         f"is drawn in [-border, 2 * imgsz + border)), not {border!r}")
    return (int(pair[0]), int(pair[1]))


def _fill(fill: float | Sequence[float]) -> float | tuple[float, ...]:
    values = [fill] if isinstance(fill, numbers.Real) else list(fill) if isinstance(fill, Sequence) else []
    if not values or not all(isinstance(value, numbers.Real) and not isinstance(value, bool)
                             for value in values):
        raise ValueError(f"fill must be a number or a sequence of numbers (one per channel), not {fill!r}")
    return float(values[0]) if isinstance(fill, numbers.Real) else tuple(float(value) for value in values)
