"""The fused prefix of a ``datakit.vision`` pipeline: which operations run inside decoding, and how.

:mod:`.plan` says which leading operations fuse and in what order;
:mod:`.decoder` runs them on a record (region and DCT-scaled JPEG decode,
resize, flip) and says where the pixels came from; :mod:`.source` is one
record's pixels, decoded lazily; :mod:`.partial_resize` computes a part of a
resize from only the source pixels it reads.
"""

from datakit.vision.fused_decode.decoder import FusedDecoder
from datakit.vision.fused_decode.plan import FusedPlan, compile_transform

__all__ = ["FusedDecoder", "FusedPlan", "compile_transform"]
