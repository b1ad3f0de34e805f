"""A part of an image's resize, computed from only the source pixels that part reads.

``Resize(s)`` + ``CenterCrop(c)`` keeps a part of the resized image. Each
output pixel ``i`` of a resize by ``scale`` is centred on source pixel
``(i + 0.5) / scale`` and reads :meth:`Resampling.support` pixels either side
(ATen's kernels), so the kept part reads a known span of source rows and
columns: only those are decoded (:meth:`Source.window`), and the kernel is
given the whole resize's scale factors so that each kept pixel sees the same
source pixels with the same weights as in the whole resize.
"""

from __future__ import annotations

import torch

from datakit.format.jpeg import scaled_size
from datakit.vision.fused_decode.source import Source, as_chw
from datakit.vision.resample import InterpolationMode, Resampling, exact_scale

__all__ = ["resize_part"]


def resize_part(source: Source, num: int, size: tuple[int, int], kept: tuple[int, int, int, int],
                resampling: Resampling) -> torch.Tensor:
    """Rows ``[0, bottom)`` x columns ``[0, right)`` of the image's resize to ``size``, decoded at ``num``/8.

    Only the pixels in ``kept`` (``top, bottom, left, right``) are the
    resize's; the rest are unspecified: only the source rows and columns
    that ``kept`` reads are decoded (:meth:`Source.window`). The kernel is
    given the scale factors of the whole image's resize (at full scale with
    ``1.0 / scale == source / output`` exactly, :func:`exact_scale`), so each
    kept pixel is computed from the same pixels with the same weights as in
    the whole resize. Along a side where no such factor exists, and for the
    nearest modes (whose ATen kernels special-case some input sizes), the
    kernel gets the whole side instead (still decoded only where needed).
    """
    top, bottom, left, right = kept
    scaled_width, scaled_height = scaled_size(source.width, source.height, num)
    exact = num == 8 or (source.width * num % 8, source.height * num % 8) == (0, 0)
    if exact and (scaled_height, scaled_width) == size:  # the decode is the resize, as torchvision's
        return as_chw(source.window(num, top, left, bottom, right))
    if num < 8:  # onto the grid of the image's true scaled size, not libjpeg's rounded-up one
        scales: tuple[float | None, float | None] = (size[0] * 8 / (source.height * num),
                                                     size[1] * 8 / (source.width * num))
    elif resampling.mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        scales = (None, None)
    else:
        scales = (exact_scale(source.height, size[0]), exact_scale(source.width, size[1]))
    ys = _side(top, bottom, scaled_height, size[0], scales[0], resampling)
    xs = _side(left, right, scaled_width, size[1], scales[1], resampling)
    canvas = source.window(num, ys[0], xs[0], ys[1], xs[1], ys[2], xs[2])
    resized = resampling(as_chw(canvas), ys[3], xs[3], scales=scales)
    return resized[:, :bottom, :right]


def _side(first: int, end: int, length: int, output: int, scale: float | None,
          resampling: Resampling) -> tuple[int, int, int, int]:
    """How one side is resized: source ``[start, stop)`` decoded, the canvas's length, the outputs computed.

    With a scale factor the canvas ends after the last source pixel read and
    the kernel computes outputs ``[0, end)``; without one it gets the whole
    side (``length`` in, ``output`` out) so that ATen's ``length / output``
    is the whole resize's. ATen skips a side whose input and output lengths
    are equal, whatever the scale: then one more pixel is decoded, or one
    more output computed.
    """
    start, stop = _span(first, end, output / length if scale is None else scale, length, resampling)
    if scale is None:
        return start, stop, length, output
    if stop == end and stop < length:
        stop += 1
    elif stop == end and end < output:
        end += 1
    return start, stop, stop, end


def _span(first: int, end: int, scale: float, length: int, resampling: Resampling) -> tuple[int, int]:
    """Source pixels ``[start, stop)`` that outputs ``[first, end)`` read, with one pixel of margin each side.

    An output pixel ``i`` is centred on source ``(i + 0.5) / scale`` and reads
    up to :meth:`Resampling.support` pixels either side (ATen's kernels).
    """
    inverse = 1.0 / scale
    support = resampling.support(scale)
    start = int(inverse * (first + 0.5) - support + 0.5) - 1
    stop = int(inverse * (end - 0.5) + support + 0.5) + 1
    return max(start, 0), min(stop, length)
