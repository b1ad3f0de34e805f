"""Masks placed through an operation's steps, decoding only the pixels the output shows.

A crop, a pad, a nearest resize and a flip each send every output row to one
source row and every column to one source column (:meth:`Step.remap`). So
the output of a run of them is the source mask sampled at a row map and a
column map: the masks are decoded for the rows and columns those maps reach
(a stored mask decodes only the columns a region spans:
``MasksValue.dense(region)``), then gathered. Padding carries a fill code in
the maps instead of an index. The resize's maps come from the kernel
torchvision resizes masks with, run on a ramp of indices, so the result is
equal to the steps' own (:func:`~datakit.vision.targets.steps.move_masks`), which
the tests hold against torchvision. Steps that do not map rows and columns
separately (an affine warp) get the masks decoded whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from datakit.vision.targets.boxes import Canvas
from datakit.vision.targets.steps import AxisMaps, Step, move_masks

__all__ = ["RegionReader", "place_masks"]

RegionReader = Callable[[tuple[int, int, int, int]], torch.Tensor]
"""Gives the masks' pixels in a region ``(top, left, height, width)`` of the canvas, as ``(..., h, w)``."""


def place_masks(read: RegionReader, canvas: Canvas, steps: Sequence[Step]) -> torch.Tensor:
    """The masks on ``canvas`` through ``steps``, reading only what the output shows.

    Args:
        read: the masks' pixels in a region of ``canvas``.
        canvas: ``(height, width)`` of the masks.
        steps: the operation's steps, in order.
    """
    maps = AxisMaps.identity(canvas)
    done = 0
    for step in steps:
        remapped = step.remap(maps)
        if remapped is None:
            break
        maps, done = remapped, done + 1
    if done == 0:
        return move_masks(read((0, 0, canvas[0], canvas[1])), steps)
    return move_masks(_gather(read, maps), steps[done:])


def _gather(read: RegionReader, maps: AxisMaps) -> torch.Tensor:
    rows, columns = maps.rows, maps.columns
    valid_rows, valid_columns = rows[rows >= 0], columns[columns >= 0]
    if valid_rows.numel() and valid_columns.numel():
        top, left = int(valid_rows.min()), int(valid_columns.min())
        height, width = int(valid_rows.max()) + 1 - top, int(valid_columns.max()) + 1 - left
        region = read((top, left, height, width))
        row_index, column_index = (rows - top).clamp(0, height - 1), (columns - left).clamp(0, width - 1)
        # A gather along the last axis goes pixel by pixel, one along rows copies whole rows: the
        # pixel-wise one runs on the smaller of the two intermediates (an upscale's output is up to
        # 4x the region; same pixels either way)
        if height <= rows.shape[0]:
            out = region.index_select(-1, column_index).index_select(-2, row_index)
        else:
            out = region.index_select(-2, row_index).index_select(-1, column_index)
    else:  # nothing of the source shows: the fills alone
        empty = read((0, 0, 0, 0))
        out = empty.new_zeros((*empty.shape[:-2], rows.shape[0], columns.shape[0]))
    # A pixel takes the fill of the later of its row's and its column's codes: painting each code's rows
    # and columns in the order of the codes gives that, without a 2-D map of codes (a zoom-out's canvas
    # is millions of pixels, and sorting such a map for its codes cost 0.1 s a sample)
    row_codes, column_codes = _fill_index(rows), _fill_index(columns)
    for index in sorted((set(row_codes.tolist()) | set(column_codes.tolist())) - {-1}):
        fill = maps.fills[index]
        out[..., row_codes == index, :] = fill
        out[..., :, column_codes == index] = fill
    return out


def _fill_index(indices: torch.Tensor) -> torch.Tensor:
    """``k`` for code ``-(k + 1)``, -1 for a source index."""
    return torch.where(indices < 0, -indices - 1, torch.full_like(indices, -1))
