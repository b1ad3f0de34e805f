"""A dataclass built from JSON a store holds, every field's type checked before it is used.

A manifest (and a conversion's progress entry) is JSON someone else may have
written: each value is checked against the type its dataclass field
declares, and list and dict items against their item type, so a wrong type is
a :class:`~datakit.errors.StoreError` naming the field, never an
``AttributeError`` deep inside a training job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from datakit.errors import StoreError

__all__ = ["build_checked"]

_JSON_TYPES: dict[str, type] = {
    "int": int, "bool": bool, "str": str, "list[str]": list, "list[int]": list, "dict[str, int]": dict,
    "dict[str, Any]": dict, "Stats": object, "list[list[str]]": list, "list[dict[str, Any]]": list,
    "dict[str, dict[str, Any]]": dict}
_ITEM_TYPES = {"list[str]": str, "list[int]": int, "dict[str, int]": int, "list[dict[str, Any]]": dict,
               "dict[str, dict[str, Any]]": dict}

_Built = TypeVar("_Built")


def build_checked(cls: type[_Built], data: Any, where: str, optional: frozenset[str],
                  absent: Mapping[str, Any] | None = None) -> _Built:
    """``cls(**data)``, each field's JSON type checked first.

    Args:
        cls: a dataclass whose fields are typed with the names of ``_JSON_TYPES``
            (a nested dataclass, built already, passes as it is).
        data: the parsed JSON.
        where: the store, named in errors.
        optional: fields ``data`` may lack (added after the format's first
            version): their defaults apply, or what ``absent`` gives them.
        absent: what an optional field reads as when ``data`` lacks it, where
            that is not its default (a new manifest draws a fresh store id; an
            old store has none).

    Raises:
        StoreError: ``data`` is not an object, lacks a field, or holds one of another type.
    """
    if not isinstance(data, dict):
        raise StoreError(f"{where}: malformed manifest ({cls.__name__} is not an object)")
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            if f.name in optional:  # a store written before the field existed
                if absent and f.name in absent:
                    values[f.name] = absent[f.name]
                continue
            raise StoreError(f"{where}: the manifest has no {f.name!r} field")
        value: Any = data[f.name]
        expected = _JSON_TYPES[str(f.type)]
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise StoreError(
                f"{where}: manifest field {f.name!r} should be {f.type}, not {type(value).__name__}"
            )
        items: Iterable[Any] = value.values() if isinstance(value, dict) else value if isinstance(
            value, list) else ()
        item_type = _ITEM_TYPES.get(str(f.type))
        if item_type is not None and not all(type(item) is item_type for item in items):
            raise StoreError(f"{where}: manifest field {f.name!r} should be {f.type}")
        if str(f.type) == "list[list[str]]" and not all(
                type(item) is list and len(item) == 2 and all(type(text) is str for text in item)
                for item in items):
            raise StoreError(f"{where}: manifest field {f.name!r} should be [path, reason] pairs")
        values[f.name] = value
    return cls(**values)
