"""How a sample's image and its targets travel together through ``datakit.vision``.

A sample is a dict of fields (a field store's: ``{"image": ..., "boxes":
..., "labels": ..., "masks": ...}``) or an ``(image, target)`` pair with
``target`` a dict (torchvision's detection datasets'). Its targets are
torchvision's ``tv_tensors`` (``BoundingBoxes``, ``Mask``, ``KeyPoints``),
recognised by their class names without importing torchvision and rebuilt
through their own classes with their new ``canvas_size``, or plain tensors
that a :class:`TargetLayout` names (what a field store's schema says when
torchvision cannot be imported: the boxes' format, which keys are masks and
keypoints). :class:`TargetSample` reads one, gives its image to the
operations, moves every target through an operation's steps
(:mod:`datakit.vision.targets.steps`) and gives back the same structure with
the same types. Anything else in the sample (labels, ids, captions, a second
image) passes through untouched, as in torchvision.

Masks may also come undecoded (:class:`PlaceableMasks`): a field store's
masks then gather every operation's steps and are decoded once, when the
sample is given back (or an operation reads them), only where the output
shows them. Steps that edit the targets (:class:`~datakit.vision.targets.steps.TargetEdit`:
boxes marked, dropped, clamped, converted) run at their place among the
geometric ones, through the accessors an edit uses (:meth:`TargetSample.boxes_key`,
:meth:`TargetSample.boxes`, :meth:`TargetSample.set_boxes`, :meth:`TargetSample.keep`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from datakit.errors import TransformError
from datakit.vision.targets.boxes import Canvas, check_format
from datakit.vision.targets.steps import (
    Step,
    TargetEdit,
    canvas_after,
    move_boxes,
    move_keypoints,
    move_masks,
)

__all__ = ["TargetLayout", "PlaceableMasks", "TargetSample", "is_placeable", "tv_kind"]

_TV_KINDS = {"BoundingBoxes": "boxes", "Mask": "masks", "KeyPoints": "keypoints", "Image": "image"}


def tv_kind(value: Any) -> str | None:
    """``"boxes"``, ``"masks"``, ``"keypoints"`` or ``"image"`` for torchvision's tv_tensors, else None."""
    if not isinstance(value, torch.Tensor) or type(value) is torch.Tensor:
        return None
    for cls in type(value).__mro__:
        if cls.__module__.startswith("torchvision.tv_tensors") and cls.__name__ in _TV_KINDS:
            return _TV_KINDS[cls.__name__]
    return None


class PlaceableMasks(Protocol):
    """Masks not decoded yet, which decode for a placement only what it shows."""

    def placed(self, source: Canvas, steps: Sequence[Step]) -> Any:
        """The masks (on ``source``) after ``steps``, in the sample's type."""
        ...

    def dense(self) -> Any:
        """The masks, decoded whole, in the sample's type."""
        ...


def is_placeable(value: object) -> bool:
    """Whether ``value`` is :class:`PlaceableMasks` (by its class's methods: ``isinstance`` against a
    runtime-checkable protocol costs tens of microseconds per call, for every field of every sample)."""
    kind = type(value)
    return callable(getattr(kind, "placed", None)) and callable(getattr(kind, "dense", None))


@dataclass(frozen=True)
class TargetLayout:
    """Where a sample's image is, and which of its plain tensors are targets.

    ``tv_tensors`` say what they are themselves; plain tensors are targets
    only when named here. For a pair, the keys are the target dict's.

    Attributes:
        image: the image's key in a dict sample (None for a pair: its first item).
        boxes: ``key -> format`` of plain-tensor boxes (``XYXY``, ``XYWH``, ``CXCYWH``).
        masks: keys of plain-tensor masks (``(N, H, W)`` or ``(H, W)``).
        keypoints: keys of plain-tensor keypoints: ``(..., 2)`` points, or
            ``(..., 3)`` with the visibility last (kept as it is).
        per_box: keys holding one entry per box, in the boxes' order (labels,
            ``iscrowd``, ``area``, ids, instance masks, keypoints and their
            visibility): what dropping a box drops beside it, and what an
            operation that joins boxes (Mosaic, detection MixUp and CutMix)
            keeps aligned with them. Empty: torchvision's rule (the ``labels``
            key, and instance masks).
    """

    image: str | None = None
    boxes: Mapping[str, str] = field(default_factory=dict)
    masks: tuple[str, ...] = ()
    keypoints: tuple[str, ...] = ()
    per_box: tuple[str, ...] = ()


