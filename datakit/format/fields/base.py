"""What every field type is: an encoder and a decoder of one value, with the bounds of both.

A type sees one value at a time and knows nothing of stores or sources. It is
handed the field's spec (its name and the options the schema gave it) and,
for the types that annotate an image, that image's canvas ``(height,
width)``. Encoding refuses a value the type cannot hold; decoding refuses
bytes that are not a value of the type, before allocating anything they
claim. Both raise :class:`FieldError`, whose message says what is wrong; the
caller names the field and the record.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["FieldError", "FieldSpec", "FieldType", "Canvas", "unpack", "MAX_VALUE_BYTES"]

Canvas = tuple[int, int]
"""``(height, width)`` of the image a field annotates."""

MAX_VALUE_BYTES = 2**31
"""No one value of a record is larger: a record's directory holds 32-bit lengths."""


class FieldError(ValueError):
    """A value a field's type cannot hold, or bytes that are not one; the message says why."""


@dataclass(frozen=True)
class FieldSpec:
    """One field of a store's schema.

    Attributes:
        name: the field's name (a key of the samples a dataset returns).
        type: the type's name in the manifest (``"boxes"``).
        optional: a sample may have no value (``None``) for it.
        options: what the type was told (checked by the type; plain JSON).
    """

    name: str
    type: str
    optional: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.optional:
            data["optional"] = True
        data.update(self.options)
        return data


class FieldType(ABC):
    """One type of field: its options, its encoding and its decoding.

    Attributes:
        name: the type's name in a manifest.
        stored: whether a value takes bytes in the record (a label lives in
            the record's header and the store's label table instead).
        on_canvas: the value annotates an image (its options name that image
            field as ``"image"``), whose ``(height, width)`` it is given.
    """

    name: ClassVar[str]
    stored: ClassVar[bool] = True
    on_canvas: ClassVar[bool] = False
    option_names: ClassVar[frozenset[str]] = frozenset()

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options, checked and with their defaults filled in.

        Raises:
            FieldError: an unknown option, or a value of the wrong kind.
        """
        unknown = sorted(set(options) - self.option_names)
        if unknown:
            raise FieldError(f"unknown option(s) {', '.join(map(repr, unknown))} for a {self.name} field"
                             + (f" (it takes {', '.join(sorted(self.option_names))})" if self.option_names
                                else " (it takes none)"))
        return dict(options)

    @abstractmethod
    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        """The bytes of ``value``.

        Raises:
            FieldError: the type cannot hold ``value``.
        """

    @abstractmethod
    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> Any:
        """The value of ``data``, checked.

        Raises:
            FieldError: ``data`` is not a value of this type.
        """


def unpack(layout: struct.Struct, data: memoryview, offset: int, what: str) -> tuple[Any, ...]:
    """``layout.unpack_from(data, offset)``, or a FieldError naming ``what`` when the bytes end first."""
    if offset + layout.size > len(data):
        raise FieldError(f"{what}: {len(data)} bytes end before its {layout.size}-byte header does")
    return layout.unpack_from(data, offset)
