"""A WebDataset sample's members as fields: each extension's type, and the values read by offset.

Every member of a sample is a field named by its extension, as webdataset's
``to_tuple("jpg", "txt")`` names it, typed by the last dotted part of that
extension as webdataset's decoders type it (``en.txt`` is text, ``seg.png`` an
image):

- ``txt``, ``text``, ``transcript``, ``caption``: a ``str`` field (UTF-8 text);
- ``json``, ``jsn``: a ``json`` field;
- ``cls2``, ``index``, ``inx``, ``id`` (and a ``cls`` after a dot): an ``int``
  field, the member's text an integer; a ``.cls`` itself is the sample's class
  (:mod:`~datakit.conversion.sources.webdataset.labels`);
- ``npy``: an ``ndarray`` field, its dtype and shape from the members'
  headers (a size that differs between samples is ``null``), read by
  ``numpy.lib.format.read_array`` with ``allow_pickle=False``;
- ``jpg``, ``jpeg``, ``png``, ``ppm``, ``bmp``, ``pgm``, ``tif``, ``tiff``,
  ``webp``: an ``image`` field, checked like the sample's image.

Anything else (``pkl``, ``pth``, ``npz``, ``mp``, ``cbor``, ...) is no field:
pickles are never loaded, the rest are formats datakit does not type. Values
are read in the reader processes (:class:`TarFields`), each member bounded
before it is read: text and JSON by the field's ``max_bytes`` (1 MiB), an
integer by :data:`~datakit.conversion.sources.webdataset.labels.CLS_BYTES`.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.entries import IMG_EXTENSIONS, SourceEntry
from datakit.conversion.sources.webdataset.labels import CLS_BYTES
from datakit.conversion.sources.webdataset.shards import read_place
from datakit.format.fields.arrays import DTYPES
from datakit.format.fields.base import MAX_VALUE_BYTES, FieldSpec
from datakit.format.fields.text import MAX_TEXT_BYTES

__all__ = ["NPY_HEAD", "member_type", "array_header", "TarFields"]

NPY_HEAD = 16384
"""The bytes of an ``.npy`` member the scan reads: its header (numpy reads headers of up to 10,000)."""

_TYPES = {**dict.fromkeys(("txt", "text", "transcript", "caption"), "str"),
          **dict.fromkeys(("json", "jsn"), "json"),
          **dict.fromkeys(("cls", "cls2", "index", "inx", "id"), "int"),
          "npy": "ndarray",
          **dict.fromkeys((extension.lstrip(".") for extension in IMG_EXTENSIONS), "image")}
_INTEGER = re.compile(r"\s*[+-]?[0-9]{1,19}\s*")


def member_type(extension: str) -> str | None:
    """The field type of a member of ``extension`` (lower-case); ``None``: no field."""
    return _TYPES.get(extension.rpartition(".")[2])


def array_header(head: bytes) -> tuple[str, list[int]]:
    """The dtype name and shape an ``.npy`` member's first bytes declare.

    Raises:
        ValueError: not an ``.npy`` header of format 1 or 2, or of a dtype no ``ndarray`` field holds.
    """
    stream = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"npy format version {version[0]}.{version[1]}, where datakit reads 1.0 and 2.0")
    except (ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise ValueError(f"not an .npy array ({exc})") from None
    name = dtype.newbyteorder("=").name if dtype.kind in "biuf" and not dtype.fields else str(dtype)
    if name not in DTYPES:
        raise ValueError(f"an .npy array of {dtype}, where an ndarray field holds {', '.join(DTYPES)}")
    return name, list(shape)


@dataclass(frozen=True)
class TarFields:
    """The field values of samples' members, read by place in the reader processes.

    An entry's location is ``(shard, offset, size)`` of its image, then
    ``(offset, size)`` of each field of ``specs`` in their order (``(-1, 0)``
    where the sample has no such member).

    Attributes:
        shards: the shard files.
        specs: the fields read from members, in the order of the places.
    """

    shards: tuple[str, ...]
    specs: tuple[FieldSpec, ...]

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        places = entry.location[3:]
        if len(places) != 2 * len(self.specs):
            raise BadImage("not a sample of the shards")
        found: dict[str, Any] = {}
        for index, spec in enumerate(self.specs):
            offset, size = places[2 * index], places[2 * index + 1]
            if offset >= 0:
                found[spec.name] = self._value(spec, entry.location[0], offset, size)
        return found

    def close(self) -> None:
        """Nothing to release: each read opens and closes its shard."""

    def _value(self, spec: FieldSpec, shard: int, offset: int, size: int) -> Any:
        most = {"str": spec.options.get("max_bytes", MAX_TEXT_BYTES),
                "json": spec.options.get("max_bytes", MAX_TEXT_BYTES), "int": CLS_BYTES}.get(spec.type,
                                                                                          MAX_VALUE_BYTES)
        if size > most:
            raise BadImage(f"field {spec.name!r}: its member holds {size} bytes, more than the {most} a "
                           f"{spec.type} field of a shard may hold")
        data = bytes(read_place(self.shards[shard], offset, size))
        try:
            return _decoded(spec, data)
        except ValueError as exc:
            raise BadImage(f"field {spec.name!r}: {exc}") from None


def _decoded(spec: FieldSpec, data: bytes) -> Any:
    """A member's bytes as the value of its field, as webdataset's decoders read them."""
    if spec.type in ("str", "json"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        return text if spec.type == "str" else _json(text)
    if spec.type == "int":
        text = data.decode("utf-8", "replace")
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{text[:40]!r} is not an integer")
        return int(text)
    if spec.type == "ndarray":
        try:
            return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        except (ValueError, EOFError, OSError, SyntaxError, TypeError) as exc:
            raise ValueError(f"not an .npy array datakit reads ({exc})") from None
    return data


def _json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