class _Deferred:
    """Masks not decoded yet, with the steps they have taken so far and the instances kept."""

    def __init__(self, masks: PlaceableMasks, source: Canvas) -> None:
        self.masks, self.source = masks, source
        self.steps: tuple[Step, ...] = ()
        self.kept: torch.Tensor | None = None  # the indices of the instances kept

    def then(self, steps: Sequence[Step]) -> _Deferred:
        self.steps += tuple(steps)
        return self

    def dense(self) -> Any:
        masks = self.masks.placed(self.source, self.steps) if self.steps else self.masks.dense()
        if self.kept is None:
            return masks
        kept = masks.as_subclass(torch.Tensor)[self.kept]
        return kept if type(masks) is torch.Tensor else type(masks)(kept)


class TargetSample:
    """One sample, its image and its targets: read, moved, given back in the same structure.

    Args:
        sample: a dict sample, or an ``(image, target)`` pair (tuple or list).
        layout: where the image is and which plain tensors are targets.

    Raises:
        TypeError: a sample of another shape, or a dict without ``layout.image``.
    """

    def __init__(self, sample: Any, layout: TargetLayout) -> None:
        self.layout = layout
        self.formats = dict(layout.boxes)  # of the plain boxes, as ConvertBoundingBoxFormat leaves them
        self._pair: type | None = None
        self._fields: dict[str, Any] | None = None
        self._other: Any = None
        self._read(sample)

    def _read(self, sample: Any) -> None:
        if isinstance(sample, dict):
            if self.layout.image not in sample:
                raise TypeError(f"the sample has no image under {self.layout.image!r} (its keys: "
                                f"{', '.join(map(str, sample))})")
            self._pair, self._fields, self._image = None, sample, sample[self.layout.image]
        elif isinstance(sample, (tuple, list)) and len(sample) == 2:
            self._pair, self._image = type(sample), sample[0]
            self._fields = sample[1] if isinstance(sample[1], dict) else None
            self._other = sample[1]
        else:
            raise TypeError(f"a sample with targets is a dict or an (image, target) pair, not a "
                            f"{type(sample).__name__}")

    @property
    def image(self) -> Any:
        """The sample's image."""
        return self._image

    @image.setter
    def image(self, image: Any) -> None:
        if tv_kind(self._image) == "image" and tv_kind(image) is None and isinstance(image, torch.Tensor):
            image = type(self._image)(image)  # keep torchvision's Image type, as its transforms do
        self._image = image

    @property
    def annotated(self) -> bool:
        """Whether the sample holds boxes, masks or keypoints."""
        named = {*self.layout.boxes, *self.layout.masks, *self.layout.keypoints}
        return self._fields is not None and any(
            isinstance(value, _Deferred) or is_placeable(value)
            or tv_kind(value) in ("boxes", "masks", "keypoints")
            or (key in named and isinstance(value, torch.Tensor)) for key, value in self._fields.items())

    def take(self, result: Any, what: str) -> None:
        """Read the sample again from ``result``, what an operation given the whole sample returned.

        Raises:
            TypeError: ``result`` is not a sample of the same kind; the message names ``what``.
        """
        if isinstance(result, dict) != (self._pair is None):
            kind = "a dict" if self._pair is None else "an (image, target) pair"
            raise TypeError(f"{what} was given {kind} and returned a {type(result).__name__}: given a "
                            "whole sample, an operation returns the whole sample")
        self._read(result)

    def move(self, steps: Sequence[Step], source: Canvas) -> None:
        """Move every target through ``steps`` from the image's canvas ``source``; edits
        (:class:`TargetEdit`) run at their place. Undecoded masks only gather the steps."""
        if self._fields is None:
            return
        segment: list[Step] = []
        for step in steps:
            if isinstance(step, TargetEdit):
                self._move_all(segment, source)
                source, segment = canvas_after(source, segment), []
                step.edit(self, source)
            else:
                segment.append(step)
        self._move_all(segment, source)

    def _move_all(self, steps: Sequence[Step], source: Canvas) -> None:
        assert self._fields is not None
        for key, value in list(self._fields.items()):
            moved = self._moved(key, value, steps, source)
            if moved is not value:
                self._fields[key] = moved

    def _moved(self, key: str, value: Any, steps: Sequence[Step], source: Canvas) -> Any:
        if isinstance(value, _Deferred):
            return value.then(steps)
        if is_placeable(value):
            return _Deferred(value, source).then(steps)
        if not steps:
            return value
        kind = tv_kind(value)
        if kind == "boxes":
            return _move_tv_boxes(key, value, steps, source)
        if kind == "masks":
            return type(value)(move_masks(value.as_subclass(torch.Tensor), steps))
        if kind == "keypoints":
            canvas = _canvas_of(key, value, source)
            points, canvas = move_keypoints(value.as_subclass(torch.Tensor), canvas, steps)
            return type(value)(points, canvas_size=canvas)
        if kind is not None or not isinstance(value, torch.Tensor):
            return value
        if key in self.formats:
            return move_boxes(value, self.formats[key], source, steps)[0]
        if key in self.layout.masks:
            return move_masks(value, steps)
        if key in self.layout.keypoints:
            return _move_plain_points(value, steps, source)
        return value

    @property
    def fields(self) -> dict[str, Any] | None:
        """The sample's dict (a pair's target dict), every mask decoded; None for a pair whose target is
        not a dict."""
        self._settle()
        return self._fields

    def _settle(self) -> None:
        """Decode the masks that gathered steps, where the output shows them."""
        for key, value in list((self._fields or {}).items()):
            if isinstance(value, _Deferred):
                self._fields[key] = value.dense()  # type: ignore[index]

    def boxes_key(self) -> str | None:
        """The key of the sample's boxes (the first ``BoundingBoxes``, or plain boxes the layout names),
        None when it has none."""
        keys = self.boxes_keys()
        return keys[0] if keys else None

    def boxes_keys(self) -> list[str]:
        """The keys of every boxes entry of the sample (``BoundingBoxes``, or plain ones the layout names)."""
        return [key for key, value in (self._fields or {}).items()
                if tv_kind(value) == "boxes" or (key in self.formats and isinstance(value, torch.Tensor))]

    def boxes(self, key: str) -> tuple[torch.Tensor, str, str | None]:
        """The boxes under ``key``: a plain tensor, their format and their clamping mode."""
        assert self._fields is not None
        value = self._fields[key]
        if tv_kind(value) == "boxes":
            return (value.as_subclass(torch.Tensor), str(getattr(value.format, "name", value.format)),
                    getattr(value, "clamping_mode", "soft"))
        return value, self.formats[key], "soft"

    def set_boxes(self, key: str, coords: torch.Tensor, format: str | None = None) -> None:
        """Replace the boxes under ``key`` by ``coords`` (in ``format``, default theirs), in their type."""
        assert self._fields is not None
        value = self._fields[key]
        if tv_kind(value) != "boxes":
            self._fields[key] = coords
            self.formats[key] = check_format(format or self.formats[key])
            return
        extra = {"clamping_mode": value.clamping_mode} if hasattr(value, "clamping_mode") else {}
        new_format = value.format if format is None else type(value.format)[check_format(format)]
        self._fields[key] = type(value)(coords, format=new_format, canvas_size=value.canvas_size, **extra)

    def per_box_keys(self, key: str, labels: bool = True) -> list[str]:
        """The keys dropping a box of ``key`` drops beside it: the layout's per-box entries, or where it
        names none, torchvision's labels (the ``labels`` key, else one whose name holds ``label``);
        and every instance ``Mask`` with one plane per box. ``labels=False``: the masks only.

        Raises:
            TransformError: the layout names no per-box entries and no key looks like labels (as
                torchvision's default ``labels_getter`` raises).
        """
        assert self._fields is not None
        count = int(self._fields[key].shape[0])
        keys = [name for name in self.layout.per_box if name in self._fields and name != key
                and (labels or name in self.layout.masks)]
        if labels and not self.layout.per_box:
            names = [name for name in self._fields if isinstance(name, str)]
            label = next((name for name in names if name.lower() == "labels"), None) or \
                next((name for name in names if "label" in name.lower()), None)
            if label is None:
                raise TransformError(f"no labels beside the boxes {key!r} (no key named like 'labels' among "
                                     f"{', '.join(map(repr, names))}): pass labels_getter=None, a key or a "
                                     "callable")
            keys.append(label)
        for name, value in self._fields.items():
            if name not in keys and name != key and _instance_masks(value, count):
                keys.append(name)
        return keys

    def keep(self, kept: torch.Tensor, keys: Iterable[str]) -> None:
        """Keep the entries ``kept`` (a bool tensor, one per box) of each of ``keys``, in their types.

        Raises:
            TransformError: an entry does not hold one item per box (named).
        """
        assert self._fields is not None
        count = int(kept.shape[0])
        for key in keys:
            value = self._fields[key]
            length = len(value) if not isinstance(value, _Deferred) else None
            if length is not None and length != count:
                raise TransformError(f"{key!r} holds {length} entries beside {count} boxes: it cannot be "
                                     "kept or dropped with them")
            self._fields[key] = _kept(value, kept)

    def value(self) -> Any:
        """The sample in the structure it was read in, with its image and moved targets (masks decoded)."""
        self._settle()
        if self._pair is None:
            assert self._fields is not None and self.layout.image is not None
            self._fields[self.layout.image] = self._image
            return self._fields
        target = self._fields if self._fields is not None else self._other
        return self._pair((self._image, target))


