"""Files of rows naming paths, CSV or JSON Lines: read whole and checked, for label files and field files.

A label file (``--labels``, :mod:`datakit.conversion.sources.labelfile`) and a
field file (``--fields``, :mod:`datakit.conversion.sources.fieldfile`) are both
a ``path`` column and more, as CSV with a header or as JSON Lines of objects.
Both are read here, the same hardened way, so that a hostile or mistaken file
is refused as a whole, naming the file and the line, instead of giving
silently wrong samples:

- the file is UTF-8 text (a byte-order mark is allowed);
- JSON Lines break at ``\\n`` (or ``\\r\\n``) only: U+2028 and the other
  characters ``str.splitlines`` breaks at are characters of a value;
- a CSV field is at most the csv module's 131,072 characters;
- a path is relative, ``/``-separated, of at most :data:`MAX_PATH` characters,
  holds no NUL and no lone surrogate, never climbs out with ``..``, and is
  named once;
- a class name is bounded as every label is
  (:func:`~datakit.conversion.sources.class_names.label_problem`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datakit.conversion.sources.class_names import json_integer, label_problem, lone_surrogate, shown
from datakit.errors import LabelFileError

__all__ = ["MAX_PATH", "JSON_SUFFIXES", "RowFile", "read_row_file", "is_json_lines", "csv_records",
           "json_objects", "clean_path", "label_names", "check_unique"]

MAX_PATH = 4096
"""The most characters a path in a label or field file may have (Linux's ``PATH_MAX`` is 4096 bytes)."""

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
"""The extensions of JSON Lines files; any other file is read as CSV."""


@dataclass(frozen=True)
class RowFile:
    """A file of rows, read whole: where it is, the SHA-256 of its bytes (hex), and its text."""

    path: str
    digest: str
    text: str


def read_row_file(path: str | os.PathLike[str], what: str,
                  error: type[LabelFileError] = LabelFileError) -> RowFile:
    """The text of the ``what`` (``"label file"``) at ``path``, ``~`` expanded.

    Raises:
        LabelFileError: (``error``) it cannot be read, or is not UTF-8 text.
    """
    location = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        with open(location, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise error(f"cannot read the {what} {location}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(f"{location}:{line}: the {what} is not UTF-8 text ({exc.reason} at byte "
                    f"{exc.start})") from None
    return RowFile(location, hashlib.sha256(raw).hexdigest(), text)


def is_json_lines(location: str) -> bool:
    """Whether the file is read as JSON Lines (by its extension), not as CSV."""
    return location.lower().endswith(JSON_SUFFIXES)


def csv_records(text: str, where: str, hint: str,
                error: type[LabelFileError] = LabelFileError) -> Iterator[tuple[int, list[str]]]:
    """Each CSV row with its (last) line; a CSV error (a field over the csv module's limit of
    131072 characters) as a ``LabelFileError`` naming the line, followed by ``hint``."""
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise error(f"{where}:{reader.line_num}: not valid CSV ({exc}); {hint}") from None
        yield reader.line_num, fields


def json_objects(text: str, where: str, required: tuple[str, ...], strict: bool = False,
                 error: type[LabelFileError] = LabelFileError) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each JSON Lines object with its line, blank lines left out.

    Args:
        required: the keys every object must have.
        strict: refuse ``NaN`` and ``Infinity`` (which JSON does not have), and keep integers of any
            length as ``int``; else integers of over 40 digits are
            :class:`~datakit.conversion.sources.class_names.LongInteger`.

    Raises:
        LabelFileError: (``error``) a line that is not JSON, not an object, or lacks a required key.
    """
    names = " and ".join(f'"{key}"' for key in required)
    for line, content in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 is no line break
        content = content.removesuffix("\r")
        if not content.strip():
            continue
        try:
            item = json.loads(content, parse_constant=_no_constant) if strict else \
                json.loads(content, parse_int=json_integer)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise error(f"{where}:{line}: not valid JSON ({exc})") from None
        if not isinstance(item, dict) or any(key not in item for key in required):
            raise error(f"{where}:{line}: expected an object with {names}")
        yield line, item


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def clean_path(path: str, where: str, line: int, error: type[LabelFileError] = LabelFileError) -> str:
    """``path`` as a normal relative ``/``-separated path, or an error naming the line."""
    cleaned = path.strip().replace("\\", "/")
    if not cleaned:
        raise error(f"{where}:{line}: empty path")
    if "\x00" in cleaned:
        raise error(f"{where}:{line}: the path {shown(path)} holds a NUL character, which no file name "
                    "can hold")
    surrogate = lone_surrogate(cleaned)
    if surrogate:
        raise error(f"{where}:{line}: the path {shown(path)} holds {surrogate}, a lone surrogate, which is "
                    "no character; write the file's name in UTF-8 text")
    if len(cleaned) > MAX_PATH:
        raise error(f"{where}:{line}: the path {shown(path)} has {len(cleaned)} characters; a path has at "
                    f"most {MAX_PATH} characters")
    if cleaned.startswith("/") or (len(cleaned) > 1 and cleaned[1] == ":"):
        raise error(f"{where}:{line}: {shown(path)} is absolute; paths are relative to the source folder")
    if ".." in cleaned.split("/"):
        raise error(f"{where}:{line}: {shown(path)} climbs out of the source folder with '..'")
    normal = posixpath.normpath(cleaned)
    if normal == ".":
        raise error(f"{where}:{line}: {shown(path)} names the source folder itself, not an image")
    return normal


def label_names(names: tuple[str, ...], where: str, line: int,
                error: type[LabelFileError] = LabelFileError) -> tuple[str, ...]:
    """The class names of one label, each bounded, none empty, none twice."""
    if not names or any(not name for name in names):
        raise error(f"{where}:{line}: empty class name")
    for name in names:
        problem = label_problem(name)
        if problem is not None:
            raise error(f"{where}:{line}: {problem}")
    if len(set(names)) != len(names):
        raise error(f"{where}:{line}: a class is named twice in one label")
    return names


def check_unique(path: str, line: int, seen: dict[str, int], where: str,
                 error: type[LabelFileError] = LabelFileError) -> None:
    """Refuse a path already named on an earlier line (``seen`` maps paths to lines; ``path`` is added)."""
    if path in seen:
        raise error(f"{where}:{line}: {shown(path)} is already listed on line {seen[path]}; each image may "
                    "be listed once")
    seen[path] = line
