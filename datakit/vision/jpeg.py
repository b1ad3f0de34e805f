"""Decoding the part of a JPEG that a crop needs, at the smallest DCT scale that serves it.

:class:`RegionDecoder` wraps the small libjpeg-turbo binding
``datakit.vision._jpeg`` (built with datakit when libjpeg's headers are
there; see ``pyproject.toml``). Without it, a JPEG is decoded whole at full
scale through :mod:`datakit.decode` and cut: slower, same pixels at full scale.

:func:`decode_image` decodes a whole JPEG with the same binding and the same
rule (libjpeg's errors refuse a file, its warnings about corrupt data do not,
data cut before the end-of-image marker does); :mod:`datakit.decode` uses it
for the JPEGs simplejpeg refuses, so every read path accepts and refuses the
same JPEGs. This module imports neither torch nor the rest of datakit.

Only the power-of-two scales are used. libjpeg-turbo's 1/2, 1/4 and 1/8 IDCTs
are SIMD code; the other n/8 scales are plain C and measured slower here than
decoding at full scale (``benchmarks/bench_vision.py --decode-scales``).
"""

from __future__ import annotations

import numpy as np

try:
    import datakit.vision._jpeg as _jpeg  # import-graph: allow-private: this package's C extension
except ImportError:  # pragma: no cover - built without libjpeg's headers
    _jpeg = None  # type: ignore[assignment]

__all__ = ["SCALES", "UnsupportedColourSpace", "RegionDecoder", "choose_scale", "scaled_size", "decode_image",
           "region_decoding_available"]

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


def choose_scale(box_width: float, box_height: float, width: int, height: int) -> int:
    """The smallest scale numerator at which a box still covers a ``width`` x ``height`` output."""
    for num in SCALES[:-1]:
        if box_width * num >= width * 8 and box_height * num >= height * 8:
            return num
    return 8


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
        if _jpeg is None:  # pragma: no cover - see the module docstring
            raise UnsupportedColourSpace("datakit was built without its JPEG region decoder")
        size = width * height * 3
        if self._scratch.size < size:
            self._scratch = np.empty(size, dtype=np.uint8)
        region = self._scratch[:size]
        try:
            _jpeg.decode_region(data, num, left, top, width, height, region)
        except _jpeg.UnsupportedJpeg as exc:
            raise UnsupportedColourSpace(str(exc)) from None
        return region.reshape(height, width, 3)
