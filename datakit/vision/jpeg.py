"""Decoding the part of a JPEG that a crop needs, at the smallest DCT scale that serves it.

:class:`RegionDecoder` wraps the small libjpeg-turbo binding
``datakit.vision._jpeg`` (built with datakit when libjpeg's headers are
there; see ``pyproject.toml``). Without it, a JPEG is decoded whole at full
scale through :mod:`datakit.decode` and cut: slower, same pixels at full scale.

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

__all__ = ["SCALES", "UnsupportedColourSpace", "RegionDecoder", "choose_scale", "scaled_size"]

SCALES = (1, 2, 4, 8)
"""Numerators of the DCT scales used, over 8."""


class UnsupportedColourSpace(ValueError):
    """A JPEG libjpeg-turbo cannot turn into RGB (CMYK, YCCK): decode it with Pillow instead."""


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
            ValueError: corrupt data, or a region outside the scaled image.
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
