"""LMDB backend: a store is an LMDB environment directory.

Layout of the environment's main database (keys are bytes)::

    0000000000 .. 0000000041   records (datakit.records), key = record_key(index)
    __src__/0000000000 ...     int32 label + UTF-8 source path of each record
    __progress__               JSON: conversion settings and running totals
                               (present while the conversion is incomplete)
    __labels__                 int32 little-endian array, one label per record
    __len__                    number of records, ASCII decimal
    __keys__                   JSON key scheme
    __manifest__               JSON manifest; written in the final commit

Digits sort before ``_``, so the records form one contiguous key range.
While a conversion writes the store, the directory also holds its writer lock
(``datakit-writer.lock``, see :mod:`datakit.stores.dirlock`).
Readers open the environment ``readonly=True, lock=False``: no lock file, no
reader slots to exhaust, safe because a complete store is never written again.
LMDB allows one open environment per store per process, so readers share
them through :data:`_environments`, which also replaces an environment
inherited through ``fork`` with the child's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb
import numpy as np

from datakit.errors import (
    CorruptRecordError,
    DestinationExistsError,
    IncompleteStoreError,
    Spelling,
    StoreBusyError,
    StoreError,
    StoreNotFoundError,
    option,
)
from datakit.manifest import KEY_DIGITS, Manifest, Stats, record_key
from datakit.stores.base import (
    AppendState,
    CommittedState,
    ConversionSettings,
    PendingRecord,
    StoreReader,
    StoreSpec,
    StoreWriter,
    WriterIdentity,
    busy_message,
    check_option_names,
    check_range,
    incomplete_message,
    label_table_bytes,
    label_table_size,
    missing_source_message,
    parse_label_table,
    stats_fit,
)
from datakit.stores.dirlock import LOCK_NAME, DirectoryLock, lock_holder
from datakit.stores.pathkind import not_a_store_message

__all__ = ["LMDBSpec", "LMDBReader", "LMDBWriter", "make_spec"]

_MANIFEST = b"__manifest__"
_PROGRESS = b"__progress__"
_LABELS = b"__labels__"
_LEN = b"__len__"
_KEYS = b"__keys__"
_SOURCE_PREFIX = b"__src__/"
_LABEL = struct.Struct("<i")
_DATA_FILES = ("data.mdb", "lock.mdb")
_INITIAL_MAP_SIZE = 64 << 20
_FOREIGN = ("is not a datakit store: an LMDB environment with neither a datakit manifest nor a "
            "conversion in progress (it was not written by `datakit convert`)")


_MONGODB_OPTIONS = ("collection", "database")


def make_spec(location: str, backend_options: Mapping[str, str] | None = None) -> LMDBSpec:
    """Registry entry point: an LMDB store at the path ``location``.

    An LMDB store takes no option; MongoDB's, given with a path, are refused
    with a message that says they need a URI.

    Raises:
        StoreError: ``collection`` or ``database`` was given.
        TypeError: an option no backend knows.
    """
    options = backend_options or {}
    check_option_names(options, _MONGODB_OPTIONS)
    if any(options.get(name) is not None for name in _MONGODB_OPTIONS):
        raise StoreError.advising(
            "{location!r} is a filesystem path (an LMDB store); {options} apply only to mongodb:// URIs",
            location=location, options=Spelling("collection and database", "--collection and --database"))
    return LMDBSpec(os.path.abspath(os.path.expanduser(location)))


@dataclass(frozen=True)
class LMDBSpec(StoreSpec):
    """An LMDB store: a directory holding ``data.mdb``."""

    path: str
    backend = "lmdb"

    def open_reader(self) -> LMDBReader:
        return LMDBReader(self)

    def open_writer(self) -> LMDBWriter:
        return LMDBWriter(self)

    def describe(self) -> str:
        return self.path

    def local_path(self) -> str:
        return self.path

    def is_lmdb_store(self) -> bool:
        return os.path.isfile(os.path.join(self.path, "data.mdb"))


class _ReadOnlyEnvironments:
    """This process's read-only environments, one per store, shared by its readers.

    py-lmdb refuses to open an environment twice in one process, and after
    ``fork`` the child inherits the parent's open environments (and py-lmdb's
    record of them) although it must not use them. An environment opened by
    another process is closed here (harmless for ``lock=False``: it only
    unmaps the child's copy) and opened afresh.
    """

    def __init__(self) -> None:
        self._open: dict[str, tuple[int, lmdb.Environment, int]] = {}

    def acquire(self, path: str) -> lmdb.Environment:
        pid = os.getpid()
        entry = self._open.get(path)
        if entry is not None and entry[0] == pid:
            self._open[path] = (pid, entry[1], entry[2] + 1)
            return entry[1]
        if entry is not None:
            entry[1].close()  # inherited through fork
        try:
            env = lmdb.open(path, readonly=True, lock=False, readahead=False, max_dbs=0)
        except lmdb.Error as exc:
            self._open.pop(path, None)
            raise StoreError(f"{path}: cannot open the LMDB environment ({exc})") from None
        self._open[path] = (pid, env, 1)
        return env

    def release(self, path: str) -> None:
        entry = self._open.get(path)
        if entry is None or entry[0] != os.getpid():
            return
        pid, env, users = entry
        if users > 1:
            self._open[path] = (pid, env, users - 1)
        else:
            del self._open[path]
            env.close()


_environments = _ReadOnlyEnvironments()


def _encode_source(label: int, source: str) -> bytes:
    return _LABEL.pack(label) + source.encode("utf-8", "surrogateescape")


def _decode_source(value: bytes, key: bytes, path: str) -> tuple[int, str]:
    if len(value) < _LABEL.size:
        raise StoreError.advising("{path}: source entry {key!r} is truncated ({size} bytes); reconvert with "
                                  "{overwrite}", path=path, key=key.decode("ascii", "replace"),
                                  size=len(value), overwrite=option("overwrite"))
    (label,) = _LABEL.unpack_from(value)
    return label, value[_LABEL.size:].decode("utf-8", "surrogateescape")


def _is_foreign(txn: lmdb.Transaction) -> bool:
    """Whether an environment holds entries but neither a manifest nor conversion progress:
    someone else's data. (An empty one is a conversion killed before its first commit.)"""
    return txn.get(_MANIFEST) is None and txn.get(_PROGRESS) is None and txn.cursor().first()


def _record_range(txn: lmdb.Transaction) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the record range, in key order."""
    cursor = txn.cursor()
    if not cursor.first():
        return
    for key, value in cursor:
        key = bytes(key)
        if len(key) != KEY_DIGITS or not key.isdigit():
            return
        yield key, bytes(value)


class LMDBReader(StoreReader):
    """Reads a complete LMDB store. Open one per process."""

    spec: LMDBSpec

    def __init__(self, spec: LMDBSpec) -> None:
        self.spec = spec
        if not os.path.exists(spec.path):
            raise StoreNotFoundError(
                f"no store at {spec.path}; create one with `datakit convert SRC {spec.path}`"
            )
        if not spec.is_lmdb_store():
            raise StoreError(not_a_store_message(spec.path))
        self._env = _environments.acquire(spec.path)
        self._closed = False
        try:
            self._manifest = self._load_manifest()
        except BaseException:
            self.close()
            raise

    def _load_manifest(self) -> Manifest:
        with self._begin() as txn:
            raw = txn.get(_MANIFEST)
            progress = txn.get(_PROGRESS)
            foreign = _is_foreign(txn)
        if foreign:
            raise StoreError(f"{self.spec.path} {_FOREIGN}")
        if raw is None:
            raise IncompleteStoreError(incomplete_message(self.spec, _progress_source(progress),
                                                          lock_holder(self.spec.path)))
        try:
            return Manifest.from_json(raw, self.spec.path)
        except RecursionError:  # JSON nested too deeply for the parser: hostile, not a crash
            raise StoreError(
                f"{self.spec.path}: the manifest is not valid JSON (nested too deeply)") from None

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    def _begin(self) -> lmdb.Transaction[bytes]:
        """A read transaction; after an append grew the file past this process's map, the
        map is widened to the file's first (old records never move, so the view holds)."""
        try:
            return self._env.begin()
        except lmdb.MapResizedError:
            self._env.set_mapsize(0)  # LMDB's word for "adopt the size the writer set"
            return self._env.begin()

    def labels(self) -> np.ndarray:
        with self._begin() as txn:
            raw = txn.get(_LABELS)
            now = txn.get(_LEN)
        size = label_table_size(self._manifest)
        if raw is not None and len(raw) > size and now is not None and now.isdigit() \
                and int(now) > self._manifest.length:  # an append grew the store since this reader opened
            raw = raw[:size]
        return parse_label_table(None if raw is None else bytes(raw), self._manifest, self.spec.path)

    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        records = []
        with self._begin() as txn:
            for index in indices:
                key = record_key(index)
                value = txn.get(key.encode("ascii"))
                if value is None:
                    raise CorruptRecordError(key, f"missing from {self.spec.path}")
                records.append(value)
        return records

    def iter_records(self) -> Iterator[tuple[int, bytes]]:
        with self._begin() as txn:
            for key, value in _record_range(txn):
                if int(key) >= self._manifest.length:
                    return  # appended after this reader's manifest (or being appended now)
                yield int(key), value

    def source_paths(self, indices: Sequence[int]) -> list[str]:
        with self._begin() as txn:
            keys = [_SOURCE_PREFIX + record_key(i).encode("ascii") for i in indices]
            values = [txn.get(key) for key in keys]
        return [_decode_source(value, key, self.spec.path)[1] if value else "?"
                for key, value in zip(keys, values, strict=True)]

    def source_path_range(self, start: int, stop: int) -> list[str]:
        check_range(start, stop, self._manifest.length)
        paths: list[str] = []
        with self._begin() as txn:
            cursor = txn.cursor()
            if start < stop and cursor.set_range(_SOURCE_PREFIX + record_key(start).encode("ascii")):
                for key, value in cursor:
                    if bytes(key) != _SOURCE_PREFIX + record_key(start + len(paths)).encode("ascii"):
                        break  # a gap, or past the source entries
                    paths.append(_decode_source(bytes(value), bytes(key), self.spec.path)[1])
                    if len(paths) == stop - start:
                        break
        if len(paths) != stop - start:
            raise StoreError(missing_source_message(self.spec.path, record_key(start + len(paths))))
        return paths

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _environments.release(self.spec.path)


def _progress_source(progress: bytes | None) -> object:
    """The source folder an incomplete store's progress names; ``None`` when unreadable."""
    if progress is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError, RecursionError):
            return json.loads(progress)["settings"]["source"]
    return None


