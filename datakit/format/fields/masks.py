"""``masks`` fields: per-instance masks (one per box) or a per-image label map, compressed losslessly.

Two kinds, named by the schema's ``kind``:

- ``instances``: N binary masks of the canvas's size, as COCO's run-length
  encoding keeps them (column-major runs, alternating 0s and 1s, starting with
  0s; pycocotools' ``counts`` as integers). A value is ``<B`` 0, three zero
  bytes, ``<III`` N, height, width, then each mask's number of runs as
  ``<I``, then all runs as ``<I``. When read, the size must be the canvas's
  and each mask's runs must add up to height x width, so no run writes outside
  the mask; masks are decoded only when asked for, and only the columns a
  region needs (:meth:`MasksValue.dense`).
- ``semantic``: one label map per image, a single-channel PNG (8 or 16 bit,
  or a palette image whose indices are the labels: VOC's masks stay byte for
  byte). A value is ``<B`` 1, three zero bytes, then the PNG; its size must
  be the canvas's, read from its header before it is decoded.

The schema's ``boxes`` names the boxes field an instance mask belongs to (one
mask per box, in order), or is ``null``.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.format.bounds import check_pixels
from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType, unpack
from datakit.format.headers import sniff_header

__all__ = ["MASK_KINDS", "MasksValue", "MasksField", "runs_of", "SemanticMask"]

MASK_KINDS = ("instances", "semantic")
_KIND = struct.Struct("<B3x")
_SIZES = struct.Struct("<III")


@dataclass(frozen=True)
class MasksValue:
    """N instance masks of ``height`` x ``width``, each kept as its runs (decoded on demand)."""

    height: int
    width: int
    runs: Sequence[np.ndarray]

    def __len__(self) -> int:
        return len(self.runs)

    def dense(self, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """The masks as a uint8 ``(N, h, w)`` array of 0 and 1: the whole canvas, or ``region``
        ``(top, left, height, width)`` of it, decoding only the columns it spans."""
        top, left, height, width = region or (0, 0, self.height, self.width)
        if not (top >= 0 and left >= 0 and height >= 0 and width >= 0 and top + height <= self.height
                and left + width <= self.width):
            raise ValueError(f"region {region} is outside the {self.height}x{self.width} masks")
        out = np.zeros((len(self.runs), width, self.height), dtype=np.uint8)  # column-major, as the runs
        start, stop = left * self.height, (left + width) * self.height
        for position, runs in enumerate(self.runs):
            _paint(runs, start, stop, out[position].reshape(-1))
        return np.ascontiguousarray(out.transpose(0, 2, 1)[:, top:top + height])


@dataclass(frozen=True)
class SemanticMask:
    """A per-image label map, kept as its PNG (decoded on demand)."""

    png: bytes | memoryview
    height: int
    width: int

    def dense(self) -> np.ndarray:
        """The label map as an ``(height, width)`` array (uint8, or uint16 for a 16-bit PNG)."""
        from PIL import Image

        with Image.open(io.BytesIO(bytes(self.png))) as image:
            image.load()
            array = np.asarray(image)
        if array.shape != (self.height, self.width):
            raise ValueError(f"a label map of {list(array.shape)} pixels, not {self.height}x{self.width}")
        return array.astype(np.uint16 if array.dtype.itemsize > 1 else np.uint8)


def runs_of(mask: np.ndarray) -> np.ndarray:
    """The column-major runs of a binary ``(height, width)`` mask (COCO's uncompressed ``counts``)."""
    flat = np.asarray(mask, dtype=bool).T.reshape(-1)
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate(([0], changes, [flat.size]))
    runs = np.diff(edges).astype(np.uint32)
    return np.concatenate(([0], runs)).astype(np.uint32) if flat.size and flat[0] else runs


class MasksField(FieldType):
    """Instance masks (run-length encoded) or a label map (PNG)."""

    name = "masks"
    on_canvas = True
    option_names = frozenset({"kind", "image", "boxes"})

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().check_options(options)
        if checked.get("kind") not in MASK_KINDS:
            raise FieldError(f"kind must be one of {', '.join(MASK_KINDS)}, not {checked.get('kind')!r}")
        if checked.setdefault("boxes", None) is not None and checked["kind"] != "instances":
            raise FieldError("only instance masks belong to boxes")
        return checked

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        if canvas is None:
            raise FieldError("masks need the size of the image they belong to")
        if spec.options["kind"] == "semantic":
            png = bytes(value.png if isinstance(value, SemanticMask) else value)
            self._check_png(memoryview(png), canvas)
            return _KIND.pack(1) + png
        if not isinstance(value, MasksValue):
            raise FieldError(f"a {type(value).__name__} is not instance masks")
        runs = [np.asarray(each, dtype=np.int64) for each in value.runs]
        _check_runs(runs, value.height, value.width, canvas)
        counts = np.array([len(each) for each in runs], dtype="<u4")
        joined = np.concatenate(runs).astype("<u4") if runs else np.zeros(0, "<u4")
        return (_KIND.pack(0) + _SIZES.pack(len(runs), value.height, value.width) + counts.tobytes()
                + joined.tobytes())

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> MasksValue | SemanticMask:
        (kind,) = unpack(_KIND, data, 0, "masks")
        if canvas is None:
            raise FieldError("masks need the size of the image they belong to")
        if kind != (1 if spec.options["kind"] == "semantic" else 0):
            raise FieldError(f"a mask value of kind {kind} in a {spec.options['kind']} field")
        if kind == 1:
            png = data[_KIND.size:]
            self._check_png(png, canvas)
            return SemanticMask(png, *canvas)
        count, height, width = unpack(_SIZES, data, _KIND.size, "masks")
        start = _KIND.size + _SIZES.size
        if start + 4 * count > len(data):
            raise FieldError(f"{count} masks need {4 * count} bytes of run counts, the value holds fewer")
        lengths = np.frombuffer(data[start:start + 4 * count], dtype="<u4").astype(np.int64)
        start += 4 * count
        if start + 4 * int(lengths.sum()) != len(data):
            raise FieldError(f"the masks' runs need {4 * int(lengths.sum())} bytes, the value holds "
                             f"{len(data) - start}")
        flat = np.frombuffer(data[start:], dtype="<u4").astype(np.int64)
        runs = np.split(flat, np.cumsum(lengths)[:-1]) if count else []
        _check_runs(runs, height, width, canvas)
        return MasksValue(height, width, [each.astype(np.uint32) for each in runs])

    @staticmethod
    def _check_png(png: memoryview, canvas: Canvas) -> None:
        header = sniff_header(png)
        if header is None or header[0] != "PNG":
            raise FieldError("a label map is a PNG image")
        _, width, height, _ = header
        if (height, width) != canvas:
            raise FieldError(f"a label map of {width}x{height} for an image of {canvas[1]}x{canvas[0]}")
        check_pixels(width, height)


def _check_runs(runs: Sequence[np.ndarray], height: int, width: int, canvas: Canvas) -> None:
    if (height, width) != tuple(canvas):
        raise FieldError(f"masks of {width}x{height} for an image of {canvas[1]}x{canvas[0]}")
    for position, each in enumerate(runs):
        if each.ndim != 1 or (each.size and each.min() < 0) or int(each.sum()) != height * width:
            raise FieldError(f"mask {position}'s runs do not cover its {width}x{height} pixels exactly")


def _paint(runs: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
    """Write the 1-runs of ``runs`` that fall in the flat range ``[start, stop)`` into ``out`` (zeros).

    Only the object's own pixels are written (one index per pixel of the kept
    runs): an instance usually covers a small part of its image, and a pass over
    the whole range per instance cost the segmentation recipe most of its time.
    """
    ends = np.cumsum(runs, dtype=np.int64)
    begins = ends - runs
    low = np.maximum(begins[1::2], start) - start
    high = np.minimum(ends[1::2], stop) - start
    kept = low < high
    if not kept.any():
        return
    low, lengths = low[kept], (high - low)[kept]
    before = np.cumsum(lengths) - lengths  # the pixels of the earlier kept runs
    out[np.arange(int(lengths.sum())) + np.repeat(low - before, lengths)] = 1
