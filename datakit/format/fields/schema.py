"""A store's schema: its samples' fields, in the order a record stores them, checked as a manifest gives them.

The manifest keeps the schema as a list of ``{"name", "type", "optional"?,
...options}`` objects (:meth:`Schema.to_json`). A store written before
fields existed has none: it is :meth:`Schema.classification`, an ``image``
and a ``label``. Every schema has at least one image field; the first is the
sample's *primary* image, whose bytes are the record's payload. A field that
annotates an image (boxes, masks, keypoints) names it in its ``image``
option (the primary image by default), and instance masks name their boxes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.registry import FIELD_TYPES

__all__ = ["MAX_FIELDS", "MAX_NAME", "Schema"]

MAX_FIELDS = 64
"""The most fields a sample has (a record's directory holds up to 65,535)."""
MAX_NAME = 64
"""The longest field name, in characters."""


@dataclass(frozen=True)
class Schema:
    """A store's fields.

    Attributes:
        fields: every field, in the schema's order.
    """

    fields: tuple[FieldSpec, ...]

    @classmethod
    def classification(cls, labelled: bool = True) -> Schema:
        """An image and its class: every store written before fields (an unlabelled one: the image)."""
        image = FieldSpec("image", "image")
        return cls((image, FieldSpec("label", "label")) if labelled else (image,))

    @classmethod
    def of(cls, fields: Iterable[FieldSpec]) -> Schema:
        """A schema of ``fields``, each checked and its options completed (a schema built directly
        is only checked as a whole).

        Raises:
            FieldError: a field's name, type or options, or how fields refer to each other.
        """
        checked = []
        for spec in fields:
            kind = FIELD_TYPES.get(spec.type)
            if kind is None:
                raise FieldError(f"field {spec.name!r} has the unknown type {spec.type!r} (datakit knows "
                                 f"{', '.join(FIELD_TYPES)})")
            try:
                options = kind.check_options(spec.options)
            except FieldError as exc:
                raise FieldError(f"field {spec.name!r}: {exc}") from None
            checked.append(FieldSpec(spec.name, spec.type, spec.optional, options))
        return cls(tuple(checked))

    @classmethod
    def from_json(cls, data: Any) -> Schema:
        """The schema a manifest holds.

        Raises:
            FieldError: not a list of field objects, or a field that :meth:`of` refuses.
        """
        if not isinstance(data, list) or not data or len(data) > MAX_FIELDS:
            raise FieldError(f"the schema must be a list of 1 to {MAX_FIELDS} fields")
        specs = []
        for item in data:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(
                    item.get("type"), str) or not isinstance(item.get("optional", False), bool):
                raise FieldError(f"a field of the schema is {{name, type, ...}}, not {item!r:.80}")
            options = {key: value for key, value in item.items() if key not in ("name", "type", "optional")}
            specs.append(FieldSpec(item["name"], item["type"], item.get("optional", False), options))
        return cls.of(specs)

    def to_json(self) -> list[dict[str, Any]]:
        return [spec.to_json() for spec in self.fields]

    def with_optional(self, names: Iterable[str]) -> Schema:
        """This schema with the fields ``names`` optional (a sample may have no value for them).

        Raises:
            FieldError: a name is no field of the schema, or names its primary image or its label,
                which every sample has.
        """
        wanted = set(names)
        unknown = sorted(wanted - set(self.names))
        if unknown:
            raise FieldError(f"no field {', '.join(map(repr, unknown))} to make optional; the fields are "
                             f"{', '.join(self.names)}")
        for spec in (self.primary_image, self.label):
            if spec is not None and spec.name in wanted:
                raise FieldError(f"the {spec.type} field {spec.name!r} cannot be optional: every sample has "
                                 f"its {spec.type}")
        return Schema(tuple(FieldSpec(spec.name, spec.type, spec.optional or spec.name in wanted,
                                      spec.options) for spec in self.fields))

    # What readers and writers ask of it.

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.fields)

    def field(self, name: str) -> FieldSpec:
        """The field named ``name``.

        Raises:
            KeyError: there is none; the message lists the fields.
        """
        for spec in self.fields:
            if spec.name == name:
                return spec
        raise KeyError(f"no field {name!r}; this store's fields are {', '.join(self.names)}")

    @property
    def primary_image(self) -> FieldSpec:
        return next(spec for spec in self.fields if spec.type == "image")

    @property
    def label(self) -> FieldSpec | None:
        return next((spec for spec in self.fields if spec.type == "label"), None)

    @property
    def stored(self) -> tuple[FieldSpec, ...]:
        """The fields a record holds bytes of, in the record's order: the primary image first."""
        primary = self.primary_image
        return (primary, *(spec for spec in self.fields
                           if spec is not primary and FIELD_TYPES[spec.type].stored))

    @property
    def is_classification(self) -> bool:
        """An image and at most a label: records of the formats before fields (versions 1 and 2)."""
        return len(self.stored) == 1

    def canvas_field(self, spec: FieldSpec) -> FieldSpec:
        """The image field ``spec`` annotates."""
        name = spec.options.get("image")
        return self.primary_image if name is None else self.field(name)

    def __post_init__(self) -> None:
        """Refuse a schema whose fields do not fit together (a :class:`FieldError` says how)."""
        names = [spec.name for spec in self.fields]
        for name in names:
            if not name or len(name) > MAX_NAME or not name.isprintable():
                raise FieldError(f"a field name is 1 to {MAX_NAME} printable characters, not {name!r:.80}")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise FieldError(f"field name(s) {', '.join(map(repr, repeated))} given twice")
        if len(self.fields) > MAX_FIELDS:
            raise FieldError(f"{len(self.fields)} fields; a store has at most {MAX_FIELDS}")
        images = [spec for spec in self.fields if spec.type == "image"]
        if not images or images[0].optional:
            raise FieldError("a store's samples have an image: its first image field, never optional")
        if sum(spec.type == "label" for spec in self.fields) > 1:
            raise FieldError("a store has at most one label field")
        for spec in self.fields:
            self._check_references(spec, {image.name for image in images})
        _check_keys(self.fields)

    def _check_references(self, spec: FieldSpec, images: set[str]) -> None:
        if not FIELD_TYPES[spec.type].on_canvas:
            return
        image = spec.options.get("image")
        if image is not None and image not in images:
            raise FieldError(f"field {spec.name!r} lies on {image!r}, which is not an image field")
        boxes = spec.options.get("boxes")
        if boxes is not None and not any(other.name == boxes and other.type == "boxes"
                                         for other in self.fields):
            raise FieldError(f"field {spec.name!r} belongs to {boxes!r}, which is not a boxes field")


def _check_keys(fields: Sequence[FieldSpec]) -> None:
    """The keys a sample dict holds are unique: field names, and the per-box arrays boxes add."""
    keys: list[str] = []
    for spec in fields:
        keys.append(spec.name)
        if spec.type == "boxes":
            if spec.options.get("labels") is not None:
                keys.append(spec.options["labels"])
            keys.extend(spec.options.get("extras", []))
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise FieldError(f"sample key(s) {', '.join(map(repr, repeated))} would come from two fields "
                         "(a boxes field's labels and extras are keys of the sample too)")
