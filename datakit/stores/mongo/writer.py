"""Writing one conversion into a MongoDB collection, resumable exactly once.

MongoDB offers no multi-document transaction on a standalone server, so the
writer keeps one invariant instead: the progress document's ``committed``
count N is raised only after a batch is fully inserted (and journaled), and
sample ``_id`` s are the indices ``0 .. N-1``. A run killed mid-batch leaves
documents with ``_id >= N`` behind. A resumed writer reads back what is
committed (:meth:`~datakit.stores.contract.StoreWriter.committed_state`,
which changes nothing, since ``datakit inspect`` calls it too, possibly while
a conversion still runs) and deletes those stray documents and their GridFS
files (:mod:`datakit.stores.mongo.oversized`) before it writes anything, so
every image ends up in the store exactly once. The sidecar documents are
read and written through :mod:`datakit.stores.mongo.sidecar`.

Every write uses ``w="majority", j=True`` (the journal, on a majority of a
replica set, or on the one server of a standalone) unless the URI sets its
own ``w`` or ``journal``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from datakit.errors import StoreBusyError, StoreError, option
from datakit.format.manifest import Manifest
from datakit.format.records import record_key
from datakit.format.stats import Stats
from datakit.stores.contract import StoreWriter
from datakit.stores.conversion_state import ConversionSettings, PendingRecord, StoredMeta, WriterIdentity
from datakit.stores.mongo.connection import MongoConnection, uri_options
from datakit.stores.mongo.layout import (
    INLINE_LIMIT,
    decode_source,
    label_parts,
    lease_id,
    manifest_id,
    manifest_text,
    progress_id,
    sample_document,
)
from datakit.stores.mongo.lease import WriterLease, current_holder, lease_seconds
from datakit.stores.mongo.location import MongoLocation
from datakit.stores.mongo.oversized import OversizedRecords
from datakit.stores.mongo.sidecar import Sidecar
from datakit.stores.refusals import busy_message, records_disagree

__all__ = ["MongoWriter"]

_DUPLICATE_KEY = 11000
_DELETE_CHUNK = 1000


class MongoWriter(StoreWriter):
    """Writes one conversion into ``spec.collection``, durably batch by batch.

    Args:
        spec: the store to write.
    """

    spec: MongoLocation

    def __init__(self, spec: MongoLocation) -> None:
        super().__init__(spec)
        self._where = spec.describe()
        self._connection = MongoConnection(spec.uri, spec.database, self._where)
        self._sidecar = Sidecar(self._connection, self._database, spec.collection)
        self._oversized = OversizedRecords(self._connection, self._database, spec.collection, self._where)
        self._lease: WriterLease | None = None

    # handles

    def _database(self) -> Any:
        from pymongo import WriteConcern

        options = uri_options(self.spec.uri)
        if "w" in options or "journal" in options:
            return self._connection.database()
        return self._connection.database(WriteConcern(w="majority", j=True))

    def _samples(self) -> Any:
        return self._database()[self.spec.collection]

    # one writer at a time (see datakit.stores.mongo.lease)

    def lock(self) -> None:
        collection = self.spec.collection
        lease = WriterLease(self._connection, self._sidecar.documents, lease_id(collection), collection,
                            lease_seconds())
        held = lease.acquire()
        if held is not None:
            holder, expires_in_ms = held
            raise StoreBusyError.advising(
                "{busy} (if that process is gone, its lease expires in {seconds:.0f} s, and {resume} then "
                "takes over)", busy=busy_message(self.spec, holder), seconds=expires_in_ms / 1000,
                resume=option("resume"))
        self._lease = lease

    def running_writer(self) -> WriterIdentity | None:
        if self._lease is not None:
            return None
        return current_holder(self._connection, self._sidecar.find(lease_id(self.spec.collection)))

    def _confirm_lease(self) -> None:
        if self._lease is not None:
            self._lease.confirm()

    # what is at the location

    def exists(self) -> bool:
        names = self._connection.call(lambda: self._database().list_collection_names())
        if self.spec.collection in names:
            return True
        return self.is_store()

    def is_store(self) -> bool:
        collection = self.spec.collection
        return (self._sidecar.find(manifest_id(collection)) is not None
                or self._sidecar.find(progress_id(collection)) is not None)

    def is_complete(self) -> bool:
        return self._sidecar.find(manifest_id(self.spec.collection)) is not None

    def _remove_store(self) -> None:
        collection = self.spec.collection
        call = self._connection.call
        # Mark the store incomplete first, so an interrupted removal leaves a store
        # that readers refuse and that --overwrite removes again.
        self._sidecar.set({"_id": progress_id(collection), "collection": collection, "kind": "progress",
                           "removing": True})
        self._sidecar.delete(manifest_id(collection))
        call(lambda: self._samples().drop())
        self._oversized.delete()
        self._sidecar.delete_many({"kind": {"$nin": ["progress", "writer"]}})
        self._sidecar.delete(progress_id(collection))

    # a conversion

    def create(self, settings: ConversionSettings) -> None:
        from pymongo.errors import CollectionInvalid

        def create_collection() -> None:
            with contextlib.suppress(CollectionInvalid):  # already there: empty, or a retried call
                self._database().create_collection(self.spec.collection)

        self._connection.call(create_collection)
        self._conversion = settings
        self._write_progress(settings, Stats(class_counts=[0] * len(settings.classes)))

    # reading the store back (StoreWriter.committed_state and append_state)

    def _read_meta(self) -> StoredMeta:
        collection = self.spec.collection
        document = self._sidecar.find(manifest_id(collection))
        progress = self._sidecar.find(progress_id(collection))
        manifest = None if document is None else manifest_text(document, self._where)
        absent = document is None and progress is None
        why = "it has neither a manifest nor conversion progress" if absent else ""
        return StoredMeta(manifest, progress, why)

    def _read_label_table(self) -> bytes | None:
        return self._sidecar.label_table()

    def _read_records(self, count: int, labels: range, against: str) -> tuple[list[str], list[int]]:
        documents = self._connection.call(
            lambda: list(self._samples().find({"_id": {"$lt": count}}, {"source": 1, "label": 1})))
        sources: list[str | None] = [None] * count
        found = [0] * count
        for document in documents:
            index, label = document["_id"], document.get("label")
            if not (_is_int(index) and 0 <= index < count):
                continue  # not a sample datakit wrote; the count check below catches the gap
            if not (_is_int(label) and label in labels):
                raise StoreError.advising("{where}: sample {key!r} has no valid label ({label!r}); "
                                          "reconvert with {overwrite}", where=self._where,
                                          key=record_key(index), label=label, overwrite=option("overwrite"))
            sources[index] = decode_source(document.get("source"))
            found[index] = label
        if len(documents) != count or any(source is None for source in sources):
            raise records_disagree(self._where, against)
        return [source for source in sources if source is not None], found

    def _discard_uncommitted_once(self) -> None:
        """Delete what a batch interrupted after the last commit left behind, once, before
        the first write after the store was read back."""
        committed = self._resumed_at
        if committed is None:
            return
        call = self._connection.call
        # Find, then delete by _id: some servers compare ranges in deletes as text.
        stray = call(lambda: [document["_id"] for document in
                              self._samples().find({"_id": {"$gte": committed}}, {"_id": 1})])
        for start in range(0, len(stray), _DELETE_CHUNK):
            chunk = {"_id": {"$in": stray[start:start + _DELETE_CHUNK]}}
            call(functools.partial(self._delete_samples, chunk))
        self._oversized.delete({"metadata.index": {"$gte": committed}})
        self._resumed_at = None

    def _discard_after(self, length: int) -> None:
        self._confirm_lease()
        # The progress document first: a kill before the samples are gone leaves what a batch
        # killed mid-insert leaves (samples past the manifest's length, no progress), which the
        # next writer deletes before its first write.
        self._sidecar.delete(progress_id(self.spec.collection))
        self._resumed_at = length
        self._discard_uncommitted_once()

    def _delete_samples(self, query: dict[str, Any]) -> None:
        self._samples().delete_many(query)

    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        settings = self._settings()
        self._confirm_lease()
        self._discard_uncommitted_once()
        documents = [self._document(record) for record in records]
        if documents:
            keys = [record_key(records[0].index), record_key(records[-1].index)]
            self._connection.call(lambda: self._insert(documents), keys)
        self._write_progress(settings, stats)

    def _document(self, record: PendingRecord) -> dict[str, Any]:
        if len(record.data) <= INLINE_LIMIT:
            return sample_document(record)
        return sample_document(record, gridfs_id=self._oversized.upload(record.index, record.data))

    def _insert(self, documents: list[dict[str, Any]]) -> None:
        from pymongo.errors import BulkWriteError

        try:
            self._samples().insert_many(documents, ordered=False)
        except BulkWriteError as exc:
            # A duplicate key is a document a retried insert already wrote.
            errors = exc.details.get("writeErrors", [])
            if not errors or any(error.get("code") != _DUPLICATE_KEY for error in errors) \
                    or exc.details.get("writeConcernErrors"):
                raise

    def _write_progress(self, settings: ConversionSettings, stats: Stats) -> None:
        collection = self.spec.collection
        document = {"_id": progress_id(collection), "collection": collection, "kind": "progress",
                    "settings": settings.to_dict(), "stats": stats.to_dict(), "committed": stats.length}
        self._sidecar.put(document)

    def finish(self, manifest: Manifest, labels: np.ndarray) -> None:
        collection = self.spec.collection
        self._confirm_lease()
        self._discard_uncommitted_once()
        # Parts are replaced in place, then any beyond the new table removed: a label table
        # only grows by an append, so a reader of the old manifest always finds its labels.
        count = 0
        for document in label_parts(collection, labels):
            self._sidecar.set(document)
            count += 1
        self._sidecar.delete_many({"kind": "labels", "part": {"$gte": count}})
        self._sidecar.put({"_id": manifest_id(collection), "collection": collection, "kind": "manifest",
                           "manifest": manifest.to_json().decode("utf-8"), "length": manifest.length,
                           "keys": manifest.keys, "store_id": manifest.store_id})
        self._sidecar.delete(progress_id(collection))

    def close(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        self._connection.close()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

