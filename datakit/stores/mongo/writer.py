"""Writing one conversion into a MongoDB collection, resumable exactly once.

MongoDB offers no multi-document transaction on a standalone server, so the
writer keeps one invariant instead: the progress document's ``committed``
count N is raised only after a batch is fully inserted (and journaled), and
sample ``_id`` s are the indices ``0 .. N-1``. A run killed mid-batch leaves
documents with ``_id >= N`` behind. A resumed writer reads back what is
committed (:meth:`MongoWriter.committed_state`, which changes nothing, since
``datakit inspect`` calls it too, possibly while a conversion still runs) and
deletes those stray documents and their GridFS files before it writes
anything, so every image ends up in the store exactly once.

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

from datakit.errors import DestinationExistsError, StoreBusyError, StoreError, option
from datakit.manifest import Manifest, Stats, record_key
from datakit.stores.base import (
    AppendState,
    CommittedState,
    ConversionSettings,
    PendingRecord,
    StoreWriter,
    WriterIdentity,
    busy_message,
    label_table_size,
    parse_label_table,
    stats_fit,
)
from datakit.stores.mongo.connection import MongoConnection, uri_options
from datakit.stores.mongo.layout import (
    GRIDFS_BUCKET,
    INLINE_LIMIT,
    META_COLLECTION,
    decode_source,
    join_label_parts,
    label_parts,
    lease_id,
    manifest_id,
    progress_id,
    sample_document,
)
from datakit.stores.mongo.lease import WriterLease, current_holder, lease_seconds
from datakit.stores.mongo.location import MongoLocation

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
        self.spec = spec
        self._where = spec.describe()
        self._connection = MongoConnection(spec.uri, spec.database, self._where)
        self._conversion: ConversionSettings | None = None
        self._resumed_at: int | None = None  # committed count to clean up after, once
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

    def _meta(self) -> Any:
        return self._database()[META_COLLECTION]

    def _bucket(self) -> Any:
        import gridfs

        database = self._database()
        return gridfs.GridFSBucket(database, bucket_name=GRIDFS_BUCKET,
                                   write_concern=database.write_concern)

    def _find_meta(self, document_id: str) -> dict[str, Any] | None:
        document: dict[str, Any] | None = self._connection.call(
            lambda: self._meta().find_one({"_id": document_id}))
        return document

    # one writer at a time (see datakit.stores.mongo.lease)

    def lock(self) -> None:
        collection = self.spec.collection
        lease = WriterLease(self._connection, self._meta, lease_id(collection), collection, lease_seconds())
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
        return current_holder(self._connection, self._find_meta(lease_id(self.spec.collection)))

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
        return (self._find_meta(manifest_id(collection)) is not None
                or self._find_meta(progress_id(collection)) is not None)

    def is_complete(self) -> bool:
        return self._find_meta(manifest_id(self.spec.collection)) is not None

    def remove(self) -> None:
        collection = self.spec.collection
        if not self.is_store():
            raise DestinationExistsError(
                f"{self._where} exists and is not a datakit store; refusing to delete it. "
                "Drop it yourself or choose another collection."
            )
        call = self._connection.call
        # Mark the store incomplete first, so an interrupted removal leaves a store
        # that readers refuse and that --overwrite removes again.
        call(lambda: self._meta().update_one(
            {"_id": progress_id(collection)},
            {"$set": {"collection": collection, "kind": "progress", "removing": True}}, upsert=True))
        call(lambda: self._meta().delete_one({"_id": manifest_id(collection)}))
        call(lambda: self._samples().drop())
        self._delete_gridfs_files({"metadata.collection": collection})
        call(lambda: self._meta().delete_many({"collection": collection,
                                                "kind": {"$nin": ["progress", "writer"]}}))
        call(lambda: self._meta().delete_one({"_id": progress_id(collection)}))

    # a conversion

    def create(self, settings: ConversionSettings) -> None:
        from pymongo.errors import CollectionInvalid

        def create_collection() -> None:
            with contextlib.suppress(CollectionInvalid):  # already there: empty, or a retried call
                self._database().create_collection(self.spec.collection)

        self._connection.call(create_collection)
        self._conversion = settings
        self._write_progress(settings, Stats(class_counts=[0] * len(settings.classes)))

    def committed_state(self) -> CommittedState:
        collection = self.spec.collection
        if self.is_complete():
            raise StoreError(f"{self._where} is already complete; there is nothing to resume")
        progress = self._find_meta(progress_id(collection))
        if progress is None:
            raise StoreError(f"{self._where} is not a datakit store (it has neither a manifest nor "
                             "conversion progress), so there is nothing to resume")
        settings = ConversionSettings.from_dict(progress.get("settings"))
        committed = progress.get("committed")
        if settings is None or not isinstance(committed, int) or progress.get("removing"):
            raise StoreError.advising("{where} has no readable conversion progress, so there is nothing "
                                      "to resume; reconvert with {overwrite}", where=self._where,
                                      overwrite=option("overwrite"))
        stats = Stats.from_dict(progress.get("stats"), self._where)
        if stats.length != committed or not stats_fit(stats, settings):
            raise StoreError.advising("{where}: the progress document disagrees with itself; reconvert "
                                      "with {overwrite}", where=self._where, overwrite=option("overwrite"))
        sources, labels = self._read_committed(committed, len(settings.classes))
        state = CommittedState(settings, stats, sources, labels)
        self._conversion = settings
        self._resumed_at = committed
        return state

    def append_state(self) -> AppendState:
        collection = self.spec.collection
        document = self._find_meta(manifest_id(collection))
        raw = document.get("manifest") if document is not None else None
        if not isinstance(raw, str):
            raise StoreError.advising("{where} is not a complete store; convert into it (or finish it "
                                      "with {resume}) before appending", where=self._where,
                                      resume=option("resume"))
        manifest = Manifest.from_json(raw.encode("utf-8"), self._where)
        progress = self._find_meta(progress_id(collection))
        interrupted = None
        committed, classes = manifest.length, len(manifest.classes)
        if progress is not None:
            settings = ConversionSettings.from_dict(progress.get("settings"))
            count = progress.get("committed")
            if settings is None or not _is_int(count):
                raise StoreError.advising("{where} has no readable append progress; reconvert with "
                                          "{overwrite}", where=self._where, overwrite=option("overwrite"))
            stats = Stats.from_dict(progress.get("stats"), self._where)
            if stats.length != count or not stats_fit(stats, settings) or count < manifest.length:
                raise StoreError.advising("{where}: the append progress disagrees with itself; reconvert "
                                          "with {overwrite}", where=self._where,
                                          overwrite=option("overwrite"))
            interrupted = CommittedState(settings, stats)
            committed, classes = count, len(settings.classes)
        sources, labels = self._read_committed(committed, classes)
        parts = self._connection.call(
            lambda: list(self._meta().find({"collection": collection, "kind": "labels"})))
        table = join_label_parts(parts)
        size = label_table_size(manifest)
        self._resumed_at = committed  # documents past it are a batch an interrupted append left
        return AppendState(manifest, parse_label_table(None if table is None else table[:size], manifest,
                                                       self._where), sources, labels, interrupted)

    def begin_append(self, settings: ConversionSettings) -> None:
        self._conversion = settings

    def _discard_uncommitted_once(self) -> None:
        if self._resumed_at is not None:
            self._discard_uncommitted(self._resumed_at)
            self._resumed_at = None

    def _discard_uncommitted(self, committed: int) -> None:
        """Delete what a batch interrupted after the last commit left behind."""
        collection = self.spec.collection
        call = self._connection.call
        # Find, then delete by _id: some servers compare ranges in deletes as text.
        stray = call(lambda: [document["_id"] for document in
                              self._samples().find({"_id": {"$gte": committed}}, {"_id": 1})])
        for start in range(0, len(stray), _DELETE_CHUNK):
            chunk = {"_id": {"$in": stray[start:start + _DELETE_CHUNK]}}
            call(functools.partial(self._delete_samples, chunk))
        self._delete_gridfs_files({"metadata.collection": collection, "metadata.index": {"$gte": committed}})

    def _delete_samples(self, query: dict[str, Any]) -> None:
        self._samples().delete_many(query)

    def _read_committed(self, committed: int, classes: int) -> tuple[list[str], list[int]]:
        documents = self._connection.call(
            lambda: list(self._samples().find({"_id": {"$lt": committed}}, {"source": 1, "label": 1})))
        sources: list[str | None] = [None] * committed
        labels = [0] * committed
        for document in documents:
            index, label = document["_id"], document.get("label")
            if not (_is_int(index) and 0 <= index < committed):
                continue  # not a sample datakit wrote; the count check below catches the gap
            if not (_is_int(label) and 0 <= label < classes):
                raise StoreError.advising("{where}: sample {key!r} has no valid label ({label!r}); "
                                          "reconvert with {overwrite}", where=self._where,
                                          key=record_key(index), label=label, overwrite=option("overwrite"))
            sources[index] = decode_source(document.get("source"))
            labels[index] = label
        if len(documents) != committed or any(source is None for source in sources):
            raise StoreError.advising("{where}: the progress document disagrees with the stored samples; "
                                      "reconvert with {overwrite}", where=self._where,
                                      overwrite=option("overwrite"))
        return [source for source in sources if source is not None], labels

    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        settings = self._conversion
        if settings is None:
            raise StoreError(f"{self._where}: commit before create() or committed_state()")
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
        collection = self.spec.collection
        key = record_key(record.index)
        # A retried upload replaces the earlier one rather than adding a second file.
        self._delete_gridfs_files({"metadata.collection": collection, "metadata.index": record.index})
        file_id = self._connection.call(lambda: self._bucket().upload_from_stream(
            key, bytes(record.data), metadata={"collection": collection, "index": record.index}), [key])
        return sample_document(record, gridfs_id=file_id)

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
        self._connection.call(functools.partial(self._put_meta, document))

    def _put_meta(self, document: dict[str, Any]) -> None:
        self._meta().replace_one({"_id": document["_id"]}, document, upsert=True)

    def _set_meta(self, document: dict[str, Any]) -> None:
        """Like :meth:`_put_meta` for a document whose fields are all replaced (``$set``: some
        servers, nx-27017 among them, cannot replace a document holding binary data)."""
        fields = {name: value for name, value in document.items() if name != "_id"}
        self._meta().update_one({"_id": document["_id"]}, {"$set": fields}, upsert=True)

    def finish(self, manifest: Manifest, labels: np.ndarray) -> None:
        collection = self.spec.collection
        call = self._connection.call
        self._confirm_lease()
        self._discard_uncommitted_once()
        # Parts are replaced in place, then any beyond the new table removed: a label table
        # only grows by an append, so a reader of the old manifest always finds its labels.
        count = 0
        for document in label_parts(collection, labels):
            call(functools.partial(self._set_meta, document))
            count += 1
        call(lambda: self._meta().delete_many({"collection": collection, "kind": "labels",
                                                "part": {"$gte": count}}))
        manifest_document = {"_id": manifest_id(collection), "collection": collection, "kind": "manifest",
                             "manifest": manifest.to_json().decode("utf-8"),
                             "length": manifest.length, "keys": manifest.keys}
        call(functools.partial(self._put_meta, manifest_document))
        call(lambda: self._meta().delete_one({"_id": progress_id(collection)}))

    def close(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        self._connection.close()

    # GridFS

    def _delete_gridfs_files(self, query: dict[str, Any]) -> None:
        import gridfs
        from pymongo.errors import OperationFailure

        def delete_all() -> None:
            bucket = self._bucket()
            # import-graph: allow-private: GridOut documents the file's id as ``_id``
            for file_id in [grid_out._id for grid_out in bucket.find(query)]:
                try:
                    bucket.delete(file_id)
                except gridfs.errors.NoFile:
                    pass  # already gone
                except OperationFailure as exc:  # how nx-27017 says "already gone"
                    if "not found" not in str(exc):
                        raise

        self._connection.call(delete_all)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

