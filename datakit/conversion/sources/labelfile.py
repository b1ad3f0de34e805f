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

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from datakit.conversion.sources.class_names import class_order, shown, sorted_classes
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.folder import normalise_extensions
from datakit.conversion.sources.tabular import (
    MAX_PATH,
    check_unique,
    clean_path,
    csv_records,
    is_json_lines,
    json_objects,
    label_names,
    read_row_file,
)
from datakit.errors import LabelFileError, SourceError

_SHOWN = 3
"""Unmatched label-file paths named in the error of a file that matches nothing."""

__all__ = ["MAX_PATH", "LabelRow", "LabelFile", "LabelledFolder", "read_label_file", "label_scan_rules",
           "csv_label", "json_label",
           "labelled_folder", "labelled_entries", "sorted_classes", "class_order", "in_class_order"]

_CSV_SEPARATOR = ";"
_CSV_HINT = f"a path has at most {MAX_PATH} characters, a class name far fewer"


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
    read = read_row_file(path, "label file")
    parse = _json_rows if is_json_lines(read.path) else _csv_rows
    rows: list[LabelRow] = []
    seen: dict[str, int] = {}
    for row in parse(read.text, read.path):
        path_ = clean_path(row.path, read.path, row.line)
        check_unique(path_, row.line, seen, read.path)
        rows.append(LabelRow(path_, row.labels, row.line, row.listed))
    if not rows:
        raise LabelFileError(f"{read.path}: the label file lists no image")
    return LabelFile(read.path, read.digest, rows)


def _csv_rows(text: str, where: str) -> Iterator[LabelRow]:
    records = csv_records(text, where, _CSV_HINT)
    header = next(records, (1, []))[1]
    if [name.strip() for name in header] != ["path", "label"]:
        raise LabelFileError(f"{where}:1: a CSV label file starts with the header 'path,label', "
                             f"not {shown(','.join(header))}")
    for line, fields in records:
        if not fields or all(not value.strip() for value in fields):
            continue  # a blank line
        if len(fields) != 2:
            raise LabelFileError(f"{where}:{line}: expected 2 fields (path,label), found {len(fields)}")
        yield LabelRow(fields[0], label_names(csv_label(fields[1]), where, line), line)


def csv_label(cell: str) -> tuple[str, ...]:
    """The class names of a CSV label cell: ``a;b`` names two."""
    return tuple(name.strip() for name in cell.split(_CSV_SEPARATOR))


def json_label(label: object, where: str, line: int,
               error: type[LabelFileError] = LabelFileError) -> tuple[tuple[str, ...], bool]:
    """The class names of a JSON Lines ``"label"`` (a name, or a list of them), and whether it is a list."""
    if isinstance(label, str):
        names: tuple[str, ...] = (label,)
    elif isinstance(label, list) and all(isinstance(name, str) for name in label):
        names = tuple(label)
    else:
        raise error(f"{where}:{line}: \"label\" must be a class name or a list of them")
    return label_names(tuple(name.strip() for name in names), where, line, error), isinstance(label, list)


def _json_rows(text: str, where: str) -> Iterator[LabelRow]:
    for line, item in json_objects(text, where, ("path", "label")):
        path = item["path"]
        if not isinstance(path, str):
            raise LabelFileError(f"{where}:{line}: \"path\" must be a string")
        names, listed = json_label(item["label"], where, line)
        yield LabelRow(path, names, line, listed)


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
    The source's other fields (its schema, and how they are read) stay as they are.

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
                          multi_label=multi, schema=source.schema, fields=source.fields, notes=source.notes)


def _matches_nothing(label_file: LabelFile, what: str, names: list[str], instead: str) -> SourceError:
    """The error for a label file none of whose paths ``what`` (names a file, an entry): its first
    paths, and the first of ``names``, what they were compared against."""
    rows = label_file.rows
    listed = ", ".join(repr(row.path) for row in rows[:_SHOWN]) + (", ..." if len(rows) > _SHOWN else "")
    against = instead or ("the names there are like " + ", ".join(repr(name) for name in names[:_SHOWN])
                          + (", ..." if len(names) > _SHOWN else ""))
    return SourceError(f"none of the {len(rows)} paths in {label_file.path} {what} ({listed}); {against}; "
                       "the paths are relative to the source, /-separated")
