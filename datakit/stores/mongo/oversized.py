"""Records too large for a MongoDB document, kept as files of the store's GridFS bucket.

A record over :data:`~datakit.stores.mongo.layout.INLINE_LIMIT` is uploaded
to the ``__datakit_fs__`` bucket, tagged ``{collection, index}`` in its
metadata, and its sample document holds the file's id. The writer uploads and
deletes such files, the reader fetches them; both through
:class:`OversizedRecords`, every operation retried by the connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datakit.errors import CorruptRecordError
from datakit.format.records import record_key
from datakit.stores.mongo.connection import MongoConnection
from datakit.stores.mongo.layout import GRIDFS_BUCKET

__all__ = ["OversizedRecords"]

_REPLY_BYTES = 8 << 20  # GridFS chunk bytes asked for per query


class OversizedRecords:
    """The GridFS files of the store in ``collection``.

    Args:
        connection: this process's connection to the server.
        database: gives the database handle, looked up per call: it belongs to
            the process's client, and a writer's carries its write concern.
        collection: the store's collection, which tags its files.
        where: the store, as messages name it.
    """

    def __init__(self, connection: MongoConnection, database: Callable[[], Any], collection: str,
                 where: str) -> None:
        self._connection = connection
        self._database = database
        self._collection = collection
        self._where = where

    def _bucket(self) -> Any:
        import gridfs

        database = self._database()
        return gridfs.GridFSBucket(database, bucket_name=GRIDFS_BUCKET, write_concern=database.write_concern)

    def upload(self, index: int, data: bytes | bytearray) -> Any:
        """Store record ``index``'s bytes as a file, replacing one that an earlier try
        left (rather than adding a second); the new file's id."""
        key = record_key(index)
        self.delete({"metadata.index": index})
        metadata = {"collection": self._collection, "index": index}
        return self._connection.call(lambda: self._bucket().upload_from_stream(key, bytes(data),
                                                                                metadata=metadata), [key])

    def delete(self, query: dict[str, Any] | None = None) -> None:
        """Delete the store's files that match ``query`` (on their ``metadata``), or all of them."""
        import gridfs
        from pymongo.errors import OperationFailure

        selection = {"metadata.collection": self._collection, **(query or {})}

        def delete_all() -> None:
            bucket = self._bucket()
            # import-graph: allow-private: GridOut documents the file's id as ``_id``
            for file_id in [grid_out._id for grid_out in bucket.find(selection)]:
                try:
                    bucket.delete(file_id)
                except gridfs.errors.NoFile:
                    pass  # already gone
                except OperationFailure as exc:  # how nx-27017 says "already gone"
                    if "not found" not in str(exc):
                        raise

        self._connection.call(delete_all)

    def read(self, file_id: Any, key: str) -> bytes:
        """The bytes of the file ``file_id``, the record ``key``'s.

        Raises:
            CorruptRecordError: the file, or one of its chunks, is missing or damaged.
        """
        return self._connection.call(lambda: self._read_chunks(file_id, key), [key])

    def _read_chunks(self, file_id: Any, key: str) -> bytes:
        """A file's bytes, fetched a bounded number of chunks per query.

        pymongo's ``GridOut.read()`` runs one cursor over every chunk, and a
        server may answer it with all of them in one reply: a record over
        ``maxMessageSizeBytes`` (48 MB) then cannot be read at all. Asking for
        at most :data:`_REPLY_BYTES` of chunks at a time keeps every reply
        small, whatever the server does with batch sizes.
        """
        database = self._database()
        info = database[f"{GRIDFS_BUCKET}.files"].find_one({"_id": file_id}, {"length": 1, "chunkSize": 1})
        if info is None:
            raise CorruptRecordError(key, f"its GridFS file is missing from {self._where}")
        length, chunk_size = info.get("length"), info.get("chunkSize")
        if not (_is_count(length) and _is_count(chunk_size) and chunk_size > 0):
            raise CorruptRecordError(key, f"its GridFS file in {self._where} has no valid length and chunk "
                                          "size")
        count = -(-length // chunk_size)
        per_query = max(1, _REPLY_BYTES // chunk_size)
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
                    raise CorruptRecordError(key, f"chunk {number} of its GridFS file in {self._where} is "
                                                  + ("missing" if data is None else "damaged"))
                pieces.append(data)
        return b"".join(pieces)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
