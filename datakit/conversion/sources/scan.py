"""Which source a conversion reads, and its entries: the first stage of :func:`datakit.convert`.

SRC is told apart by what it holds (:func:`detect_kind`), or by
``source_kind`` (``--source-kind``) when that is ambiguous:

- ``"huggingface"``: a folder that ``save_to_disk`` wrote (it holds
  ``dataset_info.json``, ``state.json`` or ``dataset_dict.json``), or
  ``.parquet`` / ``.arrow`` files (:mod:`datakit.conversion.sources.huggingface`);
- ``"webdataset"``: ``.tar`` shards (:mod:`datakit.conversion.sources.webdataset`);
- ``"datakit"``: a datakit store, copied into another backend or re-packed
  (an LMDB folder holding a datakit manifest, or a ``mongodb://`` URI with
  ``source_collection`` and no ``index``: :mod:`datakit.conversion.sources.datakit_store`);
- ``"recipe_lmdb"``, ``"image_lmdb"``: an LMDB the pickle recipe wrote, or one
  whose values are encoded images; ``"recipe_mongo"``: a ``mongodb://`` URI with
  ``index``, the recipe's MongoDB layout (:mod:`datakit.conversion.sources.foreign.layouts`);
- ``"folder"``: anything else, an image folder (:mod:`datakit.conversion.sources.folder`);
- ``"coco"``: an images folder with COCO annotation files (``coco``, never detected:
  :mod:`datakit.conversion.sources.coco`).

Every kind yields the same :class:`~datakit.conversion.sources.entries.SourceFolder` of
entries, so everything after the scan (resume, append, the reading stage,
the report) is one code path. A label file (``labels``) gives the labels of
any kind: for a folder it names files under it, for the others it names
entries (``train/00000012``, ``shard-000/0001.jpg``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from datakit.conversion.sources.choice import SourceChoice
from datakit.conversion.sources.coco.source import scan_coco
from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.fieldfile import field_scan_rules, fielded_folder, read_field_file
from datakit.conversion.sources.folder import scan_folder, scan_rules
from datakit.conversion.sources.foreign.layouts import STORE_KINDS, StoreChoice, scan_store, store_kind
from datakit.conversion.sources.huggingface import SAVED_MARKERS, TABLE_SUFFIXES, scan_huggingface
from datakit.conversion.sources.labelfile import (
    label_scan_rules,
    labelled_entries,
    labelled_folder,
    read_label_file,
)
from datakit.conversion.sources.webdataset import SHARD_SUFFIX, scan_webdataset
from datakit.errors import SourceError, Spelling, option

__all__ = ["SOURCE_KINDS", "detect_kind", "scan_source"]

SOURCE_KINDS = ("folder", "huggingface", "webdataset", *STORE_KINDS)
"""The kinds of source a conversion reads."""

_KIND = Spelling("source_kind=", "--source-kind")
_FIELDS = Spelling("fields=FILE", "--fields FILE")
_COMPRESSED_SHARDS = {".tar.gz": "gunzip", ".tgz": "gunzip", ".tar.zst": "zstd -d", ".tar.zstd": "zstd -d",
                      ".tar.xz": "xz -d", ".tar.bz2": "bunzip2"}
"""Compressed tar shards, which datakit does not read, and the command that makes each a ``.tar``."""


def detect_kind(root: str, store: StoreChoice | None = None) -> str:
    """The kind of source at ``root`` (see the module's docstring), given the store options ``store``.

    Raises:
        SourceError: ``root`` holds several kinds (say which with ``source_kind``),
            or is a file of none, or compressed tar shards, or an LMDB of no layout datakit imports.
    """
    stored = store_kind(root, store or StoreChoice())
    if stored is not None:
        return stored
    if os.path.isfile(root):
        lower = root.lower()
        if lower.endswith(SHARD_SUFFIX):
            return "webdataset"
        if lower.endswith(TABLE_SUFFIXES):
            return "huggingface"
        if lower.endswith(tuple(_COMPRESSED_SHARDS)):
            raise _compressed_shards(root, [os.path.basename(root)])
        raise SourceError(f"{root} is a file, not an image folder; datakit converts a folder, .tar shards "
                          "(WebDataset), .parquet/.arrow files (Hugging Face), a datakit store (its folder) "
                          "or an LMDB file (the pickle recipe's, or one of encoded images)")
    try:
        names = os.listdir(root)
    except OSError as exc:
        raise SourceError(f"cannot list {root}: {exc.strerror}") from None
    if any(name in SAVED_MARKERS for name in names):
        return "huggingface"
    files = [name.lower() for name in names if os.path.isfile(os.path.join(root, name))]
    found = {"huggingface": [name for name in files if name.endswith(TABLE_SUFFIXES)],
             "webdataset": [name for name in files if name.endswith(SHARD_SUFFIX)]}
    kinds = [kind for kind, matched in found.items() if matched]
    folders = any(os.path.isdir(os.path.join(root, name)) for name in names)
    compressed = sorted(name for name in names if name.lower().endswith(tuple(_COMPRESSED_SHARDS)))
    if compressed and not kinds and not folders:  # with class folders beside, a stray archive is ignored
        raise _compressed_shards(root, compressed)
    if len(kinds) > 1 or (kinds and folders):
        held = ", ".join([*(f"{kind} files ({found[kind][0]}, ...)" for kind in kinds),
                          *(["sub-folders"] if folders else [])])
        raise SourceError.advising(
            "{root} holds {held}; say which to convert with {kind} (one of {kinds})", root=root, held=held,
            kind=_KIND, kinds=", ".join(SOURCE_KINDS))
    return kinds[0] if kinds else "folder"


def _compressed_shards(root: str, names: list[str]) -> SourceError:
    """The error for compressed tar shards (the file ``root``, or ``names`` in the folder ``root``):
    what they are and the command that decompresses them. WebDataset writes uncompressed shards,
    whose images datakit reads in place, by offset; a compressed one has no such offsets."""
    suffix = next(suffix for suffix in _COMPRESSED_SHARDS if names[0].lower().endswith(suffix))
    if os.path.isfile(root):
        what = f"{root} is a compressed tar shard"
    else:
        shown = ", ".join(names[:2]) + (", ..." if len(names) > 2 else "")
        what = f"{root} holds compressed tar shards ({shown})"
    unpacked = names[0][:-len(suffix)] + ".tar"
    return SourceError(f"{what}: datakit reads uncompressed .tar shards (as webdataset writes them); "
                       f"decompress them first (`{_COMPRESSED_SHARDS[suffix]} {names[0]}` leaves {unpacked}) "
                       "and convert the .tar shards")


def scan_source(root: str, labels: str | os.PathLike[str] | None, extensions: Sequence[str],
                choice: SourceChoice) -> tuple[SourceFolder, str]:
    """The entries of the source at ``root`` and their scan rules (recorded for ``--resume``).

    Raises:
        SourceError: the source is missing, ambiguous, empty or unreadable, or
            an option does not apply to its kind.
        LabelFileError: the label file (or the field file: ``FieldFileError``) is malformed.
        ValueError: ``choice.kind`` is not one of :data:`SOURCE_KINDS`.
    """
    if choice.kind is not None and choice.kind not in SOURCE_KINDS:
        raise ValueError(f"source_kind must be one of {', '.join(SOURCE_KINDS)}, not {choice.kind!r}")
    if choice.coco:
        _check_coco(root, choice, labels, extensions)
        return scan_coco(root, choice.coco)
    kind = choice.kind or detect_kind(root, choice.store)
    label_file = read_label_file(labels) if labels is not None else None
    if kind in STORE_KINDS:
        given: dict[str, object] = {"extensions": extensions, "image_column": choice.image_column,
                 "label_column": choice.label_column, "image_root": choice.image_root, "split": choice.splits,
                 "optional": choice.optional, "columns": choice.columns, "fields": choice.field_file}
        return scan_store(root, kind, choice.store, label_file, given)
    _check_choice(root, kind, choice, labels, extensions)
    if kind == "folder":
        if choice.field_file is not None:
            field_file = read_field_file(choice.field_file)
            return (fielded_folder(root, field_file, tuple(extensions), choice.optional),
                    field_scan_rules(field_file))
        if choice.optional:
            raise SourceError.advising("{option} applies to sources with fields (WebDataset members, Hugging "
                                       "Face columns, a field file: {fields}); {root} is an image folder",
                                       option=Spelling(f"optional={list(choice.optional)!r}", " ".join(
                                           f"--optional {name}" for name in choice.optional)), root=root,
                                       fields=_FIELDS)
        if label_file is not None:
            return labelled_folder(root, label_file, tuple(extensions)), label_scan_rules(label_file)
        folder = scan_folder(root, extensions)
        return folder, scan_rules(folder.extensions)
    column = None if label_file is not None else (choice.label_column or "label")
    if kind == "huggingface":
        folder, rules = scan_huggingface(root, choice.image_column or "image", column,
                                         image_root=choice.image_root, splits=choice.splits,
                                         label_required=choice.label_column is not None,
                                         columns=choice.columns, optional=choice.optional)
    else:
        folder, rules = scan_webdataset(root, column, required=choice.label_column is not None,
                                        optional=choice.optional)
    if label_file is None:
        return folder, rules
    return labelled_entries(folder, label_file), f"{rules} {label_scan_rules(label_file)}"


def _check_choice(root: str, kind: str, choice: SourceChoice, labels: object,
                  extensions: Sequence[str]) -> None:
    """Refuse options that do not apply to the source's kind, naming them."""
    for name, value in vars(choice.store).items():
        if value is not None:
            raise SourceError(f"{name} applies to existing stores (datakit's, the pickle recipe's, image "
                              f"LMDBs), not to {root} ({kind})")
    _check_hf_only(root, kind, choice)
    _check_field_file(root, kind, choice, labels)
    given = {"image_column": choice.image_column, "label_column": choice.label_column}
    if kind == "folder":
        for name, value in given.items():
            if value is not None:
                raise SourceError.advising(
                    "{option} applies to Hugging Face datasets and WebDataset shards; {root} is read as an "
                    "image folder (its class folders are the labels; pass {kind} if it is not one)",
                    option=option(name, value), root=root, kind=_KIND)
        return
    if extensions:
        raise SourceError.advising("{option} applies to image folders, not to {root} ({kind_name})",
                                   option=Spelling("extensions", "--extensions"), root=root, kind_name=kind)
    if kind == "webdataset" and choice.image_column is not None:
        raise SourceError.advising(
            "{option} applies to Hugging Face datasets; a WebDataset sample's image is its .jpg, .jpeg, "
            ".png or .webp member ({root})", option=option("image_column", choice.image_column), root=root)
    if labels is not None and choice.label_column is not None:
        raise SourceError.advising(
            "{column} and {labels} both give the labels; choose one",
            column=option("label_column", choice.label_column),
            labels=Spelling("labels=FILE", "--labels FILE"))


def _check_coco(root: str, choice: SourceChoice, labels: object, extensions: Sequence[str]) -> None:
    """Refuse, with COCO annotation files, the options that give annotations or read other sources."""
    coco = Spelling("coco=FILE", "--coco FILE")
    if labels is not None:
        raise SourceError.advising("{coco} and {labels} both give the images and their annotations; choose "
                                   "one", coco=coco, labels=Spelling("labels=FILE", "--labels FILE"))
    if choice.kind not in (None, "folder"):
        raise SourceError.advising("{coco} names the images of a folder; {root} is read as {kind} "
                                   "({option})", coco=coco, root=root, kind=choice.kind,
                                   option=option("source_kind", choice.kind))
    given = {"image_column": choice.image_column, "label_column": choice.label_column,
             "image_root": choice.image_root, "split": ",".join(choice.splits) or None,
             "extensions": ",".join(extensions) or None, "fields": choice.field_file,
             "columns": None if choice.columns is None else ",".join(choice.columns),
             "optional": ",".join(choice.optional) or None, **vars(choice.store)}
    for name, value in given.items():
        if value is not None:
            spelled = Spelling(f"class_name={value!r}", f"--class {value}") if name == "class_name" \
                else option(name, value)
            raise SourceError.advising("{option} does not apply with {coco}: the annotation files name the "
                                       "images and give their annotations", option=spelled, coco=coco)


def _check_field_file(root: str, kind: str, choice: SourceChoice, labels: object) -> None:
    """Refuse a field file for a source that is no image folder, or beside a label file."""
    if choice.field_file is not None and kind != "folder":
        raise SourceError.advising("{fields} applies to image folders, not to {root} ({kind}), whose fields "
                                   "come from the source itself", fields=_FIELDS, root=root, kind=kind)
    if choice.field_file is not None and labels is not None:
        raise SourceError.advising("{labels} and {fields} both give the labels (a field file's 'label' "
                                   "column); choose one", labels=Spelling("labels=FILE", "--labels FILE"),
                                   fields=_FIELDS)
    if choice.columns is not None and kind != "huggingface":
        raise SourceError.advising("{option} applies to Hugging Face datasets, not to {root} ({kind})",
                                   option=Spelling(f"columns={list(choice.columns)!r}",
                                                   f"--columns {','.join(choice.columns)}"),
                                   root=root, kind=kind)


def _check_hf_only(root: str, kind: str, choice: SourceChoice) -> None:
    """Refuse ``image_root`` and ``split`` for a source that is no Hugging Face dataset; check
    that an image root is a folder."""
    given = {"image_root": Spelling("image_root=", "--image-root"), "split": Spelling("split=", "--split")}
    for name, value in (("image_root", choice.image_root), ("split", choice.splits)):
        if value and kind != "huggingface":
            raise SourceError.advising("{option} applies to Hugging Face datasets, not to {root} ({kind})",
                                       option=given[name], root=root, kind=kind)
    if choice.image_root is not None and not os.path.isdir(choice.image_root):
        raise SourceError.advising("{option} is not a folder; name the folder the dataset's image paths are "
                                   "relative to", option=option("image_root", choice.image_root))
