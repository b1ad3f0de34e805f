"""Where a source entry's bytes come from, in the reader processes.

Every source (an image folder, a label file, a Hugging Face dataset, WebDataset
shards) yields the same :class:`~datakit.conversion.sources.entries.SourceEntry`: a name,
a label, and a location. The reading stage hands each entry to its source's
:class:`~datakit.conversion.sources.entries.EntryBytes`, which returns the image's bytes after room for a
record header (so that sealing the record copies nothing); every image then goes
through the same checks (:func:`datakit.conversion.images.checks.check_source_image`).

An ``EntryBytes`` is a small picklable description (file names, a
column), sent to each reader process once; whatever it opens (a dataset's
memory-mapped tables) it opens lazily in the process that reads, never
carried across ``fork``. Offsets and row numbers are only right for the files
they were found in, so a source made of files is identified by
:func:`files_digest` in a store's progress: ``--resume`` and ``--append``
refuse to continue from files that changed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from datakit.conversion.images.checks import read_framed
from datakit.conversion.sources.entries import EntryBytes, SourceEntry, SourceFolder

__all__ = ["EntryBytes", "FileBytes", "entry_bytes", "files_digest"]


@dataclass(frozen=True)
class FileBytes:
    """The bytes of image files: an entry's ``path`` under ``root``."""

    root: str

    def read(self, entry: SourceEntry) -> bytearray:
        return read_framed(os.path.join(self.root, *entry.path.split("/")))

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Nothing to fetch ahead: reads are local."""

    def close(self) -> None:
        """Nothing to release: each file is opened and closed as it is read."""


def entry_bytes(folder: SourceFolder) -> EntryBytes:
    """How the reader processes read ``folder``'s entries."""
    return folder.reader if folder.reader is not None else FileBytes(folder.root)


def files_digest(paths: Sequence[str], root: str) -> str:
    """The SHA-256 of the files' names (relative to ``root``), sizes and modification times, hex.

    It changes when a file is added, removed, renamed, rewritten or touched,
    which is when stored offsets and row numbers may no longer point at the
    same images; reading every byte to hash would cost as much as converting.
    """
    digest = hashlib.sha256()
    for path in paths:
        status = os.stat(path)
        name = os.path.relpath(path, root) if os.path.isdir(root) else os.path.basename(path)
        digest.update(f"{name}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()
