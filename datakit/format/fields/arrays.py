"""``ndarray`` fields: an embedding, a depth map, a feature vector; numeric arrays of a declared rank.

The schema gives the dtype (:data:`DTYPES`: bool, integers, floats; never
object or record types) and the shape, each dimension a size or ``null`` for
one that varies from sample to sample (``[null, 512]``). A value is ``<B``
the rank, then each dimension as ``<I``, then the elements in C order,
little-endian. When read, the rank and every fixed dimension must be the
schema's and the elements must fill the rest of the bytes exactly, so a
value never claims memory its bytes do not hold.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType, unpack

__all__ = ["DTYPES", "MAX_RANK", "NdarrayField"]

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")
"""The element types an ``ndarray`` field holds."""
MAX_RANK = 8

_RANK = struct.Struct("<B")


class NdarrayField(FieldType):
    """A numeric array of the schema's dtype and rank."""

    name = "ndarray"
    option_names = frozenset({"dtype", "shape"})

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().check_options(options)
        if checked.get("dtype") not in DTYPES:
            raise FieldError(f"dtype must be one of {', '.join(DTYPES)}, not {checked.get('dtype')!r}")
        shape = checked.get("shape")
        if not isinstance(shape, list) or not 0 <= len(shape) <= MAX_RANK or not all(
                side is None or (type(side) is int and 0 <= side < 2**32) for side in shape):
            raise FieldError(f"shape must be a list of at most {MAX_RANK} sizes (null for one that varies), "
                             f"not {shape!r}")
        return checked

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        dtype = np.dtype(spec.options["dtype"]).newbyteorder("<")
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise FieldError(f"not an array ({exc})") from None
        if array.dtype.kind not in "biuf":
            raise FieldError(f"a {array.dtype} array is not numeric")
        with np.errstate(over="ignore", invalid="ignore"):  # a value that does not fit is refused below
            converted = array.astype(dtype)
            if dtype.kind == "f":  # floats round; only a finite value that became infinite does not fit
                fits = not (np.isinf(converted) & np.isfinite(array.astype(np.float64))).any()
            else:
                fits = np.array_equal(converted, array, equal_nan=True)
        if not fits:
            raise FieldError(f"its {array.dtype} values do not fit the field's {spec.options['dtype']}")
        self._check_shape(tuple(array.shape), spec)
        return _RANK.pack(array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape) + converted.tobytes()

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> np.ndarray:
        (rank,) = unpack(_RANK, data, 0, "ndarray")
        dims = unpack(struct.Struct(f"<{rank}I"), data, _RANK.size, "ndarray")
        self._check_shape(tuple(dims), spec)
        dtype = np.dtype(spec.options["dtype"]).newbyteorder("<")
        start = _RANK.size + 4 * rank
        count = 1
        for side in dims:
            count *= side
        if (len(data) - start) != count * dtype.itemsize:
            raise FieldError(f"shape {tuple(dims)} of {spec.options['dtype']} needs {count * dtype.itemsize} "
                             f"bytes, the value holds {len(data) - start}")
        return np.frombuffer(data[start:], dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))

    @staticmethod
    def _check_shape(shape: tuple[int, ...], spec: FieldSpec) -> None:
        declared = spec.options["shape"]
        if len(shape) != len(declared) or any(want is not None and want != got
                                               for want, got in zip(declared, shape, strict=True)):
            raise FieldError(f"shape {list(shape)} does not fit the field's {declared}")
