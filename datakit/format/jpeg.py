"""Decoding the part of a JPEG that a crop needs, at the smallest DCT scale that serves it.

:class:`RegionDecoder` wraps the small libjpeg-turbo binding
``datakit.format._jpeg`` (built with datakit when libjpeg's headers are
there; see ``pyproject.toml``). Without it, a JPEG is decoded whole at full
scale through :mod:`datakit.format.decoding` and cut: slower, same pixels at full scale.

:func:`decode_image` decodes a whole JPEG with the same binding and the same
rule (libjpeg's errors refuse a file, its warnings about corrupt data do not,
data cut before the end-of-image marker does); :mod:`datakit.format.decoding` uses it
for the JPEGs simplejpeg refuses, so every read path accepts and refuses the
same JPEGs. This module imports neither torch nor the rest of datakit.

Only the power-of-two scales are used. libjpeg-turbo's 1/2, 1/4 and 1/8 IDCTs
are SIMD code; the other n/8 scales are plain C and measured slower here than
decoding at full scale (``benchmarks/bench_vision.py --decode-scales``).
"""

from __future__ import annotations

import numpy as np

try:
    import datakit.format._jpeg as _jpeg  # import-graph: allow-private: this package's C extension
except ImportError:  # pragma: no cover - built without libjpeg's headers
    _jpeg = None  # type: ignore[assignment]

__all__ = ["SCALES", "MIN_DOWNSCALE", "UnsupportedColourSpace", "RegionDecoder", "choose_scale",
           "scaled_size", "copy_planar", "decode_image", "region_decoding_available"]

SCALES = (1, 2, 4, 8)
"""Numerators of the DCT scales used, over 8."""


class UnsupportedColourSpace(ValueError):
    """A JPEG libjpeg-turbo cannot turn into RGB (CMYK, YCCK): decode it with Pillow instead."""


def region_decoding_available() -> bool:
    """Whether the binding is built in (else every JPEG is decoded whole by simplejpeg or Pillow)."""
    return _jpeg is not None


def decode_image(data: bytes | memoryview, width: int, height: int) -> np.ndarray:
    """The whole JPEG ``data``, ``width`` x ``height`` by its frame header, as fresh ``(height, width, 3)``
    uint8 RGB pixels, read on to its end-of-image marker.

    Raises:
        UnsupportedColourSpace: a CMYK or YCCK JPEG, or the binding is not built in.
        ValueError: libjpeg-turbo refuses the file (corrupt beyond its warnings, or cut before the
            end-of-image marker), or it is not ``width`` x ``height``.
    """
    if _jpeg is None:  # pragma: no cover - see the module docstring
        raise UnsupportedColourSpace("datakit was built without its JPEG decoder")
    out = np.empty((height, width, 3), dtype=np.uint8)
    try:
        decoded = _jpeg.decode_image(data, out)
    except _jpeg.UnsupportedJpeg as exc:
        raise UnsupportedColourSpace(str(exc)) from None
    if decoded != (width, height):
        raise ValueError(f"the JPEG decodes to {decoded[0]}x{decoded[1]}, not {width}x{height}")
    return out


