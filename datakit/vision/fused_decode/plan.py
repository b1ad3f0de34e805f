"""Which leading operations of a ``datakit.vision`` pipeline run inside decoding, and in which order.

The fused decoder runs them in one order: a crop or resize, a flip,
``Normalize``. The fused forms are ``RandomResizedCrop``; ``Resize`` (or one of
the random resizes that subclass it, :mod:`datakit.vision.random_resize`,
whose size is drawn per sample), optionally followed by
``CenterCrop`` or ``RandomCrop``; ``CenterCrop`` or ``RandomCrop`` alone;
each optionally followed by ``RandomHorizontalFlip``, then ``Normalize``
(which the dataset or the loader applies per batch). Anything else ends the
fused prefix (:mod:`datakit.vision.recipe`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from datakit.vision.random_crop import RandomCrop
from datakit.vision.transforms import (
    CenterCrop,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    Transform,
)

__all__ = ["FusedPlan", "compile_transform", "fused_only"]


@dataclass(frozen=True)
class FusedPlan:
    """A pipeline in the one order the fused decoder runs: crop/resize, flip, normalise.

    Attributes:
        crop: the random resized crop, if any (then ``resize``, ``center`` and
            ``random_crop`` are None).
        resize: the resize, if any.
        center: the centre crop, if any (after ``resize``).
        flip: probability of a horizontal flip.
        normalize: the per-batch normalisation, if any.
        random_crop: the random crop of a fixed size, if any (after
            ``resize``; never with ``center``).
        flip_first: the flip comes before ``center`` or ``random_crop``, as
            in the segmentation reference (``RandomResize``, flip,
            ``RandomCrop``): it is drawn first, and the crop is drawn in the
            flipped image, as torchvision draws them.
    """

    crop: RandomResizedCrop | None = None
    resize: Resize | None = None
    center: CenterCrop | None = None
    flip: float = 0.0
    normalize: Normalize | None = None
    random_crop: RandomCrop | None = None
    flip_first: bool = False

    def output_shape(self) -> tuple[int, int, int] | None:
        """``(3, H, W)`` when every sample comes out the same size, else None."""
        for fixed in (self.crop, self.center, self.random_crop):
            if fixed is not None:
                return (3, *fixed.size)
        if self.resize is not None and isinstance(self.resize.size, tuple):
            return (3, *self.resize.size)
        return None

    def operations(self) -> list[str]:
        """What runs, as the user wrote it (for :meth:`Recipe.describe`)."""
        flip = [f"RandomHorizontalFlip(p={self.flip})"] * bool(self.flip)
        crops = [repr(op) for op in (self.center, self.random_crop) if op is not None]
        ops = [repr(op) for op in (self.crop, self.resize) if op is not None]
        return ops + (flip + crops if self.flip_first else crops + flip)


_ORDER = ("Fused pipelines are [RandomResizedCrop | Resize, CenterCrop | RandomCrop], RandomHorizontalFlip, "
          "Normalize, in that order, each at most once (the flip may also come before CenterCrop or "
          "RandomCrop).")


def compile_transform(transform: object) -> FusedPlan | None:
    """The fused form of a ``datakit.vision`` transform, or None for any other callable.

    Raises:
        ValueError: a ``datakit.vision`` pipeline the fused decoder cannot
            run, naming what to change (for example ``Normalize`` before the end).
    """
    if not isinstance(transform, Transform):
        return None
    steps = transform.transforms if isinstance(transform, Compose) else [transform]
    found: dict[str, object] = {}
    for position, step in enumerate(steps):
        role, why = _role(step, found)
        if why is not None:
            raise ValueError(f"datakit.vision cannot fuse {step!r} at position {position} of {transform!r}: "
                             f"{why}. {_ORDER}")
        found[role] = step
    flip = _one(found, "flip", RandomHorizontalFlip)
    roles = list(found)
    after_flip = roles[roles.index("flip"):] if "flip" in roles else []
    flip_first = "center" in after_flip or "random_crop" in after_flip
    return FusedPlan(_one(found, "crop", RandomResizedCrop), _one(found, "resize", Resize),
                     _one(found, "center", CenterCrop), flip.p if flip is not None else 0.0,
                     _one(found, "normalize", Normalize), _one(found, "random_crop", RandomCrop), flip_first)


_Op = TypeVar("_Op")


def _one(found: dict[str, object], role: str, kind: type[_Op]) -> _Op | None:
    value = found.get(role)
    return value if isinstance(value, kind) else None


_ROLES: dict[type, str] = {RandomResizedCrop: "crop", Resize: "resize", CenterCrop: "center",
                           RandomCrop: "random_crop", RandomHorizontalFlip: "flip", Normalize: "normalize"}


def _role(step: object, found: dict[str, object]) -> tuple[str, str | None]:
    """``step``'s role in a fused pipeline, and why it cannot come after the ``found`` ones (or None)."""
    role = next((name for kind, name in _ROLES.items() if isinstance(step, kind)), "")
    earlier = set(found)
    why: str | None = None
    if "normalize" in found:
        why = "Normalize must come last"
    elif not role:
        why = "not an operation the decoder runs"
    elif role == "crop" and earlier:
        why = "RandomResizedCrop must come first and alone among the crops and resizes"
    elif role == "resize" and earlier:
        why = "Resize must come before CenterCrop, RandomCrop and the flip, once"
    elif role in ("center", "random_crop") and earlier & {"crop", "center", "random_crop"}:
        why = f"{type(step).__name__} goes after Resize, once"
    elif role == "flip" and "flip" in earlier:
        why = "one flip only"
    elif role == "normalize" and len(getattr(step, "mean", ())) != 3:
        why = "the fused pipelines make RGB images: Normalize needs three means and stds"
    return role, why


def fused_only(op: object) -> bool:
    """Whether ``op`` runs only inside decoding (a crop, resize or flip of the fused prefix): called on a
    whole sample (a dict, an ``(image, target)`` pair) it would fail, so outside the prefix a pipeline
    given whole samples refuses it."""
    return isinstance(op, tuple(_ROLES)) and not isinstance(op, Normalize)
