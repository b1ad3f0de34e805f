"""A Hugging Face row's image: its stored bytes, or the file its path names inside the image root.

An ``Image`` column holds ``{"bytes", "path"}`` per row. Bytes are the image;
a row with a path and no bytes (a dataset built from files and saved without
embedding them) names a file, and a table is as untrusted as any source: an
absolute path or one climbing out with ``..`` would pull a private image into
the store, and ``/dev/zero`` would be read until memory ran out. So a path
is resolved inside the **image root**, the dataset's folder (the folder of a
``.parquet``/``.arrow`` file given as SRC) unless ``--image-root DIR``
(``image_root=``) names another: relative paths are joined to it, symlinks
resolved, and whatever lands outside it is skipped and listed, as is
anything that is not a regular file (:mod:`datakit.conversion.file_reads`).

:class:`ArrowBytes` reads rows in the reader processes; :func:`check_path_images`
refuses, before a store is created, a dataset whose images are all paths and
none of which names a file there, saying where datakit looked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from datakit.conversion.file_reads import BadImage, read_framed
from datakit.conversion.sources.entries import SourceEntry
from datakit.errors import SourceError, Spelling
from datakit.format.records import HEADER_SIZE

__all__ = ["ArrowBytes", "resolve_image_path", "check_path_images"]

_IMAGE_ROOT = Spelling("image_root=DIR", "--image-root DIR")
_SHOWN = 3


def resolve_image_path(path: str, image_root: str) -> str:
    """The real path of the file ``path`` names, relative to ``image_root`` or absolute.

    Raises:
        BadImage: the real path lies outside ``image_root`` (symlinks
            resolved), or is no path at all; the message says what to do.
    """
    try:
        located = os.path.realpath(os.path.join(image_root, path))  # an absolute path stays itself
    except ValueError:  # a NUL character
        raise BadImage("it holds a NUL character, so it is no path") from None
    real_root = os.path.realpath(image_root)
    if os.path.commonpath([real_root, located]) != real_root:
        raise BadImage(f"it lies outside {image_root}, the one folder datakit reads image paths from; name "
                       f"the folder the images are in with {_IMAGE_ROOT.command_line} ({_IMAGE_ROOT.python} "
                       "in Python)")
    return located


class ArrowBytes:
    """The image bytes of rows of Arrow files; each process opens the files it reads once.

    Args:
        files: the Arrow files; an entry's location is ``(file index, row)``.
        column: the ``Image`` column.
        image_root: the folder that image paths (rows holding a path, not bytes)
            are resolved in, and may not leave.
    """

    def __init__(self, files: Sequence[str], column: str, image_root: str) -> None:
        self.files, self.column, self.image_root = tuple(files), column, image_root
        self._opened: dict[int, Any] = {}
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self.files, "column": self.column, "image_root": self.image_root}  # nothing opened

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["files"], state["column"], state["image_root"])  # type: ignore[misc]

    def read(self, entry: SourceEntry) -> bytearray:
        if not entry.location:
            raise BadImage("not a row of the dataset")
        index, row = entry.location
        value = self._table(index)[row][self.column]
        if value is None:
            raise BadImage(f"the row has no image in column {self.column!r}")
        data, path = value.get("bytes"), value.get("path")
        if data is not None:
            framed = bytearray(HEADER_SIZE + len(data))
            framed[HEADER_SIZE:] = data
            return framed
        if not path:
            raise BadImage(f"the row's {self.column!r} holds neither bytes nor a path")
        where = f"the row's {self.column!r} holds no bytes, only the path {path!r}"
        try:
            located = resolve_image_path(path, self.image_root)
        except BadImage as exc:
            raise BadImage(f"{where}: {exc}") from None
        if not os.path.lexists(located):
            raise BadImage(f"{where}, which does not exist (looked for {located}; name the folder the "
                           f"paths are relative to with {_IMAGE_ROOT.command_line})")
        try:
            return read_framed(located)
        except BadImage as exc:
            raise BadImage(f"{where}: {exc}") from None

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Nothing to fetch ahead: reads are local."""

    def close(self) -> None:
        self._opened.clear()

    def _table(self, index: int) -> Any:
        if self._pid != os.getpid():  # forked: open our own
            self._opened, self._pid = {}, os.getpid()
        table = self._opened.get(index)
        if table is None:
            import datasets

            opened = datasets.Dataset.from_file(self.files[index]).select_columns([self.column])
            table = opened.cast_column(self.column, datasets.Image(decode=False))
            self._opened[index] = table
        return table


def check_path_images(root: str, tables: Sequence[Any], column: str, image_root: str) -> None:
    """Refuse a dataset none of whose rows can give an image: no row holds bytes, and no path
    names a regular file inside ``image_root``. Rows are read by Arrow, not one by one in Python,
    unless every image is a path.

    Raises:
        SourceError: no row's image can be read, saying where datakit looked and what to pass.
    """
    paths: list[str] = []
    for dataset in tables:
        found = _paths_if_no_bytes(dataset.data.column(column))
        if found is None:
            return  # a row holds bytes (or the column is of no kind a row can be read from)
        paths.extend(found)
    if any(_names_a_file(path, image_root) for path in paths):
        return
    if not paths:
        raise SourceError(f"{root}: none of its rows holds an image in its column {column!r} (every one is "
                          "null, or holds neither bytes nor a path)")
    shown = ", ".join(repr(path) for path in paths[:_SHOWN]) + (", ..." if len(paths) > _SHOWN else "")
    raise SourceError.advising(
        "{root}: the images of its {count} rows are paths in {column}, not bytes, and none of them names a "
        "file: datakit looked for them under {base} ({shown}; paths outside it are not read); name the "
        "folder they are relative to with {image_root}", root=root, count=len(paths), column=repr(column),
        base=image_root, shown=shown, image_root=_IMAGE_ROOT)


def _paths_if_no_bytes(column: Any) -> list[str] | None:
    """The paths of an ``Image`` column's rows when no row holds bytes, else ``None``."""
    import pyarrow
    import pyarrow.compute

    paths: list[str] = []
    for chunk in column.chunks:
        kind = chunk.type
        if not pyarrow.types.is_struct(kind) or kind.get_field_index("bytes") < 0 \
                or kind.get_field_index("path") < 0:
            return None
        has_bytes = pyarrow.compute.and_(chunk.is_valid(), chunk.field("bytes").is_valid())
        if pyarrow.compute.any(has_bytes).as_py():
            return None
        named = pyarrow.compute.and_(chunk.is_valid(), chunk.field("path").is_valid())
        paths.extend(str(path) for path in chunk.field("path").filter(named).to_pylist())
    return paths


def _names_a_file(path: str, image_root: str) -> bool:
    try:
        return os.path.isfile(resolve_image_path(path, image_root))
    except BadImage:
        return False
