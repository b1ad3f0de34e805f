"""What ``datakit inspect`` says of each field: the manifest's totals turned into figures a person reads.

A conversion keeps running totals per field in the manifest's ``stats.fields``
(:mod:`datakit.format.fields.stats`): counts, and histograms of boxes per
image and of caption lengths. Here they become what one asks of a dataset
before training on it: how many boxes an image has (least, median, most),
how large they are (COCO's small / medium / large), which categories and how
often, how many ``--boxes clip`` clipped or ``--boxes drop`` dropped, how
long the captions are (percentiles, in characters), how much of an image the
masks cover, how many keypoints are labelled, the range of a number, and how
many samples have no value. Nothing is read but the manifest, so this costs
nothing on a store of any size. Percentiles are nearest-rank over the
histogram; caption lengths past 256 characters are kept by powers of two, so
a percentile past 256 is an upper bound (``lengths_exact_to``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from datakit.format.fields.base import FieldSpec
from datakit.format.fields.schema import Schema

__all__ = ["field_summaries", "percentile", "schema_words", "EXACT_LENGTHS"]

EXACT_LENGTHS = 256
"""Caption lengths up to this many characters are counted exactly; longer ones by their power of two."""


def field_summaries(schema: Schema, totals: Mapping[str, Mapping[str, Any]],
                    length: int) -> dict[str, dict[str, Any]]:
    """Each field's figures, by name, for every field but the primary image and the label (whose
    figures are the store's own: sizes, formats, class counts).

    Args:
        schema: the store's fields.
        totals: the manifest's ``stats.fields`` (checked when the store opened).
        length: the store's records.
    """
    found: dict[str, dict[str, Any]] = {}
    for spec in schema.fields:
        if spec is schema.primary_image or spec.type == "label":
            continue
        counted = totals.get(spec.name, {})
        missing = int(counted.get("null", 0))
        summary: dict[str, Any] = {"type": spec.type, "values": length - missing, "null": missing}
        summary.update(_figures(spec, counted, length - missing))
        found[spec.name] = summary
    return found


def _figures(spec: FieldSpec, counted: Mapping[str, Any], values: int) -> dict[str, Any]:
    if spec.type == "boxes":
        return _boxes(spec, counted)
    if spec.type == "str":
        lengths = _histogram(counted.get("lengths", {}))
        return {"chars": int(counted.get("chars", 0)), "length": _spread(lengths, counted.get("chars", 0)),
                "lengths_exact_to": EXACT_LENGTHS}
    if spec.type in ("int", "float"):
        return {"min": counted.get("min"), "max": counted.get("max")}
    if spec.type == "masks" and spec.options.get("kind") == "instances":
        coverage = float(counted.get("coverage_sum", 0.0))
        return {"instances": int(counted.get("instances", 0)),
                "mean_coverage": round(coverage / values, 6) if values else None}
    if spec.type == "keypoints":
        names = spec.options.get("names")
        return {"instances": int(counted.get("instances", 0)), "visible": int(counted.get("visible", 0)),
                "points": len(names) if names is not None else None}
    return {}


def _boxes(spec: FieldSpec, counted: Mapping[str, Any]) -> dict[str, Any]:
    per_image = _histogram(counted.get("per_image", {}))
    names = {category["id"]: category["name"] for category in spec.options.get("categories") or []}
    by_label = sorted(((int(label), count) for label, count in counted.get("categories", {}).items()
                       if _integer(label)), key=lambda item: (-item[1], item[0]))
    return {
        "boxes": int(counted.get("count", 0)),
        "per_image": _spread(per_image, counted.get("count", 0)),
        "images_without": per_image.get(0, 0),
        "sizes": {size: int(counted.get(size, 0)) for size in ("small", "medium", "large")},
        "outside": int(counted.get("outside", 0)),
        "degenerate": int(counted.get("degenerate", 0)),
        "crowd": int(counted.get("crowd", 0)),
        "clipped": int(counted.get("clipped", 0)),
        "dropped": int(counted.get("dropped", 0)),
        "categories": [{"id": label, "name": names.get(label), "boxes": count} for label, count in by_label],
    }


def _integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _histogram(raw: Mapping[str, int]) -> dict[int, int]:
    """A manifest histogram (text buckets) as integer buckets, dropping any that is not a number."""
    return {int(bucket): int(count) for bucket, count in raw.items() if _integer(bucket)}


def _spread(histogram: Mapping[int, int], total: float) -> dict[str, Any] | None:
    """Least, 5th percentile, median, 95th percentile, most and mean of a histogram (None: empty)."""
    count = sum(histogram.values())
    if not count:
        return None
    return {"min": min(histogram), "p5": percentile(histogram, 0.05), "median": percentile(histogram, 0.5),
            "p95": percentile(histogram, 0.95), "max": max(histogram), "mean": round(total / count, 3)}


def percentile(histogram: Mapping[int, int], share: float) -> int:
    """The nearest-rank percentile of the values a histogram counts: the least bucket at or below which
    at least ``share`` of them lie (``share`` 0.5: the median, the lower one for an even count)."""
    rank = max(1, math.ceil(share * sum(histogram.values())))
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return bucket
    return max(histogram)


def schema_words(schema: Schema) -> str:
    """The schema in one line: each field's name and type, with what matters of its options."""
    return ", ".join(f"{spec.name} ({_type_words(spec)}{', optional' if spec.optional else ''})"
                     for spec in schema.fields)


def _type_words(spec: FieldSpec) -> str:
    options = spec.options
    if spec.type == "boxes":
        categories = options.get("categories")
        counted = f", {len(categories)} categories" if categories is not None else ""
        return f"boxes {options['format']}{counted}"
    if spec.type == "masks":
        return f"masks, {options['kind']}"
    if spec.type == "keypoints":
        names = options.get("names")
        return f"keypoints, {len(names)} points" if names is not None else "keypoints"
    if spec.type == "ndarray":
        shape = "x".join("?" if side is None else str(side) for side in options["shape"])
        return f"ndarray {options['dtype']} [{shape}]"
    return spec.type
