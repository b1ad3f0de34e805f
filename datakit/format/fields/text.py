"""``str`` and ``json`` fields: a caption, a URL, a prompt; metadata of any shape.

A ``str`` is its UTF-8 bytes. A ``json`` value is UTF-8 JSON text, written by
:func:`json.dumps` and read by :func:`json.loads` (never anything that runs
code). Both are bounded: a value of more than ``max_bytes`` bytes (default
and largest :data:`MAX_TEXT_BYTES`) is refused when written, and so is a JSON
value nested deeper than :data:`MAX_JSON_DEPTH`; a stored value that breaks
either bound, or is not UTF-8, is refused when read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from datakit.format.fields.base import Canvas, FieldError, FieldSpec, FieldType

__all__ = ["MAX_TEXT_BYTES", "MAX_JSON_DEPTH", "StrField", "JsonField", "json_depth"]

MAX_TEXT_BYTES = 1 << 20
"""The most bytes of one ``str`` or ``json`` value (1 MiB): captions and metadata, not documents."""
MAX_JSON_DEPTH = 64
"""The deepest a ``json`` value nests (objects and arrays)."""


class _Text(FieldType):
    option_names = frozenset({"max_bytes"})

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().check_options(options)
        most = checked.setdefault("max_bytes", MAX_TEXT_BYTES)
        if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= MAX_TEXT_BYTES:
            raise FieldError(f"max_bytes must be an integer from 1 to {MAX_TEXT_BYTES}, not {most!r}")
        return checked

    @staticmethod
    def bounded(data: bytes | memoryview, spec: FieldSpec) -> None:
        most = spec.options.get("max_bytes", MAX_TEXT_BYTES)
        if len(data) > most:
            raise FieldError(f"{len(data)} bytes is more than the {most} a {spec.type} value may hold")


class StrField(_Text):
    """UTF-8 text."""

    name = "str"

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        if not isinstance(value, str):
            raise FieldError(f"a {type(value).__name__} is not text")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FieldError(f"the text is not valid Unicode ({exc.reason}, character {exc.start})") from None
        self.bounded(data, spec)
        return data

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> str:
        self.bounded(data, spec)
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


class JsonField(_Text):
    """A JSON value: objects, arrays, strings, finite numbers, booleans and null."""

    name = "json"

    def encode(self, value: Any, spec: FieldSpec, canvas: Canvas | None) -> bytes:
        depth = json_depth(value)
        if depth > MAX_JSON_DEPTH:
            raise FieldError(f"the value nests {depth} deep; a json field holds at most {MAX_JSON_DEPTH}")
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise FieldError(f"not a JSON value ({exc})") from None
        data = text.encode("utf-8", "surrogatepass")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise FieldError("the value holds a lone surrogate, which is not valid Unicode") from None
        self.bounded(data, spec)
        return data

    def decode(self, data: memoryview, spec: FieldSpec, canvas: Canvas | None) -> Any:
        self.bounded(data, spec)
        try:
            value = json.loads(str(data, "utf-8"))
        except UnicodeDecodeError as exc:
            raise FieldError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FieldError(f"not valid JSON ({type(exc).__name__})") from None
        if json_depth(value) > MAX_JSON_DEPTH:
            raise FieldError(f"the value nests deeper than {MAX_JSON_DEPTH}")
        return value


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH + 1) -> int:
    """How deep ``value``'s objects and arrays nest (0 for a scalar), counting no further than ``limit``.

    Iterative, so a hostile value cannot exhaust the stack.

    Raises:
        FieldError: a number that JSON cannot hold (NaN, infinity), or an object key that is not text
            (``json.dumps`` would turn ``1`` into ``"1"``, and the value read back would differ).
    """
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise FieldError(f"{item} is not a JSON number")
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                raise FieldError("a JSON object's keys are text; this one has a key that is not")
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest >= limit:
            return deepest
        pending.extend((child, depth + 1) for child in children)
    return deepest