def scaled_size(width: int, height: int, num: int) -> tuple[int, int]:
    """The ``(width, height)`` libjpeg gives at scale ``num``/8 (it rounds up)."""
    return -(-width * num // 8), -(-height * num // 8)


MIN_DOWNSCALE = 3
"""How many times the output a box must stay, on both sides, at a reduced DCT scale.

The IDCT's downscaling keeps detail up to the scaled image's sampling limit,
which torchvision's antialiased bilinear filter would have softened: where
the resize that follows has little left to do, that detail reaches the
output. Measured on real photographs (``tests/vision/test_fused_photos.py``,
``docs/vision.md``): with the box 1-2x the output after scaling, textured
photos differed from torchvision by up to 5.4 grey levels on average per
image (greyscale and colour alike: the same pictures saved at 4:2:0 gave the
same figures); at 2x, up to 1.3; from 3x on, at most 0.6.
"""


def choose_scale(box_width: float, box_height: float, width: int, height: int) -> int:
    """The smallest scale numerator at which a box stays :data:`MIN_DOWNSCALE` times a ``width`` x
    ``height`` output (8, full scale, where none does)."""
    for num in SCALES[:-1]:
        if box_width * num >= width * 8 * MIN_DOWNSCALE and box_height * num >= height * 8 * MIN_DOWNSCALE:
            return num
    return 8


def copy_planar(pixels: np.ndarray, out: np.ndarray, mirror: bool = False) -> bool:
    """Copy interleaved ``(H, W, 3)`` uint8 pixels into ``out``, ``(3, H, W)``, mirrored if asked.

    ``pixels`` may have rows further apart than ``W * 3`` bytes (a crop of a
    larger image). The extension's de-interleave is several times faster
    than torch's strided copy (see ``_jpeg.c``).

    Returns:
        False, having copied nothing, where the extension is not built or the
        layouts are not these (the caller then copies another way).
    """
    if _jpeg is None or pixels.dtype != np.uint8 or out.dtype != np.uint8 or pixels.ndim != 3:
        return False
    height, width, channels = pixels.shape
    row_stride = pixels.strides[0]
    if channels != 3 or pixels.strides[1:] != (3, 1) or row_stride < width * 3 or height * width == 0 \
            or out.shape != (3, height, width) or not out.flags.c_contiguous or not out.flags.writeable:
        return False
    length = (height - 1) * row_stride + width * 3
    span = np.lib.stride_tricks.as_strided(pixels, shape=(length,), strides=(1,))
    _jpeg.to_planar(span, row_stride, height, width, out, mirror)
    return True


class RegionDecoder:
    """Decodes JPEG regions into one reused buffer (one decoder per process or thread).

    The array :meth:`decode` returns is a view of that buffer, valid until the next call.
    """

    def __init__(self) -> None:
        self._scratch = np.empty(0, dtype=np.uint8)

    @property
    def available(self) -> bool:
        """Whether region decoding is built in (else every JPEG is decoded whole)."""
        return _jpeg is not None

    def decode(self, data: bytes | memoryview, num: int, left: int, top: int,
               width: int, height: int) -> np.ndarray:
        """Pixels ``[top, top + height) x [left, left + width)`` of the image at scale ``num``/8.

        Returns:
            An ``(height, width, 3)`` uint8 view of the scratch buffer.

        Raises:
            UnsupportedColourSpace: a CMYK or YCCK JPEG.
            ValueError: corrupt data (by :func:`decode_image`'s rule; a file of one scan whose
                scan is not followed by the end-of-image marker is refused without being
                decoded), or a region outside the scaled image.
        """
        bottom, right = top + height, left + width
        return self.window(data, num, top, left, bottom, right, height, width, origin=(top, left))

    def window(self, data: bytes | memoryview, num: int, top: int, left: int, bottom: int, right: int,
               height: int, width: int, origin: tuple[int, int] = (0, 0)) -> np.ndarray:
        """An ``(height, width, 3)`` canvas holding rows ``[top, bottom)`` x columns ``[left, right)``.

        The canvas's pixel ``(y, x)`` is the scaled image's pixel ``(y + origin[0],
        x + origin[1])``; only the region is decoded, the rest of the canvas
        is left as it was (a view of the scratch buffer, valid until the next call).

        Raises:
            UnsupportedColourSpace: a CMYK or YCCK JPEG.
            ValueError: corrupt data, or a region outside the scaled image or the canvas.
        """
        if _jpeg is None:  # pragma: no cover - see the module docstring
            raise UnsupportedColourSpace("datakit was built without its JPEG region decoder")
        row, column = top - origin[0], left - origin[1]
        if not (0 <= row < bottom - origin[0] <= height and 0 <= column < right - origin[1] <= width):
            raise ValueError(f"region [{top}, {bottom}) x [{left}, {right}) does not fit a {height}x{width} "
                             f"canvas at {origin}")
        size = width * height * 3
        if self._scratch.size < size:
            self._scratch = np.empty(size, dtype=np.uint8)
        canvas = self._scratch[:size]
        start = (row * width + column) * 3
        try:
            _jpeg.decode_region(data, num, left, top, right - left, bottom - top, canvas[start:], width * 3)
        except _jpeg.UnsupportedJpeg as exc:
            raise UnsupportedColourSpace(str(exc)) from None
        return canvas.reshape(height, width, 3)
