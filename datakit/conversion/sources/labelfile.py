"""Label files: the labels of a conversion given by a file instead of folder names.

``datakit convert SRC DEST --labels FILE`` takes the images and their labels
from ``FILE``, either CSV with the header ``path,label`` or JSON Lines with one
``{"path": ..., "label": ...}`` object per line. Paths are relative to ``SRC``
and ``/``-separated. The class names are the file's labels, sorted, so a label
is a position in that list as with ``ImageFolder``: sorted as numbers when
every label is an integer (``0, 2, 9, 10``, where text would give ``0, 10, 2,
9`` and label 10 index 1), else as text. A store started by a datakit that
sorted integers as text keeps that order when resumed (:func:`in_class_order`).
The records come in the order of the file's rows, which is what lets ``--resume`` continue a
conversion: the file's SHA-256 is recorded in the store's progress
(:func:`label_scan_rules`), and a resume with another file is refused.

A malformed file (no header, a line that is not JSON, a path that is absolute
or climbs out of ``SRC`` with ``..``, a path named twice, a NUL or a lone
surrogate in a path or a name, a path of over :data:`MAX_PATH` characters, a
label out of bounds: :func:`~datakit.conversion.sources.class_names.label_problem`) is
refused as a whole, with the file and line named: a half-understood label
file would give silently wrong labels. JSON Lines break at ``\n`` (or
``\r\n``) only: U+2028 and the other characters ``str.splitlines`` breaks at
are characters of a name. Images under ``SRC`` that the file does not name are
not converted; they are counted (:attr:`LabelledFolder.unlisted`).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field

from datakit.conversion.sources.class_names import (
    class_order,
    json_integer,
    label_problem,
    lone_surrogate,
    shown,
    sorted_classes,
)
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.folder import normalise_extensions
from datakit.errors import LabelFileError, SourceError

_SHOWN = 3
"""Unmatched label-file paths named in the error of a file that matches nothing."""

__all__ = ["MAX_PATH", "LabelRow", "LabelFile", "LabelledFolder", "read_label_file", "label_scan_rules",
           "labelled_folder", "labelled_entries", "sorted_classes", "class_order", "in_class_order"]

MAX_PATH = 4096
"""The most characters a path in a label file may have (Linux's ``PATH_MAX`` is 4096 bytes)."""

_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
_CSV_SEPARATOR = ";"


@dataclass(frozen=True)
class LabelRow:
    """One row of a label file: a relative path, its class names, and where it was read."""

    path: str
    labels: tuple[str, ...]
    line: int
    listed: bool = False
    """The labels were written as a list (JSON Lines), which makes the file multi-label."""


@dataclass(frozen=True)
class LabelFile:
    """A parsed label file.

    Attributes:
        path: the file, absolute.
        digest: the SHA-256 of its bytes, hex.
        rows: its rows, in file order.
    """

    path: str
    digest: str
    rows: list[LabelRow]

    @property
    def classes(self) -> list[str]:
        """Every class name the file uses, sorted (:func:`sorted_classes`)."""
        return sorted_classes({name for row in self.rows for name in row.labels})

    @property
    def multi_label(self) -> bool:
        """Whether a row names several classes (``a;b`` in CSV) or any label is a JSON list."""
        return any(len(row.labels) > 1 or row.listed for row in self.rows)


@dataclass
class LabelledFolder(SourceFolder):
    """A :class:`~datakit.conversion.sources.entries.SourceFolder` whose entries come from a label file.

    Attributes:
        label_file: the file the labels came from, absolute.
        unlisted: images under the root (by extension) that the file does not name.
        multi_label: the file gives images several classes; entries carry them all.
    """

    label_file: str = ""
    unlisted: list[str] = field(default_factory=list)
    multi_label: bool = False

    def hidden_classes(self) -> list[str]:
        """None: a label file's classes are its labels, not folders."""
        return []


def label_scan_rules(label_file: LabelFile) -> str:
    """How the order of a label file's records is named in a store's progress."""
    return f"labels sha256:{label_file.digest}"


def read_label_file(path: str | os.PathLike[str]) -> LabelFile:
    """Parse a CSV or JSON Lines label file.

    The format is told by the extension (``.jsonl``, ``.ndjson``, ``.json``
    are JSON Lines; anything else is CSV).

    Raises:
        LabelFileError: the file cannot be read or is malformed; the message
            names the file and the line.
    """
    location = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        with open(location, "rb") as stream:
            raw = stream.read()
    except OSError as exc:
        raise LabelFileError(f"cannot read the label file {location}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise LabelFileError(f"{location}:{line}: the label file is not UTF-8 text ({exc.reason} at byte "
                             f"{exc.start})") from None
    parse = _json_rows if location.lower().endswith(_JSON_SUFFIXES) else _csv_rows
    rows: list[LabelRow] = []
    seen: dict[str, int] = {}
    for row in parse(text, location):
        path_ = _clean_path(row.path, location, row.line)
        if path_ in seen:
            raise LabelFileError(f"{location}:{row.line}: {shown(path_)} is already listed on line "
                                 f"{seen[path_]}; each image may be listed once")
        seen[path_] = row.line
        rows.append(LabelRow(path_, row.labels, row.line, row.listed))
    if not rows:
        raise LabelFileError(f"{location}: the label file lists no image")
    return LabelFile(location, hashlib.sha256(raw).hexdigest(), rows)


def _csv_rows(text: str, where: str) -> Iterator[LabelRow]:
    records = _csv_records(text, where)
    header = next(records, (1, []))[1]
    if [name.strip() for name in header] != ["path", "label"]:
        raise LabelFileError(f"{where}:1: a CSV label file starts with the header 'path,label', "
                             f"not {shown(','.join(header))}")
    for line, fields in records:
        if not fields or all(not value.strip() for value in fields):
            continue  # a blank line
        if len(fields) != 2:
            raise LabelFileError(f"{where}:{line}: expected 2 fields (path,label), found {len(fields)}")
        names = tuple(name.strip() for name in fields[1].split(_CSV_SEPARATOR))
        yield LabelRow(fields[0], _check_names(names, where, line), line)


def _csv_records(text: str, where: str) -> Iterator[tuple[int, list[str]]]:
    """Each CSV row with its (last) line; a CSV error (a field over the csv module's limit of
    131072 characters) as a :class:`LabelFileError` naming the line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise LabelFileError(f"{where}:{reader.line_num}: not valid CSV ({exc}); a path has at most "
                                 f"{MAX_PATH} characters, a class name far fewer") from None
        yield reader.line_num, fields


def _json_rows(text: str, where: str) -> Iterator[LabelRow]:
    for line, content in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 is no line break
        content = content.removesuffix("\r")
        if not content.strip():
            continue
        try:
            item = json.loads(content, parse_int=json_integer)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise LabelFileError(f"{where}:{line}: not valid JSON ({exc})") from None
        if not isinstance(item, dict) or "path" not in item or "label" not in item:
            raise LabelFileError(f"{where}:{line}: expected an object with \"path\" and \"label\"")
        path, label = item["path"], item["label"]
        if not isinstance(path, str):
            raise LabelFileError(f"{where}:{line}: \"path\" must be a string")
        listed = isinstance(label, list)
        if isinstance(label, str):
            names: tuple[str, ...] = (label,)
        elif isinstance(label, list) and all(isinstance(name, str) for name in label):
            names = tuple(label)
        else:
            raise LabelFileError(f"{where}:{line}: \"label\" must be a class name or a list of them")
        yield LabelRow(path, _check_names(tuple(name.strip() for name in names), where, line), line, listed)


def _check_names(names: tuple[str, ...], where: str, line: int) -> tuple[str, ...]:
    if not names or any(not name for name in names):
        raise LabelFileError(f"{where}:{line}: empty class name")
    for name in names:
        problem = label_problem(name)
        if problem is not None:
            raise LabelFileError(f"{where}:{line}: {problem}")
    if len(set(names)) != len(names):
        raise LabelFileError(f"{where}:{line}: a class is named twice in one label")
    return names


def _clean_path(path: str, where: str, line: int) -> str:
    cleaned = path.strip().replace("\\", "/")
    if not cleaned:
        raise LabelFileError(f"{where}:{line}: empty path")
    if "\x00" in cleaned:
        raise LabelFileError(f"{where}:{line}: the path {shown(path)} holds a NUL character, which no file "
                             "name can hold")
    surrogate = lone_surrogate(cleaned)
    if surrogate:
        raise LabelFileError(f"{where}:{line}: the path {shown(path)} holds {surrogate}, a lone surrogate, "
                             "which is no character; write the file's name in UTF-8 text")
    if len(cleaned) > MAX_PATH:
        raise LabelFileError(f"{where}:{line}: the path {shown(path)} has {len(cleaned)} characters; a path "
                             f"has at most {MAX_PATH} characters")
    if cleaned.startswith("/") or (len(cleaned) > 1 and cleaned[1] == ":"):
        raise LabelFileError(f"{where}:{line}: {shown(path)} is absolute; paths are relative to the source "
                             "folder")
    if ".." in cleaned.split("/"):
        raise LabelFileError(f"{where}:{line}: {shown(path)} climbs out of the source folder with '..'")
    normal = posixpath.normpath(cleaned)
    if normal == ".":
        raise LabelFileError(f"{where}:{line}: {shown(path)} names the source folder itself, not an image")
    return normal


def labelled_folder(root: str, label_file: LabelFile, extensions: tuple[str, ...] = ()) -> LabelledFolder:
    """The source entries a label file names under ``root``, in the file's order.

    Images the file names need not exist: a missing one is skipped and
    listed by the conversion, like a broken image. But a file none of whose
    paths names a file under ``root`` is refused (the paths of another folder,
    or with a prefix too many, ``photos/cat/1.jpg`` for ``cat/1.jpg``): it
    would convert nothing. Images under ``root`` with an image extension that
    the file does not name are counted as unlisted.

    In a multi-label file (:attr:`LabelFile.multi_label`) each entry's
    ``classes`` lists its classes.

    Raises:
        SourceError: ``root`` is not a directory, or the file names no file under it.
    """
    if not os.path.isdir(root):
        raise SourceError(f"{root} is not a directory")
    taken = normalise_extensions(extensions)
    classes = label_file.classes
    positions = {name: label for label, name in enumerate(classes)}
    entries = []
    multi = label_file.multi_label
    for row in label_file.rows:
        indices = tuple(sorted(positions[name] for name in row.labels))
        entries.append(SourceEntry(row.path, indices[0], indices if multi else ()))
    named = {row.path for row in label_file.rows}
    images = _image_files(root, taken)
    found = set(images)
    if not any(row.path in found or os.path.lexists(os.path.join(root, row.path)) for row in label_file.rows):
        raise _matches_nothing(label_file, f"names a file under {root}", images,
                               f"{root} holds no image file" if not images else "")
    unlisted = [path for path in images if path not in named]
    return LabelledFolder(root, classes, entries, extensions=taken, class_order=class_order(classes),
                          label_file=label_file.path, unlisted=unlisted, multi_label=multi)


def in_class_order(folder: SourceFolder, classes: list[str]) -> SourceFolder:
    """``folder`` with its labels as positions in ``classes``, the class order of the store it resumes.

    Only a label file's classes can come in another order: a store started by a
    datakit that sorted integer labels as text keeps that order, so that its
    records and the ones still to come carry the same labels. Anything else is
    returned as it is (the resume check refused other classes already).
    """
    if classes == folder.classes or sorted(classes) != sorted(folder.classes):
        return folder
    position = [classes.index(name) for name in folder.classes]
    entries = []
    for entry in folder.entries:
        indices = tuple(sorted(position[index] for index in entry.classes))  # a multi-label entry's
        entries.append(dataclasses.replace(entry, label=indices[0] if indices else position[entry.label],
                                           classes=indices))
    return dataclasses.replace(folder, classes=list(classes), entries=entries,
                               class_order=class_order(classes))


def _image_files(root: str, extensions: tuple[str, ...]) -> list[str]:
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            if name.lower().endswith(extensions):
                found.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return found


def labelled_entries(source: SourceFolder, label_file: LabelFile) -> LabelledFolder:
    """The entries a label file names in ``source`` (by their names), in the file's order.

    A name the source does not hold becomes an entry with no location, skipped
    and listed when read; entries the file does not name are counted as unlisted.

    Raises:
        SourceError: the file names no entry of ``source`` at all.
    """
    found = {entry.path: entry.location for entry in source.entries}
    if not any(row.path in found for row in label_file.rows):
        raise _matches_nothing(label_file, f"names an entry of {source.root}",
                               [entry.path for entry in source.entries], "")
    classes = label_file.classes
    position = {name: label for label, name in enumerate(classes)}
    multi = label_file.multi_label
    entries = []
    for row in label_file.rows:
        indices = tuple(sorted(position[name] for name in row.labels))
        entries.append(SourceEntry(row.path, indices[0], indices if multi else (), found.get(row.path, ())))
    named = {row.path for row in label_file.rows}
    unlisted = [entry.path for entry in source.entries if entry.path not in named]
    return LabelledFolder(source.root, classes, entries, ignored=source.ignored,
                          class_order=class_order(classes), kind=source.kind, reader=source.reader,
                          rejected=source.rejected, label_file=label_file.path, unlisted=unlisted,
                          multi_label=multi)


def _matches_nothing(label_file: LabelFile, what: str, names: list[str], instead: str) -> SourceError:
    """The error for a label file none of whose paths ``what`` (names a file, an entry): its first
    paths, and the first of ``names``, what they were compared against."""
    rows = label_file.rows
    listed = ", ".join(repr(row.path) for row in rows[:_SHOWN]) + (", ..." if len(rows) > _SHOWN else "")
    against = instead or ("the names there are like " + ", ".join(repr(name) for name in names[:_SHOWN])
                          + (", ..." if len(names) > _SHOWN else ""))
    return SourceError(f"none of the {len(rows)} paths in {label_file.path} {what} ({listed}); {against}; "
                       "the paths are relative to the source, /-separated")
