"""``boxes`` fields: an image's bounding boxes, each with its class, in one of torchvision's formats.

The schema gives the boxes' ``format`` (``XYXY``, ``XYWH`` or ``CXCYWH``, as
``torchvision.tv_tensors.BoundingBoxFormat`` names them), the coordinates'
``dtype`` (``float32``, or ``float64`` to keep an annotation file's numbers
exactly), the ``image`` field they frame (its size is their canvas), the
``categories`` their labels index (``[{"id", "name", ...}]``, or ``null``)
and which per-box ``extras`` are kept: ``iscrowd`` (uint8), ``area`` (the
coordinates' dtype) and ``ids`` (int64: an annotation file's own ids, to name
an annotation and to write the file back). A value is ``<I`` the number of
boxes N, then N x 4 coordinates, N int64 labels (unless ``labels`` is
``null``), then each extra in that order: every size follows from N, and the
bytes must end exactly there. Boxes outside their canvas, of zero or
negative size, or with NaN coordinates are kept as given (the conversion
counts them; ``SanitizeBoundingBoxes`` decides at train time).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType, unpack

__all__ = ["BOX_FORMATS", "BOX_EXTRAS", "BoxesValue", "BoxesField", "category_ids", "check_categories"]

BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")
BOX_EXTRAS = ("iscrowd", "area", "ids")
MAX_CATEGORIES = 100_000

_COUNT = struct.Struct("<I")


@dataclass(frozen=True)
class BoxesValue:
    """An image's boxes: ``coords`` (N, 4), and per box ``labels`` and the kept extras (or None)."""

    coords: np.ndarray
    labels: np.ndarray | None = None
    iscrowd: np.ndarray | None = None
    area: np.ndarray | None = None
    ids: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.coords.shape[0])


class BoxesField(FieldType):
    """Bounding boxes with per-box labels and extras."""

    name = "boxes"
    on_canvas = True
    option_names = frozenset({"format", "dtype", "image", "labels", "extras", "categories"})

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().check_options(options)
        if checked.get("format") not in BOX_FORMATS:
            raise FieldError(f"format must be one of {', '.join(BOX_FORMATS)}, not {checked.get('format')!r}")
        if checked.setdefault("dtype", "float32") not in ("float32", "float64"):
            raise FieldError(f"dtype must be float32 or float64, not {checked['dtype']!r}")
        if not isinstance(checked.setdefault("labels", "labels"), (str, type(None))):
            raise FieldError("labels must name the per-box labels' key, or be null for boxes without labels")
        extras = checked.setdefault("extras", [])
        if not (isinstance(extras, list) and set(extras) <= set(BOX_EXTRAS)
                and len(set(extras)) == len(extras)):
            raise FieldError(f"extras must be a list of {', '.join(BOX_EXTRAS)}, not {extras!r}")
        checked["extras"] = [extra for extra in BOX_EXTRAS if extra in extras]
        categories = checked.setdefault("categories", None)
        if categories is not None:
            category_ids(categories)
        return checked

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        if not isinstance(value, BoxesValue):
            raise FieldError(f"a {type(value).__name__} is not boxes")
        dtype = np.dtype(spec.options["dtype"]).newbyteorder("<")
        coords = np.asarray(value.coords, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[1] != 4:
            raise FieldError(f"boxes are N x 4 coordinates, not {list(coords.shape)}")
        count = coords.shape[0]
        parts = [_COUNT.pack(count), coords.astype(dtype).tobytes()]
        for name, kind in self._arrays(spec):
            array = getattr(value, name)
            if array is None or np.shape(array) != (count,):
                got = "none" if array is None else list(np.shape(array))
                raise FieldError(f"{count} boxes need {count} {name}, not {got}")
            parts.append(np.asarray(array).astype(kind).tobytes())
        labels = spec.options["labels"]
        if labels is not None:
            check_categories(np.asarray(value.labels), spec)
        return b"".join(parts)

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> BoxesValue:
        (count,) = unpack(_COUNT, data, 0, "boxes")
        dtype = np.dtype(spec.options["dtype"]).newbyteorder("<")
        arrays = self._arrays(spec)
        need = _COUNT.size + count * (4 * dtype.itemsize + sum(kind.itemsize for _, kind in arrays))
        if need != len(data):
            raise FieldError(f"{count} boxes need {need} bytes, the value holds {len(data)}")
        offset = _COUNT.size + 4 * count * dtype.itemsize
        coords = np.frombuffer(data[_COUNT.size:offset], dtype=dtype).reshape(count, 4)
        coords = coords.astype(dtype.newbyteorder("="))
        found: dict[str, np.ndarray] = {}
        for name, kind in arrays:
            found[name] = np.frombuffer(data[offset:offset + count * kind.itemsize], dtype=kind).astype(
                kind.newbyteorder("="))
            offset += count * kind.itemsize
        return BoxesValue(coords, **found)

    @staticmethod
    def _arrays(spec: FieldSpec) -> list[tuple[str, np.dtype[Any]]]:
        """The per-box arrays a value holds after its coordinates, in order, with their dtypes."""
        kinds = {"labels": np.dtype("<i8"), "iscrowd": np.dtype("u1"),
                 "area": np.dtype(spec.options["dtype"]).newbyteorder("<"), "ids": np.dtype("<i8")}
        names = (["labels"] if spec.options["labels"] is not None else []) + list(spec.options["extras"])
        return [(name, kinds[name]) for name in names]


def category_ids(categories: Any) -> set[int]:
    """The ids of a schema's ``categories``, checked: a list of ``{"id": int, "name": str, ...}``.

    Raises:
        FieldError: not such a list, or an id twice.
    """
    if not isinstance(categories, list) or len(categories) > MAX_CATEGORIES:
        raise FieldError(f"categories must be a list of at most {MAX_CATEGORIES} {{id, name}} objects")
    ids: set[int] = set()
    for category in categories:
        if not (isinstance(category, dict) and type(category.get("id")) is int
                and isinstance(category.get("name"), str)):
            raise FieldError(f"a category is an object with an integer id and a name, not {category!r:.60}")
        if category["id"] in ids:
            raise FieldError(f"category id {category['id']} is listed twice")
        ids.add(category["id"])
    return ids


def check_categories(labels: np.ndarray, spec: FieldSpec) -> None:
    """Every label is a category id of the field (when it lists categories).

    Checked when boxes are written and by ``datakit inspect --verify``, not on every read.

    Raises:
        FieldError: naming the first label that is not.
    """
    if spec.options["categories"] is None:
        return
    known = np.fromiter(category_ids(spec.options["categories"]), dtype=np.int64)
    unknown = labels[~np.isin(labels, known)]
    if unknown.size:
        raise FieldError(f"label {int(unknown[0])} is not a category id of the field")
