"""The pickle recipe's LMDB store as a conversion source.

``datakit convert old.lmdb NEW`` imports what ``benchmarks/pickle_recipe.py``'s
``folder_to_lmdb`` wrote, a folder or a single file (``subdir=False``): the
samples in ``__keys__``'s order, so that sample ``i`` of the new store is the
recipe's sample ``i``; each value ``(image, label)`` loaded through the
allow-list (:mod:`datakit.format.unpickle`), never ``pickle.loads``.
Images stay as they were: the file's bytes (checked like any image file), or
pixel arrays, stored as raw records (the conversion's format is then
``raw``). The classes are the integer labels, as text, sorted as numbers
(``"0", "1", "2", "10"``), so a label keeps its value when every integer from
0 up is used.

The recipe's layout for unlabelled data stores each pixel array alone. Such a
store becomes an *unlabelled* store (no classes, every label -1: the data of
self-supervised pre-training, like torchvision's unlabelled splits), or, with
``--class NAME`` or ``--labels FILE`` naming each key, a labelled one
(:mod:`datakit.conversion.sources.foreign.keyed_labels`). The first readable value says which
layout the store has; a value of the other layout is refused.

Each sample is an entry named ``<source name>/<key>`` (``old.lmdb/42``).
Refused records are skipped and listed by that name, with nothing written for
them: a pickle the allow-list refuses, a value that is no image nor numeric
array, a float pixel array, a key listed in ``__keys__`` but missing (or
empty, or longer than LMDB's keys), keys beyond ``__len__``. ``__len__``
larger than ``__keys__`` is listed as ``<source name>/__len__``. When every
value is refused, nothing is imported: a :class:`SourceError` says so. The
values are read twice: once here for the labels, once by the reader
processes for the images, in one long read transaction each
(:class:`~datakit.conversion.sources.foreign.lmdb_values.LMDBValues`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import lmdb

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.files import files_digest
from datakit.conversion.sources.foreign.keyed_labels import keyed_entries
from datakit.conversion.sources.foreign.lmdb_values import LMDBValues, open_source
from datakit.conversion.sources.foreign.recipe_values import (
    describe,
    integer_label,
    is_pixel_array,
    load_value,
)
from datakit.conversion.sources.labelfile import LabelFile, class_order, label_scan_rules, sorted_classes
from datakit.errors import SourceError
from datakit.format.manifest import NO_LABEL
from datakit.format.unpickle import RefusedPickle
from datakit.stores.lmdb.foreign import data_file, key_problem, recipe_keys

__all__ = ["scan_recipe_lmdb", "source_name"]


@dataclass
class _Found:
    names: list[str] = field(default_factory=list)
    labels: list[int | None] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    arrays: bool | None = None
    """Whether the first readable image is a pixel array (``None``: none was readable)."""
    labelled: bool | None = None
    """Whether the first readable value is an ``(image, label)`` pair, or a bare pixel array."""


def source_name(root: str) -> str:
    """The name entries of the LMDB at ``root`` start with: its file or folder name."""
    return os.path.basename(os.path.abspath(root).rstrip(os.sep))


def scan_recipe_lmdb(root: str, class_name: str | None = None,
                     label_file: LabelFile | None = None) -> tuple[SourceFolder, str]:
    """The samples of the recipe store at ``root`` and the scan rules naming them in a store's progress.

    Args:
        root: the LMDB, a folder or a single file.
        class_name: the class of every sample of a store of bare pixel arrays.
        label_file: labels keyed by the keys of a store of bare pixel arrays.

    Raises:
        SourceError: ``root`` is not an LMDB, its ``__keys__`` cannot be read
            safely, every value is refused, or labels are given for a store
            whose values carry their own (or given twice).
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
    _check_found(root, keys, found, class_name, label_file)
    form = "subdir" if os.path.isdir(root) else "file"
    rules = f"recipe_lmdb {form} sha256:{files_digest([data_file(root)], os.path.dirname(root))}"
    reader = LMDBValues(root, len(stem) + 1, recipe=True)
    payload = "raw" if found.arrays else ""
    if not found.labelled:
        return _unlabelled(root, stem, found, class_name, label_file, reader, payload, rules)
    classes = sorted_classes({str(label) for label in found.labels})
    position = {name: index for index, name in enumerate(classes)}
    entries = [SourceEntry(name, position[str(label)]) for name, label in zip(found.names, found.labels,
                                                                               strict=True)]
    folder = SourceFolder(root, classes, entries, class_order=class_order(classes) if classes else "numeric",
                          kind="recipe_lmdb", reader=reader, rejected=found.rejected, payload_kind=payload,
                          standalone_names=True)
    return folder, rules