def _canvas_of(key: str, value: Any, source: Canvas) -> Canvas:
    """A tv_tensor's own canvas, which must be the image's the steps start from."""
    canvas = (int(value.canvas_size[0]), int(value.canvas_size[1]))
    if canvas != tuple(source):
        raise ValueError(f"{key!r} lies on a canvas of {canvas[1]}x{canvas[0]}, the image it moves with "
                         f"is {source[1]}x{source[0]}")
    return canvas


def _move_tv_boxes(key: str, boxes: Any, steps: Sequence[Step], source: Canvas) -> Any:
    canvas = _canvas_of(key, boxes, source)
    format = getattr(boxes.format, "name", boxes.format)
    mode = getattr(boxes, "clamping_mode", "soft")
    moved, canvas = move_boxes(boxes.as_subclass(torch.Tensor), format, canvas, steps, mode)
    extra = {"clamping_mode": mode} if hasattr(boxes, "clamping_mode") else {}
    return type(boxes)(moved, format=boxes.format, canvas_size=canvas, **extra)


def _move_plain_points(points: torch.Tensor, steps: Sequence[Step], source: Canvas) -> torch.Tensor:
    if points.shape[-1] == 2:
        return move_keypoints(points, source, steps)[0]
    moved = move_keypoints(points[..., :2], source, steps)[0]
    return torch.cat((moved, points[..., 2:]), dim=-1)


