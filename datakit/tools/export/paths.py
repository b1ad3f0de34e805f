"""Where an export's image files go: each record's source path, checked before anything is written.

A folder export and a COCO export write each record to ``DIR/<its source
path>``. Before the first file is written every path is checked, so an
export never stops half-way or overwrites one image with another: a path
that would escape ``DIR`` or holds a NUL (a damaged or foreign store), two
records at one file, one record's file where another's folder goes (``a``
and ``a/b.jpg``), or a record where a file the export writes beside the
images goes (the label file, ``annotations.json``). Paths are compared case
folded, as a case-insensitive file system (macOS, Windows) would overwrite
one with the other.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from datakit.errors import ExportError
from datakit.format.records import record_key
from datakit.stores.contract import StoreSpec
from datakit.tools.export.folder import reserved_name

__all__ = ["file_name", "check_placeable"]


def file_name(path: str, raw: bool, spec: StoreSpec) -> str:
    """The file a record of source ``path`` is exported to, relative to ``DIR`` (a raw record's as ``.png``).

    Raises:
        ExportError: the path would escape ``DIR``, holds a NUL, or is a name the export keeps for itself.
    """
    cleaned = posixpath.normpath(path)
    if cleaned.startswith(("/", "../")) or cleaned in ("..", ".") or "\\" in cleaned or ":" in cleaned[:2]:
        raise ExportError(f"{spec.describe()}: the source path {path!r} would be written outside the "
                          "export folder; the store is damaged or was not written by datakit")
    if "\x00" in cleaned:
        raise ExportError(f"{spec.describe()}: the source path {path!r} holds a NUL character, which no file "
                          "name can hold; nothing was exported")
    name = posixpath.splitext(cleaned)[0] + ".png" if raw else cleaned
    if reserved_name(name):
        raise ExportError(f"{spec.describe()}: the source path {path!r} is a name datakit export keeps "
                          "for its own bookkeeping; nothing was exported")
    return name


def check_placeable(paths: Sequence[str], beside: Mapping[str, str], spec: StoreSpec) -> None:
    """Refuse, before anything is written, files that one folder cannot hold side by side.

    Args:
        paths: each record's file (:func:`file_name`), in index order.
        beside: the files the export writes beside the images, by name, each with what it is
            (``{"labels.csv": "the label file"}``).
        spec: the store, named in the error.

    Raises:
        ExportError: two of them would be one file, or a file would be where another needs a folder.
    """
    names = list(beside)
    files: dict[str, int] = {name.lower(): -1 - position for position, name in enumerate(names)}

    def owner(index: int) -> str:
        if index < 0:
            name = names[-1 - index]
            return f"{name!r}, {beside[name]} this export writes beside the images,"
        return f"record {record_key(index)!r} at {paths[index]!r}"

    for index, path in enumerate(paths):
        other = files.setdefault(path.lower(), index)
        if other != index:
            raise ExportError(f"{spec.describe()}: {owner(other)} and {owner(index)} would be the same file; "
                              "nothing was exported")
    for index, path in enumerate(paths):
        parts = path.lower().split("/")
        for depth in range(1, len(parts)):
            folder = files.get("/".join(parts[:depth]))
            if folder is not None:
                raise ExportError(f"{spec.describe()}: {owner(folder)} is a file where {owner(index)} needs "
                                  "a folder; nothing was exported")
