"""torchvision v2's ``RandomZoomOut`` (SSD): the image placed at a random spot of a larger canvas.

With probability ``p`` a side factor ``r`` is drawn uniformly from
``side_range``; the canvas is ``int(w * r)`` x ``int(h * r)`` and the image's
corner is drawn uniformly in the room left (``int((W - w) * u)``), as
torchvision's ``make_params`` draws them. The canvas is ``fill``: one number,
one per channel, or a dict keyed by torchvision's types (``{tv_tensors.Image:
(123, 117, 104), "others": 0}``: images take the ``Image`` or ``Tensor``
entry, masks the ``Mask`` entry, each else ``"others"``, else 0). Boxes and
keypoints are translated (:class:`~datakit.vision.targets.steps.Pad`), masks
padded with their fill.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datakit.vision.randomness import SampleRandom
from datakit.vision.ssd.canvas_op import CanvasOp, times32, uniform32
from datakit.vision.targets.sample import TargetSample
from datakit.vision.targets.steps import Pad, Step

__all__ = ["RandomZoomOut", "ZoomOutParams", "fill_for"]


@dataclass(frozen=True)
class ZoomOutParams:
    """One sample's zoom-out: the ``(left, top, right, bottom)`` padding, torchvision's ``padding``."""

    padding: tuple[int, int, int, int]


def _check_fill(fill: Any) -> None:
    """torchvision's ``_check_fill_arg``: numbers, tuples, lists, None, or a dict of them."""
    if isinstance(fill, Mapping):
        for value in fill.values():
            _check_fill(value)
    elif fill is not None and not isinstance(fill, (numbers.Number, tuple, list)):
        raise TypeError("Got inappropriate fill arg, only Numbers, tuples, lists and dicts are allowed.")


def fill_for(fill: Any, names: tuple[str, ...]) -> Any:
    """The fill a kind of input takes (torchvision's ``_get_fill``): a dict's entry for a type named in
    ``names`` (by class name), else its ``"others"`` entry, else None; anything else as it is."""
    if not isinstance(fill, Mapping):
        return fill
    for key, value in fill.items():
        if getattr(key, "__name__", None) in names:
            return value
    return fill.get("others")


class RandomZoomOut(CanvasOp):
    """Zoom out: torchvision's ``RandomZoomOut`` (exact for the same draw), per sample.

    Args:
        fill: the canvas's value (see the module).
        side_range: ``(min, max)`` of the side factor, ``1 <= min <= max``.
        p: the probability of zooming out.
    """

    def __init__(self, fill: Any = 0, side_range: Sequence[float] = (1.0, 4.0), p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
        _check_fill(fill)
        if not isinstance(side_range, Sequence):
            raise TypeError("side_range should be a sequence of length 2.")
        if len(side_range) != 2:
            raise ValueError("side_range should be a sequence of length 2.")
        if side_range[0] < 1.0 or side_range[0] > side_range[1]:
            raise ValueError(f"Invalid side range provided {side_range}.")
        self.p = float(p)
        self.fill = fill
        self.side_range = side_range  # as given, as torchvision keeps it (its repr shows it)
        self.sides = (float(side_range[0]), float(side_range[1]))
        self.image_fill = fill_for(fill, ("Image", "Tensor"))
        mask_fill = fill_for(fill, ("Mask",))
        self.mask_fill = 0.0 if mask_fill is None else float(mask_fill) \
            if isinstance(mask_fill, numbers.Real) else None  # one per channel: refused when masks pad

    def draw_sample(self, rand: SampleRandom, height: int, width: int,
                    target: TargetSample | None) -> ZoomOutParams | None:
        if uniform32(rand) >= self.p:  # torchvision applies it when torch.rand(1) < p
            return None
        low, high = self.sides  # float32 arithmetic, as torchvision's on its float32 torch.rand
        ratio = np.float32(low) + uniform32(rand) * np.float32(high - low)
        canvas_width, canvas_height = times32(width, ratio), times32(height, ratio)
        left = times32(canvas_width - width, uniform32(rand))
        top = times32(canvas_height - height, uniform32(rand))
        return ZoomOutParams((left, top, canvas_width - (left + width), canvas_height - (top + height)))

    def apply_sample(self, image: torch.Tensor, params: ZoomOutParams | None) -> torch.Tensor:
        if params is None:
            return image
        left, top, right, bottom = params.padding
        channels, height, width = image.shape
        out = image.new_zeros((channels, height + top + bottom, width + left + right))
        fill = self.image_fill
        if fill is not None:
            values = [float(fill)] if isinstance(fill, numbers.Real) else [float(v) for v in fill]
            if len(values) not in (1, channels):
                raise ValueError(f"fill {fill!r} has {len(values)} values for an image of "
                                 f"{channels} channels")
            out[:] = torch.tensor(values, dtype=torch.float64).to(image.dtype).view(-1, 1, 1)
        out[:, top:top + height, left:left + width] = image
        return out

    def target_steps(self, params: ZoomOutParams | None, height: int, width: int) -> tuple[Step, ...]:
        return () if params is None else (Pad(*params.padding, fill=self.mask_fill),)

    def __repr__(self) -> str:
        return f"RandomZoomOut(p={self.p}, fill={self.fill}, side_range={self.side_range})"
