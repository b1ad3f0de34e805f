"""Existing stores as conversion sources: datakit stores, the pickle recipe's LMDB and MongoDB
layouts, image LMDBs.

:func:`store_kind` tells them apart (:func:`datakit.conversion.sources.scan.detect_kind`
asks it first), :func:`scan_store` scans one; everything after the scan is
the same as for an image folder. Options that do not apply to the kind are
refused by name:

- ``"datakit"`` (:mod:`datakit.conversion.sources.datakit_store`): a datakit store, copied.
  An LMDB folder is one when it holds a datakit manifest (or the progress of
  an interrupted conversion, refused with the advice to finish it); a
  ``mongodb://`` URI naming the database is one unless ``index`` is given,
  its collection named by ``source_collection``;
- ``"recipe_lmdb"`` (:mod:`datakit.conversion.sources.foreign.recipe_lmdb`): labels are in the store,
  or, for its bare pixel arrays, none (an unlabelled store), ``class_name`` or ``labels``;
- ``"image_lmdb"`` (:mod:`datakit.conversion.sources.foreign.image_lmdb`): ``class_name`` or ``labels``;
- ``"recipe_mongo"`` (:mod:`datakit.conversion.sources.foreign.recipe_mongo`): SRC a ``mongodb://``
  URI naming the database, with ``source_collection`` and ``index`` (the
  recipe's layout has no order without its index, so ``index`` says which).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from datakit.conversion.sources.datakit_store import DATAKIT, is_datakit_lmdb, scan_datakit_store
from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.foreign.image_lmdb import scan_image_lmdb
from datakit.conversion.sources.foreign.recipe_lmdb import scan_recipe_lmdb
from datakit.conversion.sources.foreign.recipe_mongo import MongoImages, mongo_source_name, scan_recipe_mongo
from datakit.conversion.sources.labelfile import LabelFile
from datakit.errors import SourceError, Spelling
from datakit.stores import is_mongodb_uri, mask_location, resolve_store
from datakit.stores.lmdb.foreign import IMAGES, RECIPE, UNKNOWN, classify_lmdb

__all__ = ["STORE_KINDS", "StoreChoice", "store_kind", "scan_store"]

STORE_KINDS = (DATAKIT, RECIPE, IMAGES, "recipe_mongo")
"""The kinds of existing store a conversion imports."""

_OPTIONS = {"class_name": Spelling("class_name=", "--class"), "index": Spelling("index=", "--index"),
            "source_collection": Spelling("source_collection=", "--source-collection")}
_APPLIES = {DATAKIT: ("source_collection",), RECIPE: ("class_name",), IMAGES: ("class_name",),
            "recipe_mongo": ("index", "source_collection")}


@dataclass(frozen=True)
class StoreChoice:
    """The options of an existing store's import (``None``: not given).

    Attributes:
        class_name: the class of every image of an image LMDB, or of a recipe store of bare pixel arrays.
        index: the recipe's JSON index of a MongoDB collection (order and labels).
        source_collection: the MongoDB collection of a datakit store, or the recipe's.
    """

    class_name: str | None = None
    index: str | None = None
    source_collection: str | None = None


def store_kind(root: str, choice: StoreChoice) -> str | None:
    """The kind of existing store at ``root``, or ``None`` when it is none of them.

    Raises:
        SourceError: ``root`` is an LMDB of no layout datakit imports (saying what was found), or
            the data file of a datakit store rather than its folder.
    """
    if is_mongodb_uri(root):
        return "recipe_mongo" if choice.index is not None else DATAKIT
    if is_datakit_lmdb(root):
        return DATAKIT
    folder = os.path.dirname(root)
    if os.path.basename(root) == "data.mdb" and is_datakit_lmdb(folder):
        raise SourceError(f"{root} is a file inside the store {folder}, not a store itself; name the "
                          "store's folder")
    found = classify_lmdb(root)
    if found is None:
        return None
    if found.layout == UNKNOWN:
        raise SourceError(found.describe())
    return found.layout


def scan_store(root: str, kind: str, choice: StoreChoice, label_file: LabelFile | None,
               given: dict[str, object]) -> tuple[SourceFolder, str]:
    """The entries of the existing store at ``root`` and their scan rules.

    ``given`` holds the folder and dataset options given (by their Python
    names); none applies to a store.

    Raises:
        SourceError: an option does not apply to the kind, or one it needs is missing.
    """
    _check_options(root, kind, choice, label_file, given)
    if kind == DATAKIT:
        return _scan_datakit(root, choice)
    if kind == RECIPE:
        return scan_recipe_lmdb(root, choice.class_name, label_file)
    if kind == IMAGES:
        return scan_image_lmdb(root, choice.class_name, label_file)
    if choice.source_collection is None or choice.index is None:
        raise SourceError.advising("{root} is read as the pickle recipe's MongoDB layout, which needs the "
                                   "collection of its documents and its JSON index: give {collection} and "
                                   "{index}", root=root, collection=_OPTIONS["source_collection"],
                                   index=_OPTIONS["index"])
    location = resolve_store(root, {"collection": choice.source_collection})
    where = mongo_source_name(location.server() or root, choice.source_collection)
    source = MongoImages(root, getattr(location, "database", ""), choice.source_collection, where)
    return scan_recipe_mongo(source, choice.index)


def _scan_datakit(root: str, choice: StoreChoice) -> tuple[SourceFolder, str]:
    """A datakit store: at the path ``root``, or in the collection ``source_collection`` of the server."""
    if not is_mongodb_uri(root):
        if choice.source_collection is not None:
            raise SourceError.advising("{option} names a MongoDB collection; {root} is a path",
                                       option=_OPTIONS["source_collection"], root=root)
        return scan_datakit_store(resolve_store(root))
    if choice.source_collection is None:
        raise SourceError.advising(
            "{root} is read as a datakit store on that server: name its collection with {collection} (the "
            "pickle recipe's MongoDB layout is read with its JSON index: {index})", root=mask_location(root),
            collection=_OPTIONS["source_collection"], index=_OPTIONS["index"])
    return scan_datakit_store(resolve_store(root, {"collection": choice.source_collection}))


def _check_options(root: str, kind: str, choice: StoreChoice, label_file: LabelFile | None,
                   given: dict[str, object]) -> None:
    for name, value in given.items():
        if value:
            raise SourceError(f"{name} applies to image folders and datasets, not to {root} ({kind})")
    for name, spelling in _OPTIONS.items():
        if getattr(choice, name) is not None and name not in _APPLIES[kind]:
            raise SourceError.advising("{option} does not apply to {root} ({kind_name})", option=spelling,
                                       root=root, kind_name=kind)
    if label_file is not None and kind not in (IMAGES, RECIPE):  # a recipe LMDB's scan checks its values
        raise SourceError(f"{root} ({kind}) holds its own labels; a label file (--labels) applies to "
                          "image folders, datasets, LMDBs of encoded images and of bare pixel arrays")
