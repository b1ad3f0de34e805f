"""The folder an export writes: whole files only, and a marker until it is finished.

An export can be killed at any moment (Ctrl-C, SIGTERM, SIGKILL, a power
loss). So that a folder never looks finished when it is not:

- the folder carries :data:`MARKER` from before the first file until after
  the last one, made durable (``os.sync``) before the marker goes; a plain
  export refuses a folder with the marker and ``export(..., resume=True)``
  finishes it;
- every file is written under a temporary name (:data:`PARTIAL_PREFIX`) in
  its folder and renamed into place, so a file under its final name is whole
  (after a process kill; a power loss can still leave one short, which is why
  a resumed export compares every file with its record, see
  :func:`holds_exactly`);
- the marker names the store (its length and creation time), so a resume
  never mixes the images of two stores.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from datakit.errors import ExportError

__all__ = ["MARKER", "PARTIAL_PREFIX", "ExportIdentity", "FolderState", "folder_state", "start", "finish",
           "write_whole", "place", "holds_exactly", "remove_partials", "reserved_name"]

MARKER = ".datakit-export-unfinished"
"""The file an unfinished export folder carries at its top."""

PARTIAL_PREFIX = ".datakit-part-"
"""The start of a file name being written; such files are removed when an export resumes."""


@dataclass(frozen=True)
class ExportIdentity:
    """Which store an export is of, as the marker keeps it.

    Attributes:
        store: the store, as messages name it.
        length: its records.
        created: its manifest's creation time (two stores differ in it).
        format: what the export writes: ``"folder"`` (image files) or
            ``"webdataset"`` (tar shards); markers written before it are ``"folder"``.
    """

    store: str
    length: int
    created: str
    format: str = "folder"

    def differs_from(self, other: ExportIdentity) -> str | None:
        """What differs between two identities, in words; ``None`` when they are the same export."""
        if (self.length, self.created) == (other.length, other.created):
            if self.format == other.format:
                return None
            return f"it was an export as {self.format}, this one is as {other.format}"
        return (f"{self.store} ({self.length} records, created {self.created}), "
                f"while {other.store} holds {other.length} records, created {other.created}")


@dataclass(frozen=True)
class FolderState:
    """What an export finds at its folder.

    Attributes:
        exists: the folder exists.
        empty: it holds nothing.
        unfinished: the export that was writing it started: what it was of,
            read from the marker; ``None`` when there is no marker.
    """

    exists: bool
    empty: bool
    unfinished: ExportIdentity | None


def folder_state(target: str) -> FolderState:
    """Look at ``target`` without changing it.

    Raises:
        ExportError: ``target`` is a file, or its marker cannot be read.
    """
    if not os.path.lexists(target):
        return FolderState(exists=False, empty=True, unfinished=None)
    if not os.path.isdir(target):
        raise ExportError(f"{target} is a file, not a folder; export into a new or empty folder")
    marker = os.path.join(target, MARKER)
    if not os.path.lexists(marker):
        return FolderState(exists=True, empty=not os.listdir(target), unfinished=None)
    try:
        with open(marker, encoding="utf-8") as stream:
            data: dict[str, Any] = json.load(stream)
        identity = ExportIdentity(str(data["store"]), int(data["length"]), str(data["created"]),
                                  str(data.get("format", "folder")))
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{marker} is damaged ({exc}); this folder holds an unfinished export of an "
                          "unknown store: export into a new folder") from None
    return FolderState(exists=True, empty=False, unfinished=identity)


def start(target: str, identity: ExportIdentity) -> None:
    """Create ``target`` (when missing) and mark it unfinished, before any file is written."""
    os.makedirs(target, exist_ok=True)
    write_whole(os.path.join(target, MARKER), json.dumps(asdict(identity)).encode(), "marker")


def finish(target: str) -> None:
    """Make every file written durable, then remove the marker: the folder is finished.

    ``os.sync`` once, rather than an ``fsync`` per file: an export of a
    million files would otherwise spend its time waiting for the disk.
    """
    os.sync()
    os.remove(os.path.join(target, MARKER))
    descriptor = os.open(target, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the marker's removal itself
    finally:
        os.close(descriptor)


def write_whole(path: str, payload: bytes, tag: str) -> None:
    """Write ``payload`` to ``path`` under a temporary name, then rename it into place.

    Args:
        path: the file's final path (replaced when it exists).
        payload: its bytes.
        tag: makes the temporary name unique in the folder (a record's index).
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f"{PARTIAL_PREFIX}{tag}")
    with open(partial, "wb") as stream:
        stream.write(payload)
    os.replace(partial, path)


def place(path: str, payload: bytes, tag: str, resumed: bool) -> str:
    """Write ``payload`` whole at ``path`` (:func:`write_whole`), keeping, when the export resumes, a file
    there that holds it already.

    Returns:
        ``"kept"`` (resumed, and the file was whole), ``"rewritten"`` (resumed, and the file there was
        short or different) or ``"written"``.

    Raises:
        ExportError: a fresh export finds a file there: something else writes into its folder.
    """
    if resumed and holds_exactly(path, payload):
        return "kept"
    there = os.path.lexists(path)
    if there and not resumed:  # a fresh export into an empty folder: nothing is there
        raise ExportError(f"{path} appeared while the export was writing; export into a folder that nothing "
                          "else writes to")
    write_whole(path, payload, tag)
    return "rewritten" if there else "written"


def holds_exactly(path: str, payload: bytes) -> bool:
    """Whether the file at ``path`` holds ``payload``, byte for byte (a missing file does not)."""
    try:
        if os.path.getsize(path) != len(payload):
            return False
        with open(path, "rb") as stream:
            return stream.read() == payload
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False


def remove_partials(target: str) -> int:
    """Remove the files an interrupted export left under temporary names; return how many."""
    removed = 0
    for folder, _, names in os.walk(target):
        for name in names:
            if name.startswith(PARTIAL_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(folder, name))
                    removed += 1
    return removed


def reserved_name(path: str) -> bool:
    """Whether a ``/``-separated relative path is one an export keeps for itself."""
    return path == MARKER or path.rpartition("/")[2].startswith(PARTIAL_PREFIX)
