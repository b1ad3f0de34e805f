"""Labels an LMDB's values do not carry, given by the caller: ``--class NAME`` or ``--labels FILE``.

An LMDB of encoded images (LSUN's, :mod:`datakit.conversion.sources.foreign.image_lmdb`) and the
pickle recipe's store of bare pixel arrays (:mod:`datakit.conversion.sources.foreign.recipe_lmdb`)
hold images only. The caller gives the class of them all, or a label file
whose paths are the LMDB's keys (as a folder's label file names its files).
Either way each sample is an entry named ``<source name>/<key>``
(``bedroom_lmdb/0a1b...``), so that two sources with the same keys stay apart
in one store, and shown by that name (never joined to the source's path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from datakit.conversion.sources.entries import EntryBytes, SourceEntry, SourceFolder
from datakit.conversion.sources.labelfile import LabelFile, labelled_entries

__all__ = ["keyed_entries"]


def keyed_entries(root: str, stem: str, keys: Sequence[str], class_name: str | None,
                  label_file: LabelFile | None, reader: EntryBytes, kind: str) -> SourceFolder:
    """The samples of ``keys``, all of ``class_name``'s class, or labelled (and ordered) by ``label_file``.

    Args:
        root: the LMDB (a folder or a single file).
        stem: its name, which each entry's name starts with.
        keys: the samples' keys, as text, in order.
        class_name: the class of every sample (when ``label_file`` is ``None``).
        label_file: labels keyed by the LMDB's keys: its rows' order is the samples',
            keys it does not name are unlisted, and names that are no key are
            skipped when read.
        reader: how the reader processes get each entry's bytes.
        kind: the source kind (``"image_lmdb"``, ``"recipe_lmdb"``).
    """
    if label_file is None:
        entries = [SourceEntry(f"{stem}/{key}", 0) for key in keys]
        return SourceFolder(root, [str(class_name)], entries, kind=kind, reader=reader, standalone_names=True)
    scanned = SourceFolder(root, [""], [SourceEntry(key, 0) for key in keys], kind=kind)
    folder = labelled_entries(scanned, label_file)
    return dataclasses.replace(
        folder, reader=reader, standalone_names=True,
        entries=[dataclasses.replace(entry, path=f"{stem}/{entry.path}") for entry in folder.entries],
        unlisted=[f"{stem}/{path}" for path in folder.unlisted])