def _instance_masks(value: Any, count: int) -> bool:
    """Whether ``value`` is a ``Mask`` of ``count`` instances, ``(N, H, W)`` (a store's masks not decoded yet
    are named by the layout)."""
    return (not isinstance(value, _Deferred) and tv_kind(value) == "masks" and value.ndim == 3
            and int(value.shape[0]) == count)


def _kept(value: Any, kept: torch.Tensor) -> Any:
    """The entries ``kept`` of a per-box value: a tensor (its type kept), a list, or masks not decoded yet."""
    if isinstance(value, _Deferred):
        value.kept = kept.nonzero().flatten() if value.kept is None else value.kept[kept]
        return value
    if isinstance(value, list):
        return [item for item, keep in zip(value, kept.tolist(), strict=True) if keep]
    if not isinstance(value, torch.Tensor):
        raise TransformError(f"a {type(value).__name__} cannot be kept or dropped with boxes")
    kind = tv_kind(value)
    plain = value.as_subclass(torch.Tensor)[kept]
    typed: Any = value
    if kind == "boxes":
        extra = {"clamping_mode": typed.clamping_mode} if hasattr(typed, "clamping_mode") else {}
        return type(typed)(plain, format=typed.format, canvas_size=typed.canvas_size, **extra)
    if kind == "keypoints":
        return type(typed)(plain, canvas_size=typed.canvas_size)
    return plain if kind is None else type(typed)(plain)
