"""Per-field statistics: measured as each record is written, kept in the manifest for ``datakit inspect``.

A reader process measures each sample's fields (:func:`measure`: a few
numbers per field, never the values), the conversion adds them into the
running totals (:func:`merge`) that every commit carries, and the manifest
keeps the totals: boxes per image (a histogram), boxes per category, box
sizes in COCO's small / medium / large areas, boxes outside their image or
of no size, crowd boxes, boxes ``--boxes clip`` clipped or ``--boxes drop``
dropped; caption lengths (a histogram in characters); mask instances and
the share of the image they cover; visible keypoints; the smallest and
largest number of a numeric field; samples without a value.
:func:`check_field_stats` holds totals read from a store to their kinds and
sizes, as every manifest number is held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from datakit.format.fields.base import FieldSpec
from datakit.format.fields.boxes import BoxesValue
from datakit.format.fields.masks import MasksValue

__all__ = ["measure", "merge", "check_field_stats", "length_bucket", "COCO_AREAS", "MAX_KEYS"]

COCO_AREAS = (32 * 32, 96 * 96)
"""COCO's small / medium / large thresholds of a box's area, in pixels."""
MAX_KEYS = 10_000
"""The most entries of one histogram kept in a manifest (categories beyond it are not counted)."""
_SUMS = ("count", "small", "medium", "large", "outside", "degenerate", "crowd", "instances", "visible",
         "null", "chars", "clipped", "dropped")


def length_bucket(length: int) -> int:
    """A caption length's histogram bucket: itself up to 256 characters, then its power of two."""
    return length if length <= 256 else 1 << (length - 1).bit_length()


def measure(spec: FieldSpec, value: Any, canvas: tuple[int, int] | None) -> dict[str, Any]:
    """The numbers one sample's ``value`` of ``spec`` adds to the field's totals."""
    if value is None:
        return {"null": 1}
    if spec.type == "boxes" and isinstance(value, BoxesValue):
        return _boxes(value, spec.options["format"], canvas)
    if spec.type == "str":
        return {"chars": len(value), "lengths": {str(length_bucket(len(value))): 1}}
    if spec.type in ("int", "float") and not (isinstance(value, float) and math.isnan(value)):
        return {"min": value, "max": value}
    if spec.type == "masks" and isinstance(value, MasksValue) and canvas is not None:
        area = canvas[0] * canvas[1]
        covered = sum(int(runs[1::2].sum()) for runs in value.runs)
        return {"instances": len(value), "coverage": covered / area if area else 0.0}
    if spec.type == "keypoints":
        points = np.asarray(value)
        return {"instances": int(points.shape[0]), "visible": int((points[..., 2] > 0).sum())}
    return {}


def _boxes(value: BoxesValue, format: str, canvas: tuple[int, int] | None) -> dict[str, Any]:
    coords = np.asarray(value.coords, dtype=np.float64)
    if format == "XYWH":
        x1, y1, width, height = coords.T
    elif format == "XYXY":
        x1, y1 = coords[:, 0], coords[:, 1]
        width, height = coords[:, 2] - x1, coords[:, 3] - y1
    else:
        width, height = coords[:, 2], coords[:, 3]
        x1, y1 = coords[:, 0] - width / 2, coords[:, 1] - height / 2
    with np.errstate(invalid="ignore"):
        degenerate = ~(np.isfinite(coords).all(axis=1) & (width > 0) & (height > 0))
        area = np.where(degenerate, 0.0, width * height)
        outside = np.zeros(len(value), dtype=bool)
        if canvas is not None:
            beyond = (x1 + width > canvas[1]) | (y1 + height > canvas[0])
            outside = ~degenerate & ((x1 < 0) | (y1 < 0) | beyond)
    found: dict[str, Any] = {
        "count": len(value), "per_image": {str(len(value)): 1},
        "small": int((~degenerate & (area < COCO_AREAS[0])).sum()),
        "medium": int((~degenerate & (area >= COCO_AREAS[0]) & (area < COCO_AREAS[1])).sum()),
        "large": int((~degenerate & (area >= COCO_AREAS[1])).sum()),
        "outside": int(outside.sum()), "degenerate": int(degenerate.sum())}
    if value.labels is not None:
        ids, counts = np.unique(value.labels, return_counts=True)
        found["categories"] = {str(int(label)): int(count) for label, count in zip(ids, counts, strict=True)}
    if value.iscrowd is not None:
        found["crowd"] = int(np.count_nonzero(value.iscrowd))
    return found


def merge(totals: dict[str, Any], measured: Mapping[str, Any]) -> None:
    """Add one sample's measurements into a field's running ``totals`` (in place)."""
    for key, value in measured.items():
        if key in _SUMS:
            totals[key] = totals.get(key, 0) + value
        elif key == "coverage":
            totals["coverage_sum"] = totals.get("coverage_sum", 0.0) + value
        elif key == "min":
            totals[key] = value if key not in totals else min(totals[key], value)
        elif key == "max":
            totals[key] = value if key not in totals else max(totals[key], value)
        elif isinstance(value, Mapping):
            histogram = totals.setdefault(key, {})
            for bucket, count in value.items():
                if bucket in histogram or len(histogram) < MAX_KEYS:
                    histogram[bucket] = histogram.get(bucket, 0) + count


def check_field_stats(stats: Any, names: set[str]) -> str | None:
    """Why ``stats`` (a manifest's ``stats.fields``) is not well formed, or ``None`` when it is."""
    if not isinstance(stats, dict) or not set(stats) <= names:
        return "it is not an object of the schema's fields"
    for name, totals in stats.items():
        if not isinstance(totals, dict):
            return f"field {name!r} has no object of totals"
        for key, value in totals.items():
            if isinstance(value, dict):
                if len(value) > MAX_KEYS or not all(isinstance(bucket, str) and type(count) is int
                                                    and count >= 0 for bucket, count in value.items()):
                    return f"{name}.{key} is not a histogram of counts"
            elif key in _SUMS:
                if type(value) is not int or value < 0:
                    return f"{name}.{key} is not a count"
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"{name}.{key} is not a finite number"
    return None