def _check_found(root: str, keys: list[bytes], found: _Found, class_name: str | None,
                 label_file: LabelFile | None) -> None:
    """Refuse a store with nothing to import, and labels given where the values carry their own."""
    if not found.names and not found.rejected:
        raise SourceError(f"{root} is a pickle-recipe store with no samples (__keys__ is empty)")
    if not found.names:
        name, reason = found.rejected[0]
        raise SourceError(f"{root}: datakit refused all {len(keys)} values its __keys__ lists, so nothing "
                          f"is imported; the first, {name}: {reason}")
    if found.labelled and (class_name is not None or label_file is not None):
        raise SourceError(f"{root} holds its own labels (its values are (image, label) pairs); --class and "
                          "--labels apply to the recipe's stores of bare pixel arrays")
    if class_name is not None and label_file is not None:
        raise SourceError(f"--class and --labels both give the labels of {root}; choose one")


def _unlabelled(root: str, stem: str, found: _Found, class_name: str | None, label_file: LabelFile | None,
                reader: LMDBValues, payload: str, rules: str) -> tuple[SourceFolder, str]:
    """A store of bare pixel arrays: an unlabelled store, or labelled by ``--class`` or ``--labels``."""
    if class_name is None and label_file is None:
        entries = [SourceEntry(name, NO_LABEL) for name in found.names]
        folder = SourceFolder(root, [], entries, kind="recipe_lmdb", reader=reader, rejected=found.rejected,
                              payload_kind=payload, unlabelled=True, standalone_names=True)
        return folder, f"{rules} unlabelled"
    keys = [name[len(stem) + 1:] for name in found.names]
    folder = keyed_entries(root, stem, keys, class_name, label_file, reader, "recipe_lmdb")
    refused = {name for name, _ in found.rejected}  # already listed with the scan's reason
    folder.entries = [entry for entry in folder.entries if entry.path not in refused]
    folder.rejected, folder.payload_kind = found.rejected, payload
    labels = f"class={class_name}" if label_file is None else label_scan_rules(label_file)
    return folder, f"{rules} {labels}"


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
        value = None if key_problem(key) else txn.get(key)
        if value is None:
            found.rejected.append((name, key_problem(key) or "listed in __keys__, but missing from the LMDB"))
            continue
        try:
            image, label = load_value(value)
        except BadImage as exc:
            found.rejected.append((name, str(exc)))
            continue
        if found.labelled is None:
            found.arrays, found.labelled = is_pixel_array(image), label is not None
        if found.labelled != (label is not None):
            found.rejected.append((name, _other_layout(found.labelled)))
            continue
        found.names.append(name)
        found.labels.append(label)
    return found


def _other_layout(labelled: bool) -> str:
    if labelled:
        return ("a bare pixel array, without the label every value before it carries (a store is read as "
                "(image, label) pairs or as pixel arrays alone, by its first readable value)")
    return ("an (image, label) pair among pixel arrays without labels (a store is read as (image, label) "
            "pairs or as pixel arrays alone, by its first readable value)")


def _length_problems(stem: str, keys: list[bytes], length: object, found: _Found) -> list[tuple[str, str]]:
    """``__len__`` checked against ``__keys__``: keys beyond it leave the import, one line each."""
    if length == len(keys):
        return []
    if integer_label(length) is None or not isinstance(length, int) or length < 0:
        return [(f"{stem}/__len__", f"is {describe(length)}, not the number of samples; __keys__'s "
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
