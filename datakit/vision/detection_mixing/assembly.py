"""An output sample built from pieces of several samples: their boxes clipped, the rest placed or joined.

A mixing operation makes an output's pixels itself (a mosaic, a blend, a
pasted box) and describes where each source's pixels went as a
:class:`Piece`: the source's pixel ``(x, y)`` lands at ``(x + dx, y + dy)``,
and the output shows that source over ``region`` (a rectangle), except where
``covered`` (another source pasted over it). :func:`assemble` then gives
every target the same placement:

- each box is translated and clipped to its piece's region; it is kept when
  some of it shows and at least ``min_visibility`` of its area shows
  (``covered`` pixels do not show), so empty boxes are dropped;
- what is aligned with a kept box goes with it: its instance mask placed on
  the output canvas (zero outside the region and where covered), its
  keypoints translated (never clipped), its labels and other values kept;
- per-image maps are pasted piece by piece in order (a later piece over an
  earlier one), zero where no piece shows;
- the boxes of all pieces are joined in the pieces' order, and so is every
  aligned entry; everything else comes from the first piece's sample (the
  sample the output replaces), in its structure and types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datakit.errors import TransformError
from datakit.vision.detection_mixing.instances import Aligned, Instances, plain
from datakit.vision.targets import boxes as box_ops
from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.sample import tv_kind

__all__ = ["Rect", "Piece", "placed", "assemble"]

Rect = tuple[int, int, int, int]
"""``(x1, y1, x2, y2)`` in pixels of the output canvas; empty when ``x2 <= x1`` or ``y2 <= y1``."""


@dataclass(frozen=True)
class Piece:
    """One source's part of an output.

    Attributes:
        source: the source sample.
        offset: ``(dx, dy)``: the source's pixel ``(x, y)`` is the output's ``(x + dx, y + dy)``.
        region: the output pixels that show the source (within its image and the canvas).
        covered: a part of ``region`` that shows another source instead, or None.
        maps: whether its per-image maps are pasted (a blend's second image: not).
    """

    source: Instances
    offset: tuple[int, int]
    region: Rect
    covered: Rect | None = None
    maps: bool = True


def placed(source: Instances, offset: tuple[int, int], canvas: Canvas, within: Rect | None = None,
           covered: Rect | None = None, maps: bool = True) -> Piece:
    """The piece of ``source`` at ``offset`` on an output of ``canvas``: its region is its image there,
    within the canvas and ``within``."""
    dx, dy = offset
    height, width = source.canvas
    x1, y1, x2, y2 = max(dx, 0), max(dy, 0), min(dx + width, canvas[1]), min(dy + height, canvas[0])
    if within is not None:
        x1, y1, x2, y2 = max(x1, within[0]), max(y1, within[1]), min(x2, within[2]), min(y2, within[3])
    return Piece(source, offset, (x1, y1, max(x2, x1), max(y2, y1)), covered, maps)


def _shown(piece: Piece, min_visibility: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The piece's boxes on the output, clipped to its region, and which of them are kept."""
    corners = piece.source.corners
    dx, dy = piece.offset
    shifted = corners + corners.new_tensor([dx, dy, dx, dy])
    x1, y1, x2, y2 = piece.region
    clipped = torch.stack((shifted[:, 0].clamp(x1, x2), shifted[:, 1].clamp(y1, y2),
                           shifted[:, 2].clamp(x1, x2), shifted[:, 3].clamp(y1, y2)), dim=1)
    area = (shifted[:, 2] - shifted[:, 0]).clamp(min=0) * (shifted[:, 3] - shifted[:, 1]).clamp(min=0)
    shown = (clipped[:, 2] - clipped[:, 0]).clamp(min=0) * (clipped[:, 3] - clipped[:, 1]).clamp(min=0)
    if piece.covered is not None:
        kx1, ky1, kx2, ky2 = piece.covered
        across = (clipped[:, 2].clamp(max=kx2) - clipped[:, 0].clamp(min=kx1)).clamp(min=0)
        down = (clipped[:, 3].clamp(max=ky2) - clipped[:, 1].clamp(min=ky1)).clamp(min=0)
        shown = shown - across * down
    return clipped, (area > 0) & (shown > 0) & (shown >= area * min_visibility)


def assemble(image: torch.Tensor, pieces: Sequence[Piece], min_visibility: float, where: str) -> Any:
    """The output sample: ``image`` (the output's pixels) and every target of ``pieces`` placed on it, in
    the structure and types of the first piece's sample.

    Raises:
        TransformError: the pieces hold their boxes under different keys, or
            a piece with boxes lacks an entry that others align with theirs
            (named with ``where``).
    """
    base = pieces[0].source
    canvas = (int(image.shape[-2]), int(image.shape[-1]))
    shown = [_shown(piece, min_visibility) for piece in pieces]
    boxes_keys = {piece.source.boxes_key for piece in pieces if piece.source.boxes_key is not None}
    if len(boxes_keys) > 1:
        raise TransformError(f"{where}: the samples hold their boxes under {', '.join(sorted(boxes_keys))}")
    out_image = _like(base.image, image, canvas)
    fields: dict[str, Any] = {}
    for key in _keys(pieces):
        value = out_image if key == base.image_key else _entry(key, pieces, shown, canvas, where)
        if value is not None:
            fields[key] = value
    if base.pair is not None:
        return base.pair((out_image, fields if base.fields is not None else base.other))
    return fields


def _keys(pieces: Sequence[Piece]) -> list[str]:
    """The output's keys: the first sample's, then the targets only the others hold."""
    base = pieces[0].source
    keys = list(base.fields or {})
    for piece in pieces[1:]:
        source = piece.source
        extra = [source.boxes_key] if source.boxes_key is not None else []
        extra += [*source.aligned, *(source.maps if piece.maps else ())]
        keys += [key for key in extra if key not in keys]
    return keys


def _entry(key: str, pieces: Sequence[Piece], shown: Sequence[tuple[torch.Tensor, torch.Tensor]],
           canvas: Canvas, where: str) -> Any:
    base = pieces[0].source
    holders = [piece.source for piece in pieces]
    if any(source.boxes_key == key for source in holders):
        return _boxes(holders, shown, canvas)
    if any(key in source.aligned for source in holders):
        parts = []
        for piece, (_, kept) in zip(pieces, shown, strict=True):
            entry = piece.source.aligned.get(key)
            if entry is None and piece.source.count:
                raise TransformError(f"{where}: one sample has {key!r} beside its boxes, another does not")
            if entry is not None:
                parts.append((entry, _moved(entry, piece, kept, canvas)))
        return _joined(parts, canvas)
    if any(key in source.maps for source in holders):
        return _map(key, pieces, canvas)
    return None if base.fields is None or key not in base.fields else base.fields[key]


def _boxes(holders: Sequence[Instances], shown: Sequence[tuple[torch.Tensor, torch.Tensor]],
           canvas: Canvas) -> Any:
    """Every piece's kept boxes, in the format, dtype and type of the first that has boxes."""
    first = next(source for source in holders if source.boxes_key is not None)
    corners = torch.cat([clipped[kept] for (clipped, kept), source in zip(shown, holders, strict=True)
                         if source.boxes_key is not None])
    held = box_ops.convert_format(corners, "XYXY", first.box_format)
    return _like(first.boxes, held.to(plain(first.boxes).dtype), canvas)


def _moved(entry: Aligned, piece: Piece, kept: torch.Tensor, canvas: Canvas) -> Any:
    """One piece's part of an aligned entry: the kept boxes' values, placed on the output."""
    if entry.kind == "values":
        return _select(entry.value, kept)
    value = plain(entry.value)[kept]
    dx, dy = piece.offset
    if entry.kind == "points":
        moved = value.clone()
        moved[..., 0] += dx
        moved[..., 1] += dy
        return moved
    out = value.new_zeros((value.shape[0], *canvas))
    x1, y1, x2, y2 = piece.region
    if x2 > x1 and y2 > y1:
        out[:, y1:y2, x1:x2] = value[:, y1 - dy:y2 - dy, x1 - dx:x2 - dx]
    if piece.covered is not None:
        kx1, ky1, kx2, ky2 = piece.covered
        out[:, ky1:max(ky2, ky1), kx1:max(kx2, kx1)] = 0
    return out


def _select(value: Any, kept: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        return plain(value)[kept]
    if isinstance(value, np.ndarray):
        return value[kept.numpy()]
    return [item for item, keep in zip(value, kept.tolist(), strict=True) if keep]


def _joined(parts: Sequence[tuple[Aligned, Any]], canvas: Canvas) -> Any:
    """An aligned entry's pieces joined, in the type of the first piece that has it."""
    template = parts[0][0].value
    values = [value for _, value in parts]
    if isinstance(template, torch.Tensor):
        return _like(template, torch.cat([torch.as_tensor(value) for value in values]), canvas)
    if isinstance(template, np.ndarray):
        return np.concatenate([np.asarray(value) for value in values])
    joined = [item for value in values for item in (value.tolist() if hasattr(value, "tolist") else value)]
    return type(template)(joined) if isinstance(template, tuple) else joined


def _map(key: str, pieces: Sequence[Piece], canvas: Canvas) -> Any:
    """A per-image map on the output: each piece's region pasted in order, zero elsewhere."""
    template = next(piece.source.maps[key] for piece in pieces if key in piece.source.maps)
    out = plain(template).new_zeros(canvas)
    for piece in pieces:
        found = piece.source.maps.get(key)
        x1, y1, x2, y2 = piece.region
        if found is None or not piece.maps or x2 <= x1 or y2 <= y1:
            continue
        dx, dy = piece.offset
        out[y1:y2, x1:x2] = plain(found)[y1 - dy:y2 - dy, x1 - dx:x2 - dx]
    return _like(template, out, canvas)


def _like(template: Any, tensor: torch.Tensor, canvas: Canvas) -> Any:
    """``tensor`` in ``template``'s torchvision type (with the output's canvas where the type has one)."""
    kind = tv_kind(template)
    if kind == "boxes":
        extra = {"clamping_mode": template.clamping_mode} if hasattr(template, "clamping_mode") else {}
        return type(template)(tensor, format=template.format, canvas_size=canvas, **extra)
    if kind == "keypoints":
        return type(template)(tensor, canvas_size=canvas)
    if kind in ("masks", "image"):
        return type(template)(tensor)
    return tensor
