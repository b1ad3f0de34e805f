"""``image`` and ``label`` fields: the two every classification store has, and more images per sample.

A sample's first image field is its *primary* image: its bytes are the
record's payload as in every datakit store, and the record's header holds
its kind and size (:mod:`datakit.format.records`). A further image field
(``depth``, a second view) is stored like a payload with its own 12-byte
header: ``<B`` kind (0 encoded, 1 raw RGB), ``<B`` channels, two bytes of
zero, ``<I`` width, ``<I`` height, then the payload. A ``label`` field takes
no bytes in the record: the class (or the first of a multi-label row) is in
the record's header and every label in the store's label table.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType, unpack
from datakit.format.records import RAW_CHANNELS, PayloadKind

__all__ = ["ImageValue", "ImageField", "LabelField"]

_IMAGE = struct.Struct("<BBHII")


class ImageValue(NamedTuple):
    """An image as a record holds it: the payload and what its header says."""

    payload: bytes | memoryview
    kind: PayloadKind
    width: int
    height: int
    channels: int


class ImageField(FieldType):
    """An image (its file's bytes, or raw RGB pixels) with its size."""

    name = "image"

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        if not isinstance(value, ImageValue):
            raise FieldError(f"a {type(value).__name__} is not a checked image")
        _check(value)
        return _IMAGE.pack(value.kind, value.channels, 0, value.width, value.height) + bytes(value.payload)

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> ImageValue:
        kind, channels, zero, width, height = unpack(_IMAGE, data, 0, "image")
        if kind not in (PayloadKind.ENCODED, PayloadKind.RAW) or zero:
            raise FieldError(f"unknown image kind {kind}")
        value = ImageValue(data[_IMAGE.size:], PayloadKind(kind), width, height, channels)
        _check(value)
        return value


class LabelField(FieldType):
    """The class of a sample (or its multi-hot row): held by the record's header and the label table."""

    name = "label"
    stored = False

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        raise FieldError("a label is written into the record's header, not as a value")

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> Any:
        raise FieldError("a label is read from the record's header, not as a value")


def _check(value: ImageValue) -> None:
    if not (0 < value.width < 2**32 and 0 < value.height < 2**32 and 0 < value.channels < 256):
        raise FieldError(f"an image of {value.width}x{value.height}x{value.channels}")
    if value.kind is PayloadKind.RAW and (value.channels != RAW_CHANNELS
                                          or len(value.payload) != value.width * value.height * RAW_CHANNELS):
        raise FieldError(f"raw pixels of {len(value.payload)} bytes are not {value.height}x{value.width} RGB")
