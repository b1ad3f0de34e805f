"""``keypoints`` fields: N instances of K points, each ``(x, y, visibility)``, on an image's canvas.

COCO's ``person_keypoints`` give 17 named points per person, ``v`` 0 (not
labelled), 1 (labelled, not visible) or 2 (visible). The schema gives the
``image`` they lie on and, optionally, the points' ``names`` (then K is their
number) and the ``skeleton`` (pairs of 1-based point numbers, as COCO's), and the ``boxes``
field whose instances they are (one row per box, in order), or ``null``.
A value is ``<II`` N and K, then N x K x 3 float32 values.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType, unpack

__all__ = ["KeypointsField"]

_SIZES = struct.Struct("<II")
MAX_POINTS = 4096


class KeypointsField(FieldType):
    """Keypoints of instances: a float32 ``(N, K, 3)`` array."""

    name = "keypoints"
    on_canvas = True
    option_names = frozenset({"image", "names", "skeleton", "boxes"})

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().check_options(options)
        names = checked.setdefault("names", None)
        if names is not None and not (isinstance(names, list) and len(names) <= MAX_POINTS
                                      and all(isinstance(name, str) for name in names)):
            raise FieldError(f"names must be a list of at most {MAX_POINTS} point names, not {names!r:.60}")
        checked.setdefault("boxes", None)
        skeleton = checked.setdefault("skeleton", None)
        if skeleton is not None and not (isinstance(skeleton, list) and all(
                isinstance(pair, list) and len(pair) == 2 and all(type(end) is int for end in pair)
                for pair in skeleton)):
            raise FieldError(f"skeleton must be a list of [from, to] point numbers, not {skeleton!r:.60}")
        return checked

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        points = np.asarray(value, dtype=np.float64)
        if points.ndim != 3 or points.shape[2] != 3:
            raise FieldError(f"keypoints are N x K x 3 (x, y, visibility), not {list(points.shape)}")
        self._check_count(points.shape[1], spec)
        return _SIZES.pack(points.shape[0], points.shape[1]) + points.astype("<f4").tobytes()

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> np.ndarray:
        count, points = unpack(_SIZES, data, 0, "keypoints")
        self._check_count(points, spec)
        if _SIZES.size + count * points * 12 != len(data):
            raise FieldError(f"{count} x {points} keypoints need {count * points * 12} bytes, not "
                             f"{len(data) - _SIZES.size}")
        return np.frombuffer(data[_SIZES.size:], dtype="<f4").reshape(count, points, 3).astype(np.float32)

    @staticmethod
    def _check_count(points: int, spec: FieldSpec) -> None:
        names = spec.options["names"]
        if names is not None and points != len(names):
            raise FieldError(f"{points} points per instance where the field names {len(names)}")
        if points > MAX_POINTS:
            raise FieldError(f"{points} points per instance is more than {MAX_POINTS}")
