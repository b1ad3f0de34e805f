"""torchvision v2's ``RandomIoUCrop`` (SSD): a crop that overlaps at least one box by a drawn IoU.

The draw is torchvision's loop: pick one of ``sampler_options`` uniformly (an
option of 1.0 or more leaves the sample as it is); then up to ``trials``
times draw the crop's width and height fractions uniformly in ``[min_scale,
max_scale]`` (``int(w * r)``), skip it unless its aspect ratio is within
``[min_aspect_ratio, max_aspect_ratio]``, draw its corner uniformly in the
room left, skip a crop of no area, skip it unless some box's centre lies
strictly inside it, and keep it when one of those boxes overlaps it by at
least the option's IoU; after ``trials`` failures pick an option again. The
boxes are the sample's as they are at this step (after a zoom-out before it).

The crop moves every target (:class:`~datakit.vision.targets.steps.Crop`);
then the boxes whose centre lay outside the crop are set to zeros
(:class:`MarkOutside`), as torchvision marks them for a later
``SanitizeBoundingBoxes`` to remove; the entries beside them stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from datakit.errors import TransformError
from datakit.vision.randomness import SampleRandom
from datakit.vision.ssd.canvas_op import CanvasOp, times32, uniform32
from datakit.vision.targets.boxes import Canvas, convert_format
from datakit.vision.targets.sample import TargetSample
from datakit.vision.targets.steps import Crop, Step, TargetEdit

__all__ = ["RandomIoUCrop", "IoUCropParams", "MarkOutside", "box_iou"]


@dataclass(frozen=True)
class IoUCropParams:
    """One sample's crop (torchvision's ``top``, ``left``, ``height``, ``width``) and which boxes have
    their centre inside it (``is_within_crop_area``)."""

    top: int
    left: int
    height: int
    width: int
    inside: torch.Tensor = field(compare=False)


class MarkOutside(TargetEdit):
    """Sets the boxes not ``inside`` to zeros, in their format and type (torchvision's marking)."""

    def __init__(self, inside: torch.Tensor) -> None:
        self.inside = inside

    def edit(self, sample: Any, canvas: Canvas) -> None:
        key = sample.boxes_key()
        if key is None:
            return
        coords, _, _ = sample.boxes(key)
        marked = coords.clone()
        marked[~self.inside] = 0
        sample.set_boxes(key, marked)


def box_iou(boxes: np.ndarray, crop: np.ndarray) -> np.ndarray:
    """The IoU of each ``(N, 4)`` XYXY box with the ``(4,)`` crop, in their dtype: torchvision's
    ``box_iou``, the same float32 operations in the same order (NumPy: a trial of the loop costs a few
    microseconds instead of torch's dozens per call)."""
    area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area2 = (crop[2] - crop[0]) * (crop[3] - crop[1])
    sides = np.maximum(np.minimum(boxes[:, 2:], crop[2:]) - np.maximum(boxes[:, :2], crop[:2]), 0)
    inter = sides[:, 0] * sides[:, 1]
    result: np.ndarray = inter / (area1 + area2 - inter)
    return result


class RandomIoUCrop(CanvasOp):
    """SSD's IoU crop: torchvision's ``RandomIoUCrop`` (the same loop and acceptance), per sample.

    Args:
        min_scale, max_scale: range of the crop's side as a fraction of the image's.
        min_aspect_ratio, max_aspect_ratio: range of the crop's width / height.
        sampler_options: the minimal IoUs to pick from; None is
            ``[0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]``.
        trials: crops tried per option picked.

    Raises:
        TypeError: run on a sample without boxes (torchvision's message).
    """

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None,
                 trials: int = 40) -> None:
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio, self.max_aspect_ratio = float(min_aspect_ratio), float(max_aspect_ratio)
        options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else list(sampler_options)
        if not options:
            raise ValueError("sampler_options is empty: give at least one minimal IoU")
        if all(option < 1.0 for option in options) and trials < 1:
            raise ValueError("RandomIoUCrop with trials < 1 and no option of 1.0 would never end")
        self.options = [float(option) for option in options]
        self.trials = int(trials)

    def draw_sample(self, rand: SampleRandom, height: int, width: int,
                    target: TargetSample | None) -> IoUCropParams | None:
        key = None if target is None else target.boxes_key()
        if target is None or key is None:
            raise TypeError(f"{type(self).__name__}() requires input sample to contain tensor or PIL images "
                            "and bounding boxes. Sample can also contain masks.")
        coords, format, _ = target.boxes(key)
        corners = convert_format(coords, format, "XYXY")
        centre_x = (0.5 * (corners[..., 0] + corners[..., 2])).numpy()  # torch's dtype: float32 for ints
        centre_y = (0.5 * (corners[..., 1] + corners[..., 3])).numpy()
        # integer boxes: their IoU in float32, as torch divides them (exact below 2**24 px of area)
        xyxy = corners.numpy() if corners.is_floating_point() else corners.to(torch.float32).numpy()
        reachable = (centre_x > 0) & (centre_x < width) & (centre_y > 0) & (centre_y < height)
        if not bool(reachable.any()) and all(option < 1.0 for option in self.options):
            raise TransformError(f"{self!r} found no box centred inside the {width}x{height} image and has "
                                 "no option of 1.0: its loop would never end (torchvision's hangs); "
                                 "drop such samples first or add 1.0 to sampler_options")
        while True:
            minimal = self.options[rand.integers(0, len(self.options))]
            if minimal >= 1.0:  # the option that leaves the sample as it is
                return None
            for _ in range(self.trials):
                drawn = self._try(rand, height, width, xyxy, centre_x, centre_y, minimal)
                if drawn is not None:
                    return drawn

    def _try(self, rand: SampleRandom, height: int, width: int, corners: np.ndarray,
             centre_x: np.ndarray, centre_y: np.ndarray, minimal: float) -> IoUCropParams | None:
        """One trial of torchvision's loop: the crop, or None where it is refused."""
        low, span = np.float32(self.min_scale), np.float32(self.max_scale - self.min_scale)
        new_w = times32(width, low + span * uniform32(rand))  # float32, as torchvision's torch.rand(2)
        new_h = times32(height, low + span * uniform32(rand))
        if new_h == 0 or not self.min_aspect_ratio <= new_w / new_h <= self.max_aspect_ratio:
            return None
        left = times32(width - new_w, uniform32(rand))
        top = times32(height - new_h, uniform32(rand))
        right, bottom = left + new_w, top + new_h
        if left == right or top == bottom:
            return None
        inside = (left < centre_x) & (centre_x < right) & (top < centre_y) & (centre_y < bottom)
        if not inside.any():
            return None
        crop = np.array([left, top, right, bottom], dtype=corners.dtype)
        if box_iou(corners[inside], crop).max() < minimal:
            return None
        return IoUCropParams(top, left, new_h, new_w, torch.from_numpy(inside))

    def apply_sample(self, image: torch.Tensor, params: IoUCropParams | None) -> torch.Tensor:
        if params is None:
            return image
        return image[:, params.top:params.top + params.height, params.left:params.left + params.width]

    def target_steps(self, params: IoUCropParams | None, height: int, width: int) -> tuple[Step, ...]:
        if params is None:
            return ()
        return (Crop(params.top, params.left, params.height, params.width), MarkOutside(params.inside))

    def __repr__(self) -> str:
        return (f"RandomIoUCrop(min_scale={self.min_scale}, max_scale={self.max_scale}, "
                f"min_aspect_ratio={self.min_aspect_ratio}, max_aspect_ratio={self.max_aspect_ratio}, "
                f"options={self.options}, trials={self.trials})")
