"""An LMDB whose every value is an encoded image, as a conversion source.

LSUN's category LMDBs are the common case (WebP bytes keyed by image id;
torchvision reads them with ``datasets.LSUN``). The keys say nothing about
classes, so the caller gives them: ``--class NAME`` for the whole source, or
``--labels FILE`` naming each key (a label file as for a folder, its paths the
keys). One class per source composes with ``--append``::

    datakit convert bedroom_lmdb NEW --class bedroom
    datakit convert church_lmdb NEW --class church --append

The samples come in key order (LMDB's byte order), or in the label file's.
Each is an entry named ``<source name>/<key>`` (``bedroom_lmdb/0a1b...``), so
that two sources with the same keys stay apart in one store; its value is
read by the reader processes in one long read transaction each
(:class:`~datakit.conversion.sources.foreign.lmdb_values.LMDBValues`) and checked like any
image file: a value that is not an image is skipped and listed by that name.
"""

from __future__ import annotations

import os

from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.files import files_digest
from datakit.conversion.sources.foreign.keyed_labels import keyed_entries
from datakit.conversion.sources.foreign.lmdb_values import LMDBValues, open_source
from datakit.conversion.sources.foreign.recipe_lmdb import source_name
from datakit.conversion.sources.labelfile import LabelFile, label_scan_rules
from datakit.errors import SourceError
from datakit.stores.lmdb.foreign import data_file

__all__ = ["scan_image_lmdb"]


def scan_image_lmdb(root: str, class_name: str | None,
                    label_file: LabelFile | None) -> tuple[SourceFolder, str]:
    """The images of the LMDB at ``root``, of the class ``class_name`` or labelled by ``label_file``,
    and the scan rules naming them in a store's progress.

    Args:
        root: the environment, a folder or a single file.
        class_name: the one class of every image.
        label_file: labels keyed by the LMDB's keys (not with ``class_name``).

    Raises:
        SourceError: no labels given, both given, an empty LMDB, or one that cannot be opened.
    """
    if (class_name is None) == (label_file is None):
        raise SourceError(f"{root} is an LMDB of encoded images, whose keys carry no labels: give the class "
                          "of all its images with --class NAME (class_name=), or a label file naming each "
                          "key with --labels FILE" if class_name is None else
                          f"--class and --labels both give the labels of {root}; choose one")
    stem = source_name(root)
    keys = _keys(root)
    if not keys:
        raise SourceError(f"{root} is an empty LMDB: there is nothing to import")
    digest = files_digest([data_file(root)], os.path.dirname(root))
    reader = LMDBValues(root, len(stem) + 1, recipe=False)
    folder = keyed_entries(root, stem, keys, class_name, label_file, reader, "image_lmdb")
    if label_file is None:
        return folder, f"image_lmdb class={class_name} sha256:{digest}"
    return folder, f"image_lmdb sha256:{digest} {label_scan_rules(label_file)}"


def _keys(root: str) -> list[str]:
    """Every key of the environment, in order, as text (one read transaction, values not read)."""
    env = open_source(root)
    try:
        with env.begin(buffers=True) as txn:
            raw = [bytes(key) for key in txn.cursor().iternext(keys=True, values=False)]
    finally:
        env.close()
    keys = []
    for key in raw:
        try:
            keys.append(key.decode("utf-8"))
        except UnicodeDecodeError:
            raise SourceError(f"{root}: the key {key!r} is not UTF-8 text; datakit names records by their "
                              "keys") from None
    return keys
