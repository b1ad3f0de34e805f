"""``int`` and ``float`` fields: one number per sample (an image id, a score, a timestamp).

An ``int`` is a little-endian signed 64-bit integer, a ``float`` a
little-endian IEEE double: 8 bytes each, whatever the number. A bool is not
an int here (as in datakit's labels): give it as 0 or 1.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType

__all__ = ["IntField", "FloatField"]

_INT = struct.Struct("<q")
_FLOAT = struct.Struct("<d")


class IntField(FieldType):
    """A signed 64-bit integer."""

    name = "int"

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        number = _integer(value)
        if not -(2**63) <= number < 2**63:
            raise FieldError(f"{_short(value)} is outside the signed 64-bit range an int field holds")
        return _INT.pack(number)

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> int:
        if len(data) != _INT.size:
            raise FieldError(f"an int is {_INT.size} bytes, not {len(data)}")
        value: int = _INT.unpack(data)[0]
        return value


class FloatField(FieldType):
    """A double-precision float (NaN and infinities kept as given)."""

    name = "float"

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not _is_numpy_number(value):
            raise FieldError(f"{_short(value)} is not a number")
        try:
            number = float(value)
        except OverflowError:
            raise FieldError(f"{_short(value)} is too large for a float field") from None
        return _FLOAT.pack(number)

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> float:
        if len(data) != _FLOAT.size:
            raise FieldError(f"a float is {_FLOAT.size} bytes, not {len(data)}")
        value: float = _FLOAT.unpack(data)[0]
        return value


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise FieldError(f"{value!r} is a bool, not an integer: give 0 or 1")
    if isinstance(value, int):
        return value
    if _is_numpy_number(value) and float(value).is_integer() and "int" in type(value).__name__:
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise FieldError(f"{_short(value)} is not an integer")


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
