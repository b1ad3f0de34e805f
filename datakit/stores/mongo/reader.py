"""Reading a complete MongoDB store, one reader per process.

A batch is one ``find({"_id": {"$in": [...]}})``; ``$in`` returns documents in
no particular order, so the requested order (duplicates included) is restored
here. Records are streamed in windows of consecutive ``_id`` ranges, which
use the ``_id`` index, need no server-side sort, and bound memory.

A store replaced at its collection (``datakit convert --overwrite``) holds new
documents under a new manifest. After each query the reader looks up its
manifest document's store id (one small read by ``_id``): when the manifest is
gone or has another id, what the query returned may be the new store's, and
the reader raises :class:`~datakit.errors.StoreReplacedError` instead of
returning it under its old manifest. (The writer deletes the old manifest
before anything else, and writes the new one last.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

from datakit.errors import (
    CorruptRecordError,
    IncompleteStoreError,
    StoreError,
    StoreNotFoundError,
    StoreReplacedError,
)
from datakit.format.records import record_key
from datakit.stores.contract import StoreReader
from datakit.stores.conversion_state import progress_source
from datakit.stores.mongo.connection import MongoConnection
from datakit.stores.mongo.foreign import recipe_collection
from datakit.stores.mongo.layout import (
    decode_source,
    lease_id,
    manifest_id,
    manifest_text,
    progress_id,
)
from datakit.stores.mongo.lease import current_holder
from datakit.stores.mongo.location import MongoLocation
from datakit.stores.mongo.oversized import OversizedRecords
from datakit.stores.mongo.sidecar import Sidecar
from datakit.stores.refusals import check_range, incomplete_message, missing_source_message, replaced_message

__all__ = ["MongoReader"]

_WINDOW = 256  # sample documents per query while streaming
_PATH_WINDOW = 4096  # sample documents per query for source paths (their paths only)


class MongoReader(StoreReader):
    """Reads a complete MongoDB store. Open one per process.

    Args:
        spec: the store.

    Raises:
        StoreNotFoundError: neither the collection nor any datakit document exists.
        IncompleteStoreError: the store has no manifest.
        StoreUnavailableError: the server cannot be reached or refused the credentials.
    """

    spec: MongoLocation

    def __init__(self, spec: MongoLocation) -> None:
        super().__init__(spec)

    def _connect(self) -> None:
        self._connection = MongoConnection(self.spec.uri, self.spec.database, self.spec.describe())
        self._sidecar = Sidecar(self._connection, self._connection.database, self.spec.collection)
        self._oversized = OversizedRecords(self._connection, self._connection.database, self.spec.collection,
                                           self.spec.describe())

    def _samples(self) -> Any:
        """The samples' collection, of this process's client."""
        return self._connection.database()[self.spec.collection]

    def _manifest_json(self) -> bytes:
        where = self.spec.describe()
        collection = self.spec.collection
        document = self._sidecar.find(manifest_id(collection))
        if document is not None:
            self._store_id = document.get("store_id")  # None in a store written before store ids
            return manifest_text(document, where)
        progress = self._sidecar.find(progress_id(collection))
        if progress is not None:
            lease = self._sidecar.find(lease_id(collection))
            raise IncompleteStoreError(incomplete_message(self.spec, progress_source(progress),
                                                          current_holder(self._connection, lease)))
        names = self._connection.call(lambda: self._connection.database().list_collection_names())
        if collection in names:
            # A collection someone else wrote: never advise --overwrite for one that datakit imports.
            foreign = recipe_collection(self._connection, self.spec.server(), collection)
            if foreign is not None:
                raise StoreError(foreign.describe(self.spec.describe()))
            raise IncompleteStoreError(
                f"{where} has no datakit manifest: it was not written by `datakit convert`, "
                "or its conversion never committed; convert into it with "
                f"`datakit convert SRC {self.spec.command_arguments()} --overwrite`"
            )
        raise StoreNotFoundError(
            f"no store at {where} (the collection does not exist); create one with "
            f"`datakit convert SRC {self.spec.command_arguments()}`"
        )

    def _label_table(self) -> bytes | None:
        table = self._sidecar.label_table()
        self._check_unreplaced()
        return table

    def _check_unreplaced(self) -> None:
        """Refuse what the last query returned when the store was replaced since this reader opened.

        Raises:
            StoreReplacedError: the manifest document is gone, or holds another store id.
        """
        document = self._sidecar.find(manifest_id(self.spec.collection), {"store_id": 1})
        if document is None or document.get("store_id") != self._store_id:
            now = "its manifest is gone" if document is None else "its manifest has another store id"
            raise StoreReplacedError(replaced_message(self.spec.describe(), "this reader opened it", now))

    def _append_progress(self) -> object:
        return self._sidecar.find(progress_id(self.spec.collection))

    def _grown(self) -> bool:
        collection = self.spec.collection
        progress = self._sidecar.find(progress_id(collection))
        manifest = self._sidecar.find(manifest_id(collection))
        length = manifest.get("length") if isinstance(manifest, dict) else None
        return progress is not None or (isinstance(length, int) and length > self._manifest.length)

    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        wanted = [int(index) for index in indices]
        keys = [record_key(index) for index in wanted]
        unique = list(dict.fromkeys(wanted))
        documents = self._connection.call(
            lambda: list(self._samples().find({"_id": {"$in": unique}}, {"data": 1, "gridfs": 1})),
            keys,
        )
        self._check_unreplaced()
        by_index = {document["_id"]: document for document in documents}
        records: dict[int, bytes] = {}
        for index in unique:
            document = by_index.get(index)
            if document is None:
                raise CorruptRecordError(record_key(index), f"missing from {self.spec.describe()}")
            records[index] = self._record_bytes(document)
        return [records[index] for index in wanted]

    def _record_bytes(self, document: dict[str, Any]) -> bytes:
        data = document.get("data")
        if isinstance(data, bytes):
            return data if type(data) is bytes else bytes(data)  # a bson Binary subclass
        key = record_key(document["_id"])
        if "gridfs" not in document:
            raise CorruptRecordError(key, f"its document in {self.spec.describe()} holds no record bytes")
        if isinstance(document["gridfs"], (dict, list)):  # a query operator would match any file
            raise CorruptRecordError(key, f"its document in {self.spec.describe()} holds no valid "
                                          "GridFS file id")
        return self._oversized.read(document["gridfs"], key)

    def iter_records(self) -> Iterator[tuple[int, bytes]]:
        """Every stored ``(index, record)`` in index order; a missing index is skipped.

        A sample document whose record bytes are gone (no ``data``, a missing
        GridFS file) counts as missing too, so that ``inspect --verify`` lists
        it with the others instead of stopping at it.
        """
        length = self._manifest.length
        for start in range(0, length, _WINDOW):
            stop = min(start + _WINDOW, length)
            keys = [record_key(start), record_key(stop - 1)]
            documents = self._connection.call(functools.partial(self._window, start, stop), keys)
            self._check_unreplaced()
            # Only integer ids are samples; a float, bool or text id that some server
            # matched with the range is a foreign document, and the index it leaves
            # empty is reported as missing by the caller.
            samples = [document for document in documents if _is_index(document["_id"], start, stop)]
            for document in sorted(samples, key=lambda document: document["_id"]):
                try:
                    data = self._record_bytes(document)
                except CorruptRecordError:
                    continue  # a gap is the caller's finding
                yield document["_id"], data

    def _window(self, start: int, stop: int) -> list[dict[str, Any]]:
        cursor = self._samples().find({"_id": {"$gte": start, "$lt": stop}}, {"data": 1, "gridfs": 1})
        return list(cursor.batch_size(_WINDOW))

    def source_paths(self, indices: Sequence[int]) -> list[str]:
        wanted = [int(index) for index in indices]
        unique = list(dict.fromkeys(wanted))
        documents = self._connection.call(
            lambda: list(self._samples().find({"_id": {"$in": unique}}, {"source": 1})),
            [record_key(index) for index in wanted],
        )
        self._check_unreplaced()
        by_index = {document["_id"]: decode_source(document.get("source")) for document in documents}
        return [by_index.get(index, "?") for index in wanted]

    def source_path_range(self, start: int, stop: int) -> list[str]:
        check_range(start, stop, self._manifest.length)
        where = self.spec.describe()
        paths: list[str] = []
        for window in range(start, stop, _PATH_WINDOW):
            end = min(stop, window + _PATH_WINDOW)
            documents = self._connection.call(functools.partial(self._sources, window, end),
                                              [record_key(window), record_key(end - 1)])
            self._check_unreplaced()
            found = {document["_id"]: document.get("source") for document in documents
                     if _is_index(document["_id"], window, end)}
            for index in range(window, end):
                source = found.get(index)
                if not isinstance(source, (str, bytes)):
                    raise StoreError(missing_source_message(where, record_key(index)))
                paths.append(decode_source(source))
        return paths

    def _sources(self, start: int, stop: int) -> list[dict[str, Any]]:
        return list(self._samples().find({"_id": {"$gte": start, "$lt": stop}}, {"source": 1}))

    def close(self) -> None:
        self._connection.close()


def _is_index(value: Any, start: int, stop: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and start <= value < stop