class LMDBWriter(StoreWriter):
    """Writes one conversion into an LMDB environment, growing its map as needed."""

    spec: LMDBSpec

    def __init__(self, spec: LMDBSpec) -> None:
        self.spec = spec
        self._env: lmdb.Environment | None = None
        self._conversion: ConversionSettings | None = None
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
        if not self.spec.is_lmdb_store():
            return False
        try:
            env = _environments.acquire(self.spec.path)
        except StoreError:
            return False  # not readable as LMDB: nothing says it is datakit's
        try:
            with env.begin() as txn:
                return not _is_foreign(txn)
        finally:
            _environments.release(self.spec.path)

    def is_complete(self) -> bool:
        if not self.spec.is_lmdb_store():
            return False
        try:
            env = _environments.acquire(self.spec.path)
        except StoreError:
            return False
        try:
            with env.begin() as txn:
                return txn.get(_MANIFEST) is not None
        finally:
            _environments.release(self.spec.path)

    def remove(self) -> None:
        path = self.spec.path
        if not self.is_store():
            raise DestinationExistsError(
                f"{path} exists and is not a datakit store; refusing to delete it. "
                "Remove it yourself or choose another destination."
            )
        for name in _DATA_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(path, name))
        with contextlib.suppress(OSError):  # the directory still holds files of the user's: keep them
            os.rmdir(path)

    def create(self, settings: ConversionSettings) -> None:
        os.makedirs(self.spec.path, exist_ok=True)
        self._open()
        self._conversion = settings
        empty = Stats(class_counts=[0] * len(settings.classes))
        self._write(lambda txn: txn.put(_PROGRESS, _progress_json(settings, empty)))

    def committed_state(self) -> CommittedState:
        path = self.spec.path
        if not self.spec.is_lmdb_store():
            raise StoreError(f"{path} is not a datakit store (it has no data.mdb), so there is nothing "
                             "to resume; choose another destination")
        env = self._open()
        with env.begin() as txn:
            if txn.get(_MANIFEST) is not None:
                raise StoreError(f"{path} is already complete; there is nothing to resume")
            if _is_foreign(txn):
                raise StoreError(f"{path} {_FOREIGN}, so there is nothing to resume; choose another "
                                 "destination")
            progress = txn.get(_PROGRESS)
            sources, labels = self._read_sources(txn)
        state = _parse_progress(progress, path)
        classes = len(state.settings.classes)
        if state.stats.length != len(sources) or not all(0 <= label < classes for label in labels):
            raise StoreError.advising("{path}: the progress entry disagrees with the stored records; "
                                      "reconvert with {overwrite}", path=path, overwrite=option("overwrite"))
        state.sources, state.labels = sources, labels
        self._conversion = state.settings
        return state

    def append_state(self) -> AppendState:
        path = self.spec.path
        if not self.spec.is_lmdb_store():
            raise StoreError.advising("{path} is not a datakit store (it has no data.mdb), so there is "
                                      "nothing to append to; convert into it without {append} first",
                                      path=path, append=option("append"))
        env = self._open()
        with env.begin() as txn:
            raw, progress, table = txn.get(_MANIFEST), txn.get(_PROGRESS), txn.get(_LABELS)
            sources, labels = self._read_sources(txn)
        if raw is None:
            raise StoreError.advising("{path} is not a complete store; finish it with {resume} before "
                                      "appending", path=path, resume=option("resume"))
        manifest = Manifest.from_json(raw, path)
        interrupted = _parse_progress(progress, path) if progress is not None else None
        length = interrupted.stats.length if interrupted is not None else manifest.length
        classes = len(interrupted.settings.classes if interrupted is not None else manifest.classes)
        if len(sources) != length or not all(0 <= label < classes for label in labels):
            against = "append progress" if interrupted else "manifest"
            raise StoreError.advising("{path}: the stored records disagree with the {against}; reconvert "
                                      "with {overwrite}", path=path, against=against,
                                      overwrite=option("overwrite"))
        size = label_table_size(manifest)
        return AppendState(manifest, parse_label_table(None if table is None else bytes(table)[:size],
                                                       manifest, path), sources, labels, interrupted)

    def _read_sources(self, txn: lmdb.Transaction[bytes]) -> tuple[list[str], list[int]]:
        """The source path and label of every record written so far, in index order."""
        sources: list[str] = []
        labels: list[int] = []
        cursor = txn.cursor()
        if cursor.set_range(_SOURCE_PREFIX):
            for key, value in cursor:
                if not key.startswith(_SOURCE_PREFIX):
                    break
                label, source = _decode_source(bytes(value), bytes(key), self.spec.path)
                labels.append(label)
                sources.append(source)
        return sources, labels

    def begin_append(self, settings: ConversionSettings) -> None:
        self._open()
        self._conversion = settings

    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        settings = self._conversion
        if settings is None:
            raise StoreError(f"{self.spec.path}: commit before create() or committed_state()")

        def put_all(txn: lmdb.Transaction) -> None:
            for record in records:
                key = record_key(record.index).encode("ascii")
                txn.put(key, record.data)
                txn.put(_SOURCE_PREFIX + key, _encode_source(record.label, record.source))
            txn.put(_PROGRESS, _progress_json(settings, stats))

        self._reserve(sum(len(record.data) for record in records))
        self._write(put_all)

    def finish(self, manifest: Manifest, labels: np.ndarray) -> None:
        def put_manifest(txn: lmdb.Transaction) -> None:
            txn.put(_LABELS, label_table_bytes(labels))
            txn.put(_LEN, str(manifest.length).encode("ascii"))
            txn.put(_KEYS, json.dumps(manifest.keys).encode("ascii"))
            txn.put(_MANIFEST, manifest.to_json())
            txn.delete(_PROGRESS)

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

    # internals

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


def _progress_json(settings: ConversionSettings, stats: Stats) -> bytes:
    return json.dumps({"settings": settings.to_dict(), "stats": stats.to_dict()}).encode("utf-8")


def _parse_progress(raw: bytes | None, path: str) -> CommittedState:
    try:
        data = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        data = None
    settings = ConversionSettings.from_dict(data.get("settings") if isinstance(data, dict) else None)
    if settings is None or not isinstance(data, dict):
        raise StoreError.advising("{path} has no readable conversion progress; reconvert with {overwrite}",
                                  path=path, overwrite=option("overwrite"))
    stats = Stats.from_dict(data.get("stats"), path)
    if not stats_fit(stats, settings):
        raise StoreError.advising("{path}: the progress entry's statistics do not fit its settings; "
                                  "reconvert with {overwrite}", path=path, overwrite=option("overwrite"))
    return CommittedState(settings, stats)

