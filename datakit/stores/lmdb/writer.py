"""Writing one conversion into an LMDB environment, growing its map as needed.

Each commit is one write transaction holding the batch's records, their
source entries and the new progress entry, so a killed conversion leaves the
store as it was after its last commit. The layout is in
:mod:`datakit.stores.lmdb.layout`; one writer at a time is ensured by the
directory's lock (:mod:`datakit.stores.lmdb.lock`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import lmdb
import numpy as np

from datakit.errors import StoreBusyError, StoreError, option
from datakit.format.manifest import Manifest
from datakit.format.records import record_key
from datakit.format.stats import Stats
from datakit.stores.contract import StoreWriter
from datakit.stores.conversion_state import ConversionSettings, PendingRecord, StoredMeta, WriterIdentity
from datakit.stores.labeltable import label_table_bytes
from datakit.stores.lmdb.damage import reporting_damage
from datakit.stores.lmdb.environments import environments
from datakit.stores.lmdb.layout import (
    DATA_FILES,
    FOREIGN,
    KEYS,
    LABELS,
    LEN,
    MANIFEST,
    PROGRESS,
    encode_source,
    is_foreign,
    keys_from,
    load_progress,
    progress_json,
    source_entries,
    source_key,
)
from datakit.stores.lmdb.location import LMDBLocation
from datakit.stores.lmdb.lock import LOCK_NAME, DirectoryLock, lock_holder
from datakit.stores.refusals import busy_message, records_disagree

__all__ = ["LMDBWriter"]

_INITIAL_MAP_SIZE = 64 << 20


class LMDBWriter(StoreWriter):
    """Writes one conversion into an LMDB environment, growing its map as needed.

    Args:
        spec: the store to write.
    """

    spec: LMDBLocation

    def __init__(self, spec: LMDBLocation) -> None:
        super().__init__(spec)
        self._env: lmdb.Environment | None = None
        self._lock: DirectoryLock | None = None
        self._made_directory = False  # by lock(), for a new store

    def lock(self) -> None:
        path = self.spec.path
        if os.path.lexists(path) and not os.path.isdir(path):
            return  # a file: not a store, and the pipeline refuses to touch it
        if not os.path.exists(path):
            os.makedirs(path)
            self._made_directory = True
        lock = DirectoryLock(path)
        holder = lock.acquire()
        if holder is not None:
            raise StoreBusyError(busy_message(self.spec, holder))
        self._lock = lock

    def running_writer(self) -> WriterIdentity | None:
        return None if self._lock is not None else lock_holder(self.spec.path)

    def exists(self) -> bool:
        if self._made_directory and os.listdir(self.spec.path) == [LOCK_NAME]:
            return False  # only what lock() made for a new store
        return os.path.lexists(self.spec.path)

    def is_store(self) -> bool:
        return self._peek(lambda txn: not is_foreign(txn))

    def is_complete(self) -> bool:
        return self._peek(lambda txn: txn.get(MANIFEST) is not None)

    def _peek(self, question: Callable[[lmdb.Transaction], bool]) -> bool:
        """``question`` asked of the store through the shared read-only environment; false
        when the path holds no LMDB environment, or one LMDB cannot open (nothing says it
        is datakit's)."""
        if not self.spec.is_lmdb_store():
            return False
        try:
            env = environments.acquire(self.spec.path)
        except StoreError:
            return False
        try:
            with reporting_damage(self.spec.path, "whether it is a datakit store"), env.begin() as txn:
                return question(txn)
        finally:
            environments.release(env)

    def _remove_store(self) -> None:
        for name in DATA_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.spec.path, name))
        with contextlib.suppress(OSError):  # the directory still holds files of the user's: keep them
            os.rmdir(self.spec.path)

    def create(self, settings: ConversionSettings) -> None:
        os.makedirs(self.spec.path, exist_ok=True)
        self._open()
        self._conversion = settings
        empty = Stats(class_counts=[0] * len(settings.classes))
        self._write(lambda txn: txn.put(PROGRESS, progress_json(settings, empty)))

    # reading the store back (StoreWriter.committed_state and append_state)

    def _read_meta(self) -> StoredMeta:
        if not self.spec.is_lmdb_store():
            return StoredMeta(None, None, "it has no data.mdb")
        with reporting_damage(self.spec.path, "the manifest and progress"), self._open().begin() as txn:
            manifest, progress, foreign = txn.get(MANIFEST), txn.get(PROGRESS), is_foreign(txn)
        return StoredMeta(None if manifest is None else bytes(manifest), load_progress(progress),
                          FOREIGN if foreign else "")

    def _read_records(self, count: int, labels: range, against: str) -> tuple[list[str], list[int]]:
        # Records 0 .. count - 1 never change once committed: this read agrees with the
        # progress read before it even while another process commits more.
        with reporting_damage(self.spec.path, "the source entries"), self._require_env().begin() as txn:
            entries = source_entries(txn, 0, count, self.spec.path)
        if len(entries) != count or not all(label in labels for label, _ in entries):
            raise records_disagree(self.spec.path, against)
        return [source for _, source in entries], [label for label, _ in entries]

    def _read_label_table(self) -> bytes | None:
        with reporting_damage(self.spec.path, "the label table"), self._require_env().begin() as txn:
            table = txn.get(LABELS)
        return None if table is None else bytes(table)

    # writing

    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        settings = self._settings()

        def put_all(txn: lmdb.Transaction) -> None:
            for record in records:
                txn.put(record_key(record.index).encode("ascii"), record.data)
                txn.put(source_key(record.index), encode_source(record.label, record.source))
            txn.put(PROGRESS, progress_json(settings, stats))

        self._reserve(sum(len(record.data) for record in records))
        self._write(put_all)

    def _discard_after(self, length: int) -> None:
        def delete_appended(txn: lmdb.Transaction) -> None:
            for key in keys_from(txn, length):
                txn.delete(key)
            txn.delete(PROGRESS)

        self._write(delete_appended)  # one transaction: the append is there, or gone
        self._require_env().sync(True)

    def finish(self, manifest: Manifest, labels: np.ndarray) -> None:
        def put_manifest(txn: lmdb.Transaction) -> None:
            txn.put(LABELS, label_table_bytes(labels))
            txn.put(LEN, str(manifest.length).encode("ascii"))
            txn.put(KEYS, json.dumps(manifest.keys).encode("ascii"))
            txn.put(MANIFEST, manifest.to_json())
            txn.delete(PROGRESS)

        self._write(put_manifest)
        self._require_env().sync(True)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
            if self._made_directory:  # a new store that was never created leaves nothing behind
                with contextlib.suppress(OSError):
                    os.rmdir(self.spec.path)

    # the environment

    def _open(self) -> lmdb.Environment:
        if self._env is None:
            data_file = os.path.join(self.spec.path, "data.mdb")
            size = os.path.getsize(data_file) if os.path.exists(data_file) else 0
            try:
                # metasync=False: a commit syncs its data, and the page that points to
                # it with the next commit. Integrity holds; an OS crash or power loss
                # may undo the last commit, which --resume then redoes. A killed
                # process loses nothing committed. finish() syncs everything. It cuts
                # the wait per commit by about half (3,000 JPEGs, --no-verify: 85 ->
                # 72 us per image on this project's disk).
                self._env = lmdb.open(self.spec.path, map_size=max(_INITIAL_MAP_SIZE, 2 * size),
                                      max_dbs=0, readahead=False, meminit=False, metasync=False)
            except lmdb.Error as exc:
                if "already open in this process" in str(exc):  # LMDB allows one environment per process
                    raise StoreError(
                        f"{self.spec.path} is open for reading in this process (a dataset that read "
                        "from it); close it (dataset.close()) or write the store from another process"
                    ) from None
                raise StoreError(
                    f"{self.spec.path}: cannot open the LMDB environment for writing ({exc})"
                ) from None
        return self._env

    def _require_env(self) -> lmdb.Environment:
        if self._env is None:
            raise StoreError(f"{self.spec.path}: the writer is not open")  # a pipeline bug, kept typed
        return self._env

    def _reserve(self, incoming: int) -> None:
        """Grow the map ahead of a commit that would not fit.

        Growing after ``MDB_MAP_FULL`` also works (:meth:`_write` does), but
        only by writing the whole batch a second time.
        """
        env = self._require_env()
        info = env.info()
        used = (info["last_pgno"] + 1) * env.stat()["psize"]
        needed = used + incoming * 3 // 2 + (1 << 20)  # values fill whole pages; B-tree pages on top
        size = info["map_size"]
        while size < needed:
            size *= 2
        if size != info["map_size"]:
            env.set_mapsize(size)

    def _write(self, body: Callable[[lmdb.Transaction], Any]) -> None:
        """Run ``body`` in one write transaction, doubling the map until it fits."""
        env = self._require_env()
        while True:
            try:
                with env.begin(write=True) as txn:
                    body(txn)
                return
            except lmdb.MapFullError:
                env.set_mapsize(env.info()["map_size"] * 2)
            except lmdb.Error as exc:
                raise StoreError.advising("{path}: write failed ({exc}); free space and rerun with {resume}",
                                          path=self.spec.path, exc=exc, resume=option("resume")) from None
