"""Detection CutMix: a rectangle of another image of the batch pasted into each, boxes cut along.

As torchvision's ``CutMix`` draws its rectangle (``lambda ~ Beta(alpha,
alpha)``, a centre uniform on the output's image, half-sides
``int(0.5 * sqrt(1 - lambda) * side)``, clipped to the image), the rectangle
is cut out of another sample of the batch (a batch of one is left as it
is) at the same place (both images laid from the top-left corner; clipped
to the other image too where it is smaller) and pasted. The targets, rather than labels mixed by area:

- the other sample's boxes are clipped to the rectangle, and kept when at
  least ``min_visibility`` of their area lies in it;
- the output's own boxes keep their coordinates, and are kept when at least
  ``min_visibility`` of their area is not covered by the rectangle (0.1 by
  default: a box 95 % covered no longer frames its object); their instance
  masks are zero under the rectangle;
- instance masks, keypoints and per-box entries go with their boxes; a
  per-image map (a label map) gets the rectangle pasted too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datakit.vision.augment.mixing import CutMix
from datakit.vision.detection_mixing.assembly import Piece, Rect, assemble, placed
from datakit.vision.detection_mixing.base import SamplesOp, others
from datakit.vision.detection_mixing.instances import Instances
from datakit.vision.detection_mixing.mixup import check_channels, concentration
from datakit.vision.randomness import SampleRandom
from datakit.vision.targets.boxes import Canvas

__all__ = ["DetectionCutMix", "CutMixDraw"]


@dataclass(frozen=True)
class CutMixDraw:
    """One output's CutMix: the batch position of the other image and the rectangle ``(x1, y1, x2, y2)``
    drawn on the output's image (before it is clipped to the other's)."""

    other: int
    box: Rect


class DetectionCutMix(SamplesOp):
    """Paste a rectangle of another image of the batch into each, boxes of both kept where they show
    (datakit's own operation).

    Args:
        p: the probability that an output gets a rectangle (else its sample, unchanged).
        alpha: the rectangle's share of the image is ``1 - lambda``, ``lambda ~ Beta(alpha, alpha)``.
        min_visibility: the least share of a box's area that must still show:
            for the pasted boxes, inside the rectangle; for the output's own,
            outside it.

    Raises:
        ValueError: an argument out of its range, named.
    """

    def __init__(self, p: float = 1.0, alpha: float = 1.0, min_visibility: float = 0.1) -> None:
        super().__init__(p, min_visibility)
        self.alpha = concentration(alpha)
        self._rectangle = CutMix(alpha=self.alpha)  # its draw: torchvision's, tested against it

    def draw(self, rand: SampleRandom, slot: int, canvases: Sequence[Canvas]) -> CutMixDraw | None:
        if len(canvases) < 2:
            return None  # a batch of one: nothing to paste from (itself would repeat its boxes)
        other = others(rand, slot, len(canvases), 1)[0]
        height, width = canvases[slot]
        return CutMixDraw(other, self._rectangle.draw_batch(rand, len(canvases), height, width).box)

    def build(self, sources: Sequence[Instances], slot: int, draw: Any) -> Any:
        check_channels(self, sources, slot, draw.other)
        base, other = sources[slot], sources[draw.other]
        canvas = base.canvas
        pasted = placed(other, (0, 0), canvas, within=draw.box)
        x1, y1, x2, y2 = pasted.region
        own = Piece(base, (0, 0), (0, 0, canvas[1], canvas[0]), covered=pasted.region)
        image = base.pixels.clone()
        if x2 > x1 and y2 > y1:
            image[:, y1:y2, x1:x2] = other.pixels[:, y1:y2, x1:x2]
        return assemble(image, [own, pasted], self.min_visibility, f"{self!r}, output {slot} of the batch")

    def __repr__(self) -> str:
        return f"DetectionCutMix(p={self.p}, alpha={self.alpha}, min_visibility={self.min_visibility})"
