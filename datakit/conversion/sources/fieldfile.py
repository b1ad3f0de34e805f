"""Field files: an image folder's files and every other column as fields, from CSV or JSON Lines.

``datakit convert images/ DEST --fields meta.csv`` takes the images and their
fields from a file laid out as image-text metadata is (CC3M's, LAION's): a
``path`` column (relative to ``SRC``, as in a label file), and any others,
each a field of the store under its name. It is read as a label file is, as
hardened (:mod:`datakit.conversion.sources.tabular`): the file and the line
are named for anything malformed, and the records come in its order. Each
column's type:

- JSON Lines (``.jsonl``, ``.ndjson``, ``.json``): its values' JSON type, an
  integer ``int`` (a ``bool`` as 0 or 1), a number ``float`` (integers and
  other numbers mixed), a string ``str``, an object or an array ``json``; a
  column of mixed kinds, or of an integer outside int64, ``json``, which keeps
  every value as it was. ``null``, or a key a line lacks, is no value.
- CSV (any other file): ``int`` if every value is an integer within int64,
  ``float`` if every value is a decimal number (``1.5``, ``-2e3``), else
  ``str``; an empty cell is no value.

A column with no value in some rows is an optional field. A ``label`` column
is the class label as in a label file (CSV ``a;b`` or a JSON list: several
classes); without one the store is unlabelled. A column named ``image`` is
refused: that is the sample's image. Every value is checked with its field's
type while the file is read (text and JSON of at most 1 MiB, no lone
surrogate), so a bad one is refused naming its line and column. The values
are kept as one block of JSON text per row (:class:`FileFieldValues`), not as
Python objects per row, and the file's SHA-256 names the conversion in its
progress, for ``--resume``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.sources.entries import SourceEntry
from datakit.conversion.sources.labelfile import (
    LabelFile,
    LabelledFolder,
    LabelRow,
    csv_label,
    json_label,
    labelled_folder,
)
from datakit.conversion.sources.tabular import (
    check_unique,
    clean_path,
    csv_records,
    is_json_lines,
    json_objects,
    label_names,
    read_row_file,
)
from datakit.errors import FieldFileError
from datakit.format.fields.base import FieldError, FieldSpec
from datakit.format.fields.registry import FIELD_TYPES
from datakit.format.fields.schema import Schema
from datakit.format.manifest import NO_LABEL

__all__ = ["FieldFile", "FileFieldValues", "read_field_file", "fielded_folder", "field_scan_rules"]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INT64 = (-(2**63), 2**63 - 1)
_CSV_HINT = "a CSV field holds at most 131072 characters; write longer values as JSON Lines"


@dataclass(frozen=True)
class _Row:
    """One row as read: its path, its labels (``None``: no label column), its values by column."""

    path: str
    line: int
    labels: tuple[str, ...] | None
    listed: bool
    values: dict[str, Any]


@dataclass(frozen=True)
class FileFieldValues:
    """The field values of a field file's rows, one JSON array per row in one block of bytes; an
    entry's location is ``(row,)``.

    Attributes:
        names: the fields, in the order of each row's array.
        block: every row's array of values (``null``: no value), one after the other.
        ends: where each row's array ends in ``block`` (the first starts at 0).
    """

    names: tuple[str, ...]
    block: bytes
    ends: np.ndarray

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        (row,) = entry.location
        start = int(self.ends[row - 1]) if row else 0
        found = json.loads(self.block[start:int(self.ends[row])])
        return {name: value for name, value in zip(self.names, found, strict=True) if value is not None}

    def close(self) -> None:
        """Nothing to release: the values are in memory."""


@dataclass(frozen=True)
class FieldFile:
    """A parsed field file.

    Attributes:
        path: the file, absolute.
        digest: the SHA-256 of its bytes, hex.
        labels: its rows as a label file's (every class ``""`` when it has no ``label`` column).
        labelled: it has a ``label`` column.
        specs: the fields of its other columns, in the order they were first met.
        values: every row's values.
    """

    path: str
    digest: str
    labels: LabelFile
    labelled: bool
    specs: tuple[FieldSpec, ...]
    values: FileFieldValues


def field_scan_rules(field_file: FieldFile) -> str:
    """How the order of a field file's records is named in a store's progress."""
    return f"fields sha256:{field_file.digest}"


def read_field_file(path: str | os.PathLike[str]) -> FieldFile:
    """Parse a CSV or JSON Lines field file, typing each column (see the module's docstring).

    Raises:
        FieldFileError: the file cannot be read or is malformed: a header, a path, a label or a
            value (named with its line and column).
    """
    read = read_row_file(path, "field file", FieldFileError)
    json_lines = is_json_lines(read.path)
    rows = list((_json_rows if json_lines else _csv_rows)(read.text, read.path))
    if not rows:
        raise FieldFileError(f"{read.path}: the field file lists no image")
    seen: dict[str, int] = {}
    for row in rows:
        check_unique(row.path, row.line, seen, read.path, FieldFileError)
    columns = list(dict.fromkeys(name for row in rows for name in row.values))
    specs = tuple(_spec(name, rows, json_lines, read.path) for name in columns)
    values = _checked_values(rows, specs, read.path)
    labelled = rows[0].labels is not None
    unlike = next((row for row in rows if (row.labels is not None) != labelled), None)
    if unlike is not None:
        raise FieldFileError(f"{read.path}:{unlike.line}: " + ("no \"label\", which the first row has; every "
                             "row has one, or none" if labelled else "a \"label\", which the first row has "
                             "not; every row has one, or none"))
    label_rows = [LabelRow(row.path, row.labels or ("",), row.line, row.listed) for row in rows]
    return FieldFile(read.path, read.digest, LabelFile(read.path, read.digest, label_rows), labelled, specs,
                     values)


def fielded_folder(root: str, field_file: FieldFile, extensions: tuple[str, ...] = (),
                   optional: Sequence[str] = ()) -> LabelledFolder:
    """The source entries a field file names under ``root``, in its order, with their fields.

    Raises:
        SourceError: ``root`` is not a directory, or the file names no file under it
            (:func:`~datakit.conversion.sources.labelfile.labelled_folder`).
        FieldFileError: ``optional`` names no field of the file.
    """
    folder = labelled_folder(root, field_file.labels, extensions)
    entries = [dataclasses.replace(entry, location=(row,),
                                   label=entry.label if field_file.labelled else NO_LABEL)
               for row, entry in enumerate(folder.entries)]
    try:
        schema = Schema.of([*Schema.classification(field_file.labelled).fields, *field_file.specs])
        schema = schema.with_optional(optional)
    except FieldError as exc:
        raise FieldFileError(f"{field_file.path}: {exc}") from None
    classes = folder.classes if field_file.labelled else []
    return dataclasses.replace(folder, entries=entries, classes=classes, unlabelled=not field_file.labelled,
                               schema=schema, fields=field_file.values if field_file.specs else None)


def _csv_rows(text: str, where: str) -> Iterator[_Row]:
    records = csv_records(text, where, _CSV_HINT, FieldFileError)
    header = [name.strip() for name in next(records, (1, []))[1]]
    _check_header(header, where)
    for line, cells in records:
        if not cells or all(not cell.strip() for cell in cells):
            continue  # a blank line
        if len(cells) != len(header):
            raise FieldFileError(f"{where}:{line}: expected {len(header)} fields ({','.join(header)}), "
                                 f"found {len(cells)}")
        given = dict(zip(header, cells, strict=True))
        path = clean_path(given.pop("path"), where, line, FieldFileError)
        labels = label_names(csv_label(given.pop("label")), where, line, FieldFileError) \
            if "label" in given else None
        yield _Row(path, line, labels, False,
                   {name: cell if cell != "" else None for name, cell in given.items()})


def _check_header(header: list[str], where: str) -> None:
    if "path" not in header:
        raise FieldFileError(f"{where}:1: a CSV field file starts with a header naming its columns, 'path' "
                             f"among them, not {','.join(header)[:80]!r}")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated or not all(header):
        raise FieldFileError(f"{where}:1: every column of the header has a name, each once "
                             f"({', '.join(map(repr, repeated)) or 'an empty one'})")


def _json_rows(text: str, where: str) -> Iterator[_Row]:
    for line, item in json_objects(text, where, ("path",), strict=True, error=FieldFileError):
        if not isinstance(item["path"], str):
            raise FieldFileError(f"{where}:{line}: \"path\" must be a string")
        path = clean_path(item.pop("path"), where, line, FieldFileError)
        labels, listed = json_label(item.pop("label"), where, line, FieldFileError) if "label" in item \
            else (None, False)
        yield _Row(path, line, labels, listed, item)


def _spec(name: str, rows: list[_Row], json_lines: bool, where: str) -> FieldSpec:
    """The field of column ``name``, typed by all its values; optional when a row has none."""
    values = [row.values.get(name) for row in rows]
    present = [value for value in values if value is not None]
    optional = len(present) < len(values)
    if name == "image":
        raise FieldFileError(f"{where}: the column 'image' would be a field named as the sample's image; "
                             "rename it")
    kind = _json_type(present) if json_lines else _csv_type(present)
    return FieldSpec(name, kind, optional)


def _csv_type(cells: list[str]) -> str:
    """``int``, ``float`` or ``str``: an integer outside int64 makes its column text (as a float
    it would lose digits)."""
    integers = [bool(_INTEGER.fullmatch(cell)) for cell in cells]
    if any(whole and not _int64(cell) for whole, cell in zip(integers, cells, strict=True)):
        return "str"
    if all(integers):
        return "int"
    return "float" if all(_NUMBER.fullmatch(cell) for cell in cells) else "str"


def _int64(digits: str) -> bool:
    """Whether an integer's text lies within int64 (its length first: Python refuses to convert
    over 4,300 digits)."""
    return len(digits.lstrip("+-").lstrip("0")) <= 19 and _INT64[0] <= int(digits) <= _INT64[1]


def _json_type(values: list[Any]) -> str:
    kinds = {_json_kind(value) for value in values}
    if kinds <= {"int"}:
        return "int"
    if kinds <= {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 and kinds != {"big"} else "json"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "int"
    if isinstance(value, int):
        return "int" if _INT64[0] <= value <= _INT64[1] else "big"
    return "float" if isinstance(value, float) else "str" if isinstance(value, str) else "json"


def _checked_values(rows: list[_Row], specs: tuple[FieldSpec, ...], where: str) -> FileFieldValues:
    """Every row's values as its fields take them, each checked by its field's type, in one block."""
    parts: list[bytes] = []
    for row in rows:
        typed = []
        for spec in specs:
            value = _typed(row.values.get(spec.name), spec.type)
            if value is not None:
                try:
                    FIELD_TYPES[spec.type].encode(value, spec, None)
                except FieldError as exc:
                    raise FieldFileError(f"{where}:{row.line}: the column {spec.name!r}: {exc}") from None
            typed.append(value)
        parts.append(json.dumps(typed, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    ends = np.cumsum([len(part) for part in parts], dtype=np.int64)
    return FileFieldValues(tuple(spec.name for spec in specs), b"".join(parts), ends)


def _typed(value: Any, kind: str) -> Any:
    """A value read from the file as its column's type has it: CSV text as a number, a bool as 0 or 1."""
    if value is None or kind in ("json", "str"):
        return value
    if isinstance(value, bool):
        return int(value)
    if kind == "int":
        return int(value)
    return float(value)
