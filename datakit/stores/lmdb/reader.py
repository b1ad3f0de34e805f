"""Reading a complete LMDB store, one reader per process.

A batch is one read transaction; records are streamed in key order, each
looked up by its key (a damaged B-tree page then fails the lookup with an
error; a cursor stepping onto one can abort the process inside LMDB). The
environment is this process's shared read-only one for the store's file
(:mod:`datakit.stores.lmdb.environments`): a reader keeps the file it opened,
even once the store is replaced at its path. Every LMDB error of a read is a
:class:`~datakit.errors.CorruptStoreError` naming the store and the key
(:mod:`datakit.stores.lmdb.damage`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import lmdb

from datakit.errors import CorruptRecordError, IncompleteStoreError, StoreError, StoreNotFoundError
from datakit.format.records import record_key
from datakit.stores.contract import StoreReader
from datakit.stores.conversion_state import progress_source
from datakit.stores.lmdb.damage import damaged, reporting_damage
from datakit.stores.lmdb.environments import environments
from datakit.stores.lmdb.layout import (
    FOREIGN,
    LABELS,
    LEN,
    MANIFEST,
    PROGRESS,
    decode_source,
    is_foreign,
    load_progress,
    source_entries,
    source_key,
)
from datakit.stores.lmdb.location import LMDBLocation
from datakit.stores.lmdb.lock import lock_holder
from datakit.stores.lmdb.pathkind import foreign_message, not_a_store_message
from datakit.stores.refusals import check_range, incomplete_message, missing_source_message

__all__ = ["LMDBReader"]


class LMDBReader(StoreReader):
    """Reads a complete LMDB store. Open one per process.

    Args:
        spec: the store.

    Raises:
        StoreNotFoundError: nothing is at the path.
        StoreError: the path holds no LMDB store, or someone else's entries.
        IncompleteStoreError: the store has no manifest.
    """

    spec: LMDBLocation

    def __init__(self, spec: LMDBLocation) -> None:
        super().__init__(spec)

    def _connect(self) -> None:
        path = self.spec.path
        if not os.path.exists(path):
            raise StoreNotFoundError(f"no store at {path}; create one with `datakit convert SRC {path}`")
        if not self.spec.is_lmdb_store():
            raise StoreError(foreign_message(path) or not_a_store_message(path))
        self._env = environments.acquire(path)
        self._closed = False

    def _manifest_json(self) -> bytes:
        path = self.spec.path
        with reporting_damage(path, "the manifest"), self._begin() as txn:
            raw, progress, foreign = txn.get(MANIFEST), txn.get(PROGRESS), is_foreign(txn)
        if foreign:
            self.close()  # one environment per path and process: let the layout be read
            raise StoreError(foreign_message(path) or f"{path} is not a datakit store ({FOREIGN})")
        if raw is None:
            raise IncompleteStoreError(incomplete_message(self.spec, progress_source(load_progress(progress)),
                                                          lock_holder(path)))
        return bytes(raw)

    def _begin(self) -> lmdb.Transaction[bytes]:
        """A read transaction; after an append grew the file past this process's map, the
        map is widened to the file's first (old records never move, so the view holds)."""
        try:
            return self._env.begin()
        except lmdb.MapResizedError:
            self._env.set_mapsize(0)  # LMDB's word for "adopt the size the writer set"
            return self._env.begin()

    def _label_table(self) -> bytes | None:
        with reporting_damage(self.spec.path, "the label table"), self._begin() as txn:
            raw = txn.get(LABELS)
        return None if raw is None else bytes(raw)

    def _append_progress(self) -> object:
        with self._begin() as txn:
            raw = txn.get(PROGRESS)
        return load_progress(None if raw is None else bytes(raw))

    def _grown(self) -> bool:
        with reporting_damage(self.spec.path, "the record count"), self._begin() as txn:
            now = txn.get(LEN)
        return now is not None and now.isdigit() and int(now) > self._manifest.length

    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        records = []
        key = ""
        try:
            with self._begin() as txn:
                for index in indices:
                    key = record_key(index)
                    value = txn.get(key.encode("ascii"))
                    if value is None:
                        raise CorruptRecordError(key, f"missing from {self.spec.path}")
                    records.append(value)
        except lmdb.Error as exc:
            raise damaged(self.spec.path, exc, f"record {key!r}") from None
        return records

    def iter_records(self) -> Iterator[tuple[int, bytes]]:
        """Records past this reader's manifest (appended since, or being appended) are not read;
        a missing one is skipped, for the caller to find."""
        key = ""
        try:
            with self._begin() as txn:
                for index in range(self._manifest.length):
                    key = record_key(index)
                    value = txn.get(key.encode("ascii"))
                    if value is not None:
                        yield index, value
        except lmdb.Error as exc:
            raise damaged(self.spec.path, exc, f"record {key!r}") from None

    def source_paths(self, indices: Sequence[int]) -> list[str]:
        keys = [source_key(index) for index in indices]
        with reporting_damage(self.spec.path, "the source paths"), self._begin() as txn:
            values = [txn.get(key) for key in keys]
        return [decode_source(value, key, self.spec.path)[1] if value else "?"
                for key, value in zip(keys, values, strict=True)]

    def source_path_range(self, start: int, stop: int) -> list[str]:
        check_range(start, stop, self._manifest.length)
        what = f"the source paths of records {record_key(start)}..{record_key(max(start, stop - 1))}"
        with reporting_damage(self.spec.path, what), self._begin() as txn:
            entries = source_entries(txn, start, stop, self.spec.path)
        if len(entries) != stop - start:
            raise StoreError(missing_source_message(self.spec.path, record_key(start + len(entries))))
        return [source for _, source in entries]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            environments.release(self._env)
