"""The pickle recipe's LMDB store as a conversion source.

``datakit convert old.lmdb NEW`` imports what ``benchmarks/pickle_recipe.py``'s
``folder_to_lmdb`` wrote, a folder or a single file (``subdir=False``): the
samples in ``__keys__``'s order, so that sample ``i`` of the new store is the
recipe's sample ``i``; each value ``(image, label)`` loaded through the
allow-list (:mod:`datakit.convert.safe_unpickle`), never ``pickle.loads``.
Images stay as they were: the file's bytes (checked like any image file), or
pixel arrays, stored as raw records (the conversion's format is then
``raw``). The classes are the integer labels, as text, sorted as numbers
(``"0", "1", "2", "10"``), so a label keeps its value when every integer from
0 up is used.

Each sample is an entry named ``<source name>/<key>`` (``old.lmdb/42``).
Refused records are skipped and listed by that name, with nothing written for
them: a pickle naming a global outside the allow-list, a value that is no
image nor numeric array, a float pixel array, a key listed in ``__keys__``
but missing (or empty, or longer than LMDB's keys), keys beyond
``__len__``. ``__len__`` larger than ``__keys__`` is listed as
``<source name>/__len__``. The values are read twice: once here
for the labels, once by the reader processes for the images, in one long
read transaction each (:class:`~datakit.convert.foreign_lmdb.LMDBValues`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import lmdb

from datakit.convert.entry_bytes import files_digest
from datakit.convert.foreign_lmdb import LMDBValues, data_file, key_problem, open_source, recipe_keys
from datakit.convert.images import BadImage
from datakit.convert.labelfile import class_order, sorted_classes
from datakit.convert.recipe_values import is_pixel_array, load_value
from datakit.convert.safe_unpickle import RefusedPickle
from datakit.convert.source import SourceEntry, SourceFolder
from datakit.errors import SourceError

__all__ = ["scan_recipe_lmdb", "source_name"]


@dataclass
class _Found:
    names: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    arrays: bool | None = None
    """Whether the first readable image is a pixel array (``None``: none was readable)."""


def source_name(root: str) -> str:
    """The name entries of the LMDB at ``root`` start with: its file or folder name."""
    return os.path.basename(os.path.abspath(root).rstrip(os.sep))


def scan_recipe_lmdb(root: str) -> tuple[SourceFolder, str]:
    """The samples of the recipe store at ``root`` and the scan rules naming them in a store's progress.

    Raises:
        SourceError: ``root`` is not an LMDB, or its ``__keys__`` cannot be read safely.
    """
    stem = source_name(root)
    env = open_source(root)
    try:
        with env.begin(buffers=True) as txn:
            try:
                keys, length = recipe_keys(txn)
            except RefusedPickle as exc:
                raise SourceError(f"{root}: __keys__ cannot be read safely ({exc}); the samples' order "
                                  "is unknown, so nothing is imported") from None
            found = _scan_values(txn, stem, keys)
    finally:
        env.close()
    found.rejected.extend(_length_problems(stem, keys, length, found))
    classes = sorted_classes({str(label) for label in found.labels})
    position = {name: index for index, name in enumerate(classes)}
    entries = [SourceEntry(name, position[str(label)]) for name, label in zip(found.names, found.labels,
                                                                               strict=True)]
    if not entries and not found.rejected:
        raise SourceError(f"{root} is a pickle-recipe store with no samples (__keys__ is empty)")
    form = "subdir" if os.path.isdir(root) else "file"
    rules = f"recipe_lmdb {form} sha256:{files_digest([data_file(root)], os.path.dirname(root))}"
    folder = SourceFolder(root, classes, entries, class_order=class_order(classes) if classes else "numeric",
                          kind="recipe_lmdb", reader=LMDBValues(root, len(stem) + 1, recipe=True),
                          rejected=found.rejected, payload_kind="raw" if found.arrays else "")
    return folder, rules


def _scan_values(txn: lmdb.Transaction, stem: str, keys: list[bytes]) -> _Found:
    """Every listed key's label, in ``__keys__``'s order; the refused ones with their reasons."""
    found = _Found()
    seen: set[bytes] = set()
    for key in keys:
        try:
            name = f"{stem}/{key.decode('utf-8')}"
        except UnicodeDecodeError:
            found.rejected.append((f"{stem}/{key!r}", "the key is not UTF-8 text; datakit names records by "
                                                      "their keys"))
            continue
        if key in seen:
            found.rejected.append((name, "listed twice in __keys__; imported once, where it is first listed"))
            continue
        seen.add(key)
        if key_problem(key):
            found.rejected.append((name, key_problem(key)))
            continue
        value = txn.get(key)
        if value is None:
            found.rejected.append((name, "listed in __keys__, but missing from the LMDB"))
            continue
        try:
            image, label = load_value(value)
        except BadImage as exc:
            found.rejected.append((name, str(exc)))
            continue
        if found.arrays is None:
            found.arrays = is_pixel_array(image)
        found.names.append(name)
        found.labels.append(label)
    return found


def _length_problems(stem: str, keys: list[bytes], length: object, found: _Found) -> list[tuple[str, str]]:
    """``__len__`` checked against ``__keys__``: keys beyond it leave the import, one line each."""
    if length == len(keys):
        return []
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        return [(f"{stem}/__len__", f"is {length!r}, not the number of samples; __keys__'s "
                                    f"{len(keys)} keys were imported")]
    if length > len(keys):
        return [(f"{stem}/__len__", f"says {length} samples, but __keys__ lists {len(keys)}: the recipe's "
                                    f"samples {len(keys)} to {length - 1} have no key")]
    beyond = {f"{stem}/{key.decode('utf-8', 'replace')}" for key in keys[length:]}
    pairs = zip(found.names, found.labels, strict=True)
    kept = [(name, label) for name, label in pairs if name not in beyond]
    dropped = [name for name in found.names if name in beyond]
    found.names[:] = [name for name, _ in kept]
    found.labels[:] = [label for _, label in kept]
    return [(name, f"beyond __len__ ({length}): the recipe's reader never reads it") for name in dropped]
