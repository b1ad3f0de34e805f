"""Reading a complete MongoDB store, one reader per process.

A batch is one ``find({"_id": {"$in": [...]}})``; ``$in`` returns documents in
no particular order, so the requested order (duplicates included) is restored
here. Records are streamed in windows of consecutive ``_id`` ranges, which
use the ``_id`` index, need no server-side sort, and bound memory.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from datakit.errors import CorruptRecordError, IncompleteStoreError, StoreError, StoreNotFoundError
from datakit.manifest import Manifest, record_key
from datakit.stores.base import (
    StoreReader,
    check_range,
    incomplete_message,
    label_table_size,
    missing_source_message,
    parse_label_table,
)
from datakit.stores.mongo.connection import MongoConnection
from datakit.stores.mongo.layout import (
    GRIDFS_BUCKET,
    META_COLLECTION,
    decode_source,
    join_label_parts,
    lease_id,
    manifest_id,
    progress_id,
)
from datakit.stores.mongo.lease import current_holder
from datakit.stores.mongo.location import MongoLocation

__all__ = ["MongoReader"]

_WINDOW = 256  # sample documents per query while streaming
_GRIDFS_REPLY_BYTES = 8 << 20  # GridFS chunk bytes asked for per query
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
        self.spec = spec
        self._connection = MongoConnection(spec.uri, spec.database, spec.describe())
        try:
            self._manifest = self._load_manifest()
        except BaseException:
            self.close()
            raise

    # collections of this process's client

    def _samples(self) -> Any:
        return self._connection.database()[self.spec.collection]

    def _meta(self) -> Any:
        return self._connection.database()[META_COLLECTION]

    def _load_manifest(self) -> Manifest:
        where = self.spec.describe()
        collection = self.spec.collection
        document = self._connection.call(lambda: self._meta().find_one({"_id": manifest_id(collection)}))
        if document is not None:
            raw = document.get("manifest")
            if not isinstance(raw, str):
                raise StoreError(f"{where}: the manifest document holds no manifest text")
            try:
                return Manifest.from_json(raw.encode("utf-8"), where)
            except RecursionError:  # JSON nested too deeply for the parser: hostile, not a crash
                raise StoreError(f"{where}: the manifest is not valid JSON (nested too deeply)") from None
        progress = self._connection.call(lambda: self._meta().find_one({"_id": progress_id(collection)}))
        if progress is not None:
            lease = self._connection.call(lambda: self._meta().find_one({"_id": lease_id(collection)}))
            raise IncompleteStoreError(incomplete_message(self.spec, _progress_source(progress),
                                                          current_holder(self._connection, lease)))
        names = self._connection.call(lambda: self._connection.database().list_collection_names())
        if collection in names:
            raise IncompleteStoreError(
                f"{where} has no datakit manifest: it was not written by `datakit convert`, "
                "or its conversion never committed; convert into it with "
                f"`datakit convert SRC {self.spec.command_arguments()} --overwrite`"
            )
        raise StoreNotFoundError(
            f"no store at {where} (the collection does not exist); create one with "
            f"`datakit convert SRC {self.spec.command_arguments()}`"
        )

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    def labels(self) -> np.ndarray:
        where = self.spec.describe()
        collection = self.spec.collection
        documents = self._connection.call(
            lambda: list(self._meta().find({"collection": collection, "kind": "labels"})))
        raw = join_label_parts(documents)
        size = label_table_size(self._manifest)
        if raw is not None and len(raw) > size and self._grown():
            raw = raw[:size]  # an append is adding records after this reader's view
        return parse_label_table(raw, self._manifest, where)

    def _grown(self) -> bool:
        """Whether an append is growing the store, or grew it since this reader opened."""
        collection = self.spec.collection
        progress = self._connection.call(lambda: self._meta().find_one({"_id": progress_id(collection)}))
        manifest = self._connection.call(lambda: self._meta().find_one({"_id": manifest_id(collection)}))
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
        return self._connection.call(lambda: self._read_gridfs(document["gridfs"], key), [key])

    def _read_gridfs(self, file_id: Any, key: str) -> bytes:
        """A GridFS file's bytes, fetched a bounded number of chunks per query.

        pymongo's ``GridOut.read()`` runs one cursor over every chunk, and a
        server may answer it with all of them in one reply: a record over
        ``maxMessageSizeBytes`` (48 MB) then cannot be read at all. Asking for
        at most :data:`_GRIDFS_REPLY_BYTES` of chunks at a time keeps every
        reply small, whatever the server does with batch sizes.
        """
        database = self._connection.database()
        where = self.spec.describe()
        info = database[f"{GRIDFS_BUCKET}.files"].find_one({"_id": file_id}, {"length": 1, "chunkSize": 1})
        if info is None:
            raise CorruptRecordError(key, f"its GridFS file is missing from {where}")
        length, chunk_size = info.get("length"), info.get("chunkSize")
        if not (_is_count(length) and _is_count(chunk_size) and chunk_size > 0):
            raise CorruptRecordError(key, f"its GridFS file in {where} has no valid length and chunk size")
        count = -(-length // chunk_size)
        per_query = max(1, _GRIDFS_REPLY_BYTES // chunk_size)
        chunks = database[f"{GRIDFS_BUCKET}.chunks"]
        pieces: list[bytes] = []
        for start in range(0, count, per_query):
            stop = min(count, start + per_query)
            query = {"files_id": file_id, "n": {"$gte": start, "$lt": stop}}
            found = {document.get("n"): document.get("data")
                     for document in chunks.find(query, {"n": 1, "data": 1})}
            for number in range(start, stop):
                data = found.get(number)
                expected = min(chunk_size, length - number * chunk_size)
                if not isinstance(data, bytes) or len(data) != expected:
                    raise CorruptRecordError(key, f"chunk {number} of its GridFS file in {where} is "
                                                  + ("missing" if data is None else "damaged"))
                pieces.append(data)
        return b"".join(pieces)

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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_index(value: Any, start: int, stop: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and start <= value < stop



def _progress_source(progress: dict[str, Any]) -> object:
    """The source folder an incomplete store's progress document names, if any."""
    settings = progress.get("settings")
    return settings.get("source") if isinstance(settings, dict) else None
