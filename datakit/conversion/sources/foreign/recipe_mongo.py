"""The pickle recipe's MongoDB layout as a conversion source.

The recipe keeps one document per image, ``{img_name, bson_img}`` (the file's
bytes as BinData), and a JSON index file ``{"path_list": [...],
"label_list": [...]}`` that gives the samples' order and labels::

    datakit convert mongodb://host/db NEW --source-collection images --index index.json

The samples come in ``path_list``'s order, each an entry named by its
``img_name``; the classes are the labels, sorted as a label file's are
(integers as numbers). The documents are fetched by the reader processes,
a chunk of entries at a time with one ``find({"img_name": {"$in": ...}})``,
and put back in the index's order here (``$in`` keeps no order).

Skipped and listed by name, with nothing written for them: an index entry
whose lists differ in length (the ``path_list`` entries past ``label_list``'s
end, or ``label_list[i]`` past ``path_list``'s), a label that is neither an
integer nor a class name, a name listed twice, a document that is missing or
holds no ``bson_img``, and, like any image, a JPEG without its end marker
(the recipe appended ``\\xff\\xd9`` to those; datakit does not guess).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.foreign.recipe_values import framed_image, integer_label
from datakit.conversion.sources.labelfile import class_order, sorted_classes
from datakit.errors import SourceError

__all__ = ["MongoImages", "scan_recipe_mongo", "mongo_source_name"]


def mongo_source_name(server: str, collection: str) -> str:
    """How a collection is named as a source (the server without its password)."""
    return f"{server} collection={collection}"


class MongoImages:
    """The images of the recipe's documents; each process opens its own client on first use.

    Args:
        uri: the server (it may carry credentials: never shown).
        database: the database of the collection.
        collection: the collection of ``{img_name, bson_img}`` documents.
        where: how messages name the collection (:func:`mongo_source_name`); the source's name.
    """

    def __init__(self, uri: str, database: str, collection: str, where: str) -> None:
        self.uri, self.database, self.collection, self.where = uri, database, collection, where
        self._connection: Any = None
        self._fetched: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, str]:
        return {"uri": self.uri, "database": self.database, "collection": self.collection,
                "where": self.where}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Fetch the documents of ``entries`` in one query (``$in``), for :meth:`read` to take."""
        names = [entry.path for entry in entries]
        documents = self._call(lambda: list(self._samples().find({"img_name": {"$in": names}},
                                                                 {"img_name": 1, "bson_img": 1, "_id": 0})))
        self._fetched = {document.get("img_name"): document for document in documents}

    def read(self, entry: SourceEntry) -> bytearray:
        document = self._fetched.pop(entry.path, None)
        if document is None:
            document = self._call(lambda: self._samples().find_one({"img_name": entry.path}))
        if document is None:
            raise BadImage(f"no document with img_name {entry.path!r} in {self.where}")
        data = document.get("bson_img")
        if data is None:
            raise BadImage(f"the document with img_name {entry.path!r} has no bson_img")
        if not isinstance(data, (bytes, bytearray)):
            raise BadImage(f"the document's bson_img is {type(data).__name__}, not binary image bytes")
        return framed_image(bytes(data))

    def close(self) -> None:
        self._fetched = {}

    def _samples(self) -> Any:
        return self._connect().database()[self.collection]

    def _call(self, operation: Any) -> Any:
        return self._connect().call(operation)

    def _connect(self) -> Any:
        from datakit.stores.mongo.connection import MongoConnection

        if self._connection is None:
            self._connection = MongoConnection(self.uri, self.database, self.where)
        return self._connection


def scan_recipe_mongo(source: MongoImages, index: str) -> tuple[SourceFolder, str]:
    """The samples the index file ``index`` lists, read from ``source``, and the scan rules.

    Raises:
        SourceError: the index is not JSON holding ``path_list`` and ``label_list`` lists.
    """
    paths, labels, digest = _read_index(index)
    count = min(len(paths), len(labels))
    rejected = [(str(path), f"no label: the index's label_list has {len(labels)} labels for {len(paths)} "
                            "paths") for path in paths[count:]]
    unpaired = f"no path: the index's path_list has {len(paths)} paths for {len(labels)} labels"
    rejected.extend((f"label_list[{number}]", unpaired) for number in range(count, len(labels)))
    names: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    for number, (path, label) in enumerate(zip(paths[:count], labels[:count], strict=True)):
        problem = _problem(path, label, seen)
        if problem:
            rejected.append((str(path) if isinstance(path, str) else f"path_list[{number}]", problem))
            continue
        seen.add(path)
        names.append(path)
        texts.append(str(integer_label(label)) if integer_label(label) is not None else str(label).strip())
    classes = sorted_classes(set(texts))
    position = {name: number for number, name in enumerate(classes)}
    entries = [SourceEntry(name, position[text]) for name, text in zip(names, texts, strict=True)]
    if not entries and not rejected:
        raise SourceError(f"{index} lists no samples (path_list is empty)")
    rules = f"recipe_mongo collection={source.collection} index sha256:{digest}"
    order = class_order(classes) if classes else "text"
    return SourceFolder(source.where, classes, entries, class_order=order, kind="recipe_mongo",
                        reader=source, rejected=rejected), rules


def _problem(path: object, label: object, seen: set[str]) -> str:
    """Why one index entry cannot be imported (``""``: it can)."""
    if not isinstance(path, str) or not path:
        return f"the index's path is {path!r}, not an img_name"
    if path in seen:
        return "listed twice in the index's path_list; imported once, where it is first listed"
    if integer_label(label) is None and (not isinstance(label, str) or not label.strip()):
        return f"the index's label is {label!r}, neither an integer nor a class name"
    return ""


def _read_index(index: str) -> tuple[list[Any], list[Any], str]:
    """``path_list``, ``label_list`` and the SHA-256 of the index file."""
    try:
        with open(index, "rb") as handle:
            raw = handle.read()
        value = json.loads(raw)
    except OSError as exc:
        raise SourceError(f"cannot read the index {index}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{index} is not a JSON index ({exc}); the recipe's index is "
                          '{"path_list": [...], "label_list": [...]}') from None
    lists = value if isinstance(value, dict) else {}
    paths, labels = lists.get("path_list"), lists.get("label_list")
    if not isinstance(paths, list) or not isinstance(labels, list):
        raise SourceError(f"{index} has no path_list and label_list lists; the recipe's index is "
                          '{"path_list": [...], "label_list": [...]}')
    return paths, labels, hashlib.sha256(raw).hexdigest()


