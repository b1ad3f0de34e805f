"""A field store's sample as WebDataset members: each field a member, named so its type comes back.

A sample is ``<record key>.<extension>`` members (:mod:`datakit.tools.export.webdataset`).
The primary image is ``.<its format>`` (``.jpg``, ``.png``; raw pixels as
``.png``) and the label ``.cls``, as always; every other field is a member
whose extension is the field's name when that name already says its type as
WebDataset's decoders read it (``txt``, ``json``, ``npy``, ``png``,
``caption.txt``...), else the name followed by its type's extension:

=========================  ==========================================================
field                      member
=========================  ==========================================================
``str``                    ``<name>.txt``: the UTF-8 text
``json``                   ``<name>.json``: the JSON text
``int``                    ``<name>.cls``: the number as text (``.cls`` decodes as an int)
``float``                  ``<name>.json``: the number as JSON (``NaN``/``Infinity`` as Python writes them)
``ndarray``                ``<name>.npy``: ``numpy.save``'s bytes, without pickles
``image``                  ``<name>.<its format>``: the stored file (raw pixels as ``.png``)
``boxes``                  ``<name>.json``: the boxes in COCO's annotation shape, with the instance
                           masks (``segmentation``, COCO's uncompressed RLE) and keypoints that
                           belong to them (:mod:`datakit.tools.export.annotations`)
``masks`` (instances)      ``<name>.json``: ``[{"segmentation": ...}]``, when they belong to no boxes
``masks`` (label map)      ``<name>.png``: the stored PNG
``keypoints``              ``<name>.json``: ``[{"keypoints", "num_keypoints"}]``, when they belong to no boxes
=========================  ==========================================================

A sample without a value for an optional field has no member for it. So a
store converted from shards exports to shards that convert back to the same
fields (their names are extensions already); another store's fields come
back named by their members (``caption.txt``). Two fields that would be one
member, a member named ``cls`` beside the label, or a field named as the
sample's image member, are refused before anything is written, naming them.
"""

from __future__ import annotations

import io
import json
from typing import Any, NamedTuple

import numpy as np

from datakit.errors import ExportError
from datakit.format.fields.base import FieldError
from datakit.format.fields.images import ImageValue
from datakit.format.fields.masks import SemanticMask
from datakit.format.fields.schema import Schema
from datakit.format.fields.values import image_record
from datakit.format.records import PayloadKind
from datakit.tools.export.annotations import Instances, instance_fields, instances
from datakit.tools.export.reading import image_file
from datakit.tools.export.webdataset import extension_of

__all__ = ["WDS_TYPES", "Member", "member_names", "sample_members"]

WDS_TYPES = {**dict.fromkeys(("txt", "text", "transcript", "caption"), "str"),
             **dict.fromkeys(("json", "jsn"), "json"),
             **dict.fromkeys(("cls", "cls2", "index", "inx", "id"), "int"), "npy": "ndarray",
             **dict.fromkeys(("jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"), "image")}
"""What WebDataset's decoders make of a member, by the last dotted part of its extension."""
_SUFFIX = {"str": "txt", "json": "json", "int": "cls", "float": "json", "ndarray": "npy", "boxes": "json",
           "masks": "json", "keypoints": "json", "label map": "png"}


class Member(NamedTuple):
    """A field's member: its extension, and whether each sample's image format is added to it."""

    extension: str
    formatted: bool = False


def member_names(schema: Schema, where: str) -> dict[str, Member]:
    """The member of each field written as a member of its own, by field name; the masks and keypoints
    that belong to boxes have none (they are in the boxes' member).

    Raises:
        ExportError: a field name no member can hold, two fields that would be one member, or a field
            that would be the label's ``.cls``.
    """
    grouped = {name for group in _groups(schema).values() if group.boxes is not None for name in group.names}
    found: dict[str, Member] = {}
    for spec in schema.stored[1:]:
        if spec.name in grouped and spec.type != "boxes":
            continue
        if "/" in spec.name or spec.name.startswith("."):
            raise ExportError(f"{where}: field {spec.name!r} cannot name a WebDataset member (a '/' or a "
                              "leading '.' would change which sample or member it is); export as coco, or "
                              "convert again with another name")
        kind = "label map" if spec.type == "masks" and spec.options["kind"] == "semantic" else spec.type
        typed = WDS_TYPES.get(spec.name.rpartition(".")[2].lower())
        if typed == ("image" if kind == "label map" else kind) and spec.name.lower() != "cls":
            found[spec.name] = Member(spec.name)
        elif kind == "image":
            found[spec.name] = Member(spec.name, formatted=True)
        else:
            found[spec.name] = Member(f"{spec.name}.{_SUFFIX[kind]}")
    _check_unique(found, schema, where)
    return found


def _check_unique(found: dict[str, Member], schema: Schema, where: str) -> None:
    seen: dict[str, str] = {"cls": "the label"} if schema.label is not None else {}
    for name, member in found.items():
        other = seen.setdefault(member.extension.lower(), f"field {name!r}")
        if other != f"field {name!r}":
            raise ExportError(f"{where}: {other} and field {name!r} would both be the member "
                              f".{member.extension} of each sample; export as coco, or convert again with "
                              "another name for one")


def _groups(schema: Schema) -> dict[str, Instances]:
    """Each list of annotations by the field whose member holds it: its boxes, or its masks or keypoints."""
    return {group.names[0]: group for group in instance_fields(schema)}


def sample_members(values: dict[str, Any], schema: Schema, names: dict[str, Member], version: int,
                   taken: list[str]) -> list[tuple[str, bytes]]:
    """The members of one sample's fields (not its image nor its label), in schema order.

    Args:
        values: the sample's field values (:func:`datakit.format.fields.values.field_values`).
        names: :func:`member_names`.
        version: the record's format version.
        taken: the extensions of the members the sample has already (its image's, ``cls``).

    Raises:
        FieldError: two members would have one name, or a value cannot be written (naming the field).
    """
    groups = _groups(schema)
    seen = {extension.lower() for extension in taken}
    found: list[tuple[str, bytes]] = []
    for name, member in names.items():
        value = values.get(name)
        if value is None:
            continue
        data, extension = _member(schema.field(name).type, value, groups.get(name), values, version)
        full = f"{member.extension}.{extension}" if member.formatted else member.extension
        if full.lower() in seen:
            raise FieldError(f"field {name!r} would be the member .{full}, which the sample has already")
        seen.add(full.lower())
        found.append((full, data))
    return found


def _member(kind: str, value: Any, group: Instances | None, values: dict[str, Any],
            version: int) -> tuple[bytes, str]:
    """A value's member bytes, and an image's format (its extension)."""
    if isinstance(value, ImageValue):
        if value.kind is PayloadKind.RAW:
            return image_file(image_record(value, version), True), "png"
        return bytes(value.payload), extension_of(bytes(value.payload))
    if isinstance(value, SemanticMask):
        return bytes(value.png), "png"
    if group is not None:
        return json.dumps(instances(group, values), ensure_ascii=False).encode("utf-8"), ""
    if kind == "str":
        return str(value).encode("utf-8"), ""
    if kind == "int":
        return str(value).encode(), ""
    if kind == "ndarray":
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(value), allow_pickle=False)
        return buffer.getvalue(), ""
    return json.dumps(value, ensure_ascii=False).encode("utf-8"), ""  # json, float
