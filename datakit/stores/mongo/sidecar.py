"""One store's documents in the sidecar collection, read and written with retries.

The reader and the writer both look up a store's manifest, progress and lease
documents by ``_id`` and join its label parts (:mod:`datakit.stores.mongo.layout`
names them); the writer also replaces them. :class:`Sidecar` does each once,
every call through the connection's retries (:meth:`MongoConnection.call`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datakit.stores.mongo.connection import MongoConnection
from datakit.stores.mongo.layout import META_COLLECTION, join_label_parts, labels_query

__all__ = ["Sidecar"]


class Sidecar:
    """The sidecar documents of the store in ``collection``.

    Args:
        connection: this process's connection to the server.
        database: gives the database handle, looked up per call: it belongs to
            the process's client, and a writer's carries its write concern.
        collection: the store's collection, which tags its sidecar documents.
    """

    def __init__(self, connection: MongoConnection, database: Callable[[], Any], collection: str) -> None:
        self._connection = connection
        self._database = database
        self._collection = collection

    def documents(self) -> Any:
        """The sidecar collection's handle (for a lease, which runs its own queries)."""
        return self._database()[META_COLLECTION]

    def find(self, document_id: str, fields: dict[str, int] | None = None) -> dict[str, Any] | None:
        """The document with ``document_id`` (only ``fields``, when given, and its ``_id``), or ``None``."""
        document: dict[str, Any] | None = self._connection.call(
            lambda: self.documents().find_one({"_id": document_id}, fields))
        return document

    def label_table(self) -> bytes | None:
        """The store's label table, joined from its parts; ``None`` when parts are missing
        or malformed (:func:`~datakit.stores.mongo.layout.join_label_parts`)."""
        query = labels_query(self._collection)
        return join_label_parts(self._connection.call(lambda: list(self.documents().find(query))))

    def put(self, document: dict[str, Any]) -> None:
        """Insert ``document``, or replace the one with its ``_id``."""
        self._connection.call(lambda: self.documents().replace_one({"_id": document["_id"]}, document,
                                                                     upsert=True))

    def set(self, document: dict[str, Any]) -> None:
        """Like :meth:`put` for a document whose fields are all replaced (``$set``: some
        servers, nx-27017 among them, cannot replace a document holding binary data)."""
        fields = {name: value for name, value in document.items() if name != "_id"}
        self._connection.call(lambda: self.documents().update_one({"_id": document["_id"]}, {"$set": fields},
                                                                    upsert=True))

    def delete(self, document_id: str) -> None:
        """Delete the document with ``document_id``, if there is one."""
        self._connection.call(lambda: self.documents().delete_one({"_id": document_id}))

    def delete_many(self, query: dict[str, Any]) -> None:
        """Delete this store's documents that match ``query`` as well."""
        self._connection.call(lambda: self.documents().delete_many({"collection": self._collection, **query}))
