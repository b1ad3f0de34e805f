"""The running totals of what a conversion has written: kept in every commit, then in the manifest.

A conversion adds each record's numbers as it numbers it (:meth:`Stats.add`);
every commit carries the totals so far (a resume continues from them), and
the manifest keeps the final ones. Read back from a store, they are checked
field by field (:func:`check_stats`), since several size memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from datakit.errors import StoreError
from datakit.format.bounds import check_count, check_counts, check_pixel_floor, check_size_range
from datakit.format.fields.stats import check_field_stats, merge
from datakit.format.records import KEY_DIGITS, NO_LABEL
from datakit.format.typed_json import build_checked

__all__ = ["Stats", "check_stats"]

_ADDED_LATER = frozenset({"exif_oriented", "high_bit_depth", "downscaled", "fields"})
"""Totals a store written by an earlier datakit lacks; they read as 0 (or empty)."""


@dataclass
class Stats:
    """Running totals of what has been written; resumable, so kept as plain data.

    ``exif_oriented`` counts images whose EXIF orientation is not 1 (stored
    upright only with ``exif_transpose``), ``high_bit_depth`` images with
    16-bit or float pixels, scaled to 8 bits when decoded, ``downscaled``
    images stored resized under ``--max-side``. They are absent from stores
    written before they existed, and read as 0 there.
    """

    length: int = 0
    class_counts: list[int] = field(default_factory=list)
    total_bytes: int = 0
    image_formats: dict[str, int] = field(default_factory=dict)
    width_range: list[int] = field(default_factory=list)  # [min, max], empty when length == 0
    height_range: list[int] = field(default_factory=list)
    exif_oriented: int = 0
    high_bit_depth: int = 0
    downscaled: int = 0
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, label: int | tuple[int, ...], payload_bytes: int, image_format: str, width: int,
            height: int, *, oriented: bool = False, high_bit_depth: bool = False,
            downscaled: bool = False, fields: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Account for one written record; ``label`` is a tuple of classes in a multi-label store,
        each of which is counted (the counts then add up to more than the length), and
        :data:`NO_LABEL` in an unlabelled store, which has no classes to count."""
        self.exif_oriented += oriented
        self.high_bit_depth += high_bit_depth
        self.downscaled += downscaled
        self.length += 1
        for each in (label if isinstance(label, tuple) else (label,)):
            if each != NO_LABEL:
                self.class_counts[each] += 1
        self.total_bytes += payload_bytes
        self.image_formats[image_format] = self.image_formats.get(image_format, 0) + 1
        self.width_range = _widen(self.width_range, width)
        self.height_range = _widen(self.height_range, height)
        for name, measured in (fields or {}).items():
            merge(self.fields.setdefault(name, {}), measured)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not data["fields"]:  # a classification store's stats stay what they were before fields
            del data["fields"]
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Stats:
        return build_checked(cls, data, where, _ADDED_LATER)


def _widen(bounds: list[int], value: int) -> list[int]:
    return [min(bounds[0], value), max(bounds[1], value)] if bounds else [value, value]


def check_stats(stats: Stats, where: str) -> None:
    """Every running total within what a conversion writes, in a manifest or a progress entry.

    A resume takes a progress entry's totals into the manifest it writes, so
    they are checked where they are read, as a manifest's are.

    Raises:
        StoreError: a number out of range, naming its field.
    """
    length = stats.length
    check_count(where, "stats.length", length, 10**KEY_DIGITS)  # keys have KEY_DIGITS digits
    check_counts(where, "stats.class_counts", stats.class_counts, length)
    check_counts(where, "stats.image_formats", stats.image_formats, length)
    for name in ("exif_oriented", "high_bit_depth", "downscaled"):
        check_count(where, f"stats.{name}", getattr(stats, name), length)
    check_count(where, "stats.total_bytes", stats.total_bytes)
    check_size_range(where, "stats.width_range", stats.width_range, length)
    check_size_range(where, "stats.height_range", stats.height_range, length)
    check_pixel_floor(where, stats.width_range, stats.height_range)
    problem = check_field_stats(stats.fields, set(stats.fields))
    if problem is not None:
        raise StoreError(f"{where}: manifest field 'stats.fields': {problem}")
