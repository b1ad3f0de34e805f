"""A datakit store as a conversion source: copied into another backend, or re-packed.

::

    datakit convert train.lmdb mongodb://host/db --collection train          # LMDB -> MongoDB
    datakit convert mongodb://host/db copy.lmdb --source-collection train    # MongoDB -> LMDB
    datakit convert train.lmdb small.lmdb --max-side 256                      # LMDB -> LMDB, smaller

SRC is read through its reader only (:class:`~datakit.stores.contract.StoreReader`),
so every backend is a source. It must be complete: an interrupted store is
refused, naming the ``--resume`` that finishes it. The copy keeps the classes
(in their order), every record's label (a class, or a multi-label row) and its
source path: each record is an entry named by the path it was converted from,
so the copy's ``samples``, ``source_path`` and ``index_of`` know the original
relative paths, and ``--resume`` and ``--append`` match records by them. The
copy's manifest names SRC as its ``source`` (the store's description) with
``source_kind`` ``"datakit"``, so an append to a copy comes from a store too.

Records are read in the reader processes by :class:`StoreRecords`, a chunk at
a time (one ``get_many``), and checked as every read path checks them
(:func:`~datakit.format.records.decode_record`: the checksum;
:func:`~datakit.format.manifest.check_record`: the header against the label
table and the size ranges); a record that fails is skipped and listed by its
source path, never copied. Its payload then goes through the same image
checks as any file: encoded bytes are verified, re-encoded under ``--max-side``
and decoded by ``--format raw``; raw pixels stay raw (they cannot be
un-decoded), resized under ``--max-side``. The scan rules name SRC's manifest
by its SHA-256, so a resume refuses a SRC that changed (grew by an append) since.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from datakit.conversion.images.checks import BadImage
from datakit.conversion.images.pixels import framed_array
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.errors import (
    CorruptRecordError,
    IncompatibleStoreError,
    IncompleteStoreError,
    InvalidLocationError,
    SourceError,
    StoreError,
)
from datakit.format.manifest import Manifest, check_record
from datakit.format.records import HEADER_SIZE, PayloadKind, decode_record, record_key
from datakit.stores import resolve_store
from datakit.stores.contract import StoreReader, StoreSpec

__all__ = ["DATAKIT", "StoreFolder", "StoreRecords", "is_datakit_lmdb", "scan_datakit_store", "kept_settings",
           "check_not_the_source"]

DATAKIT = "datakit"
"""The source kind of a datakit store, and the ``source_kind`` of a copy's manifest."""

_PATH_WINDOW = 4096  # source paths read at a time while scanning


@dataclass
class StoreFolder(SourceFolder):
    """The records of a datakit store as a :class:`~datakit.conversion.sources.folder.SourceFolder`.

    Attributes:
        multi_label: the store is multi-label; each entry's ``classes`` holds its row's classes.
        exif_transpose, max_side, quality: the store's image settings, which a copy keeps
            (:func:`kept_settings`).
    """

    multi_label: bool = False
    exif_transpose: bool = False
    max_side: int = 0
    quality: int = 0


class StoreRecords:
    """Reads a store's records in the reader processes: each process opens its own reader on its
    first read (never one carried across ``fork``) and fetches a chunk's records in one read.

    An entry's ``location`` is its index in the store, then its classes in the store's label table
    (the label alone, in a single-label store): what the record's header must agree with.

    Args:
        spec: the store (picklable, holding no connection).
    """

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self._opened: tuple[int, StoreReader] | None = None
        self._fetched: dict[int, bytes] = {}

    def __getstate__(self) -> dict[str, object]:
        return {"spec": self.spec}  # nothing opened travels

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Fetch the records of ``entries`` in one read (one transaction, or one ``$in`` query)."""
        indices = [entry.location[0] for entry in entries if entry.location]
        try:
            self._fetched = dict(zip(indices, self._reader().get_many(indices), strict=True))
        except CorruptRecordError:  # one is missing: :meth:`read` fetches each alone, naming it
            self._fetched = {}

    def read(self, entry: SourceEntry) -> bytearray:
        if len(entry.location) < 2:
            raise BadImage(f"not a record of {self.spec.describe()}")
        index = entry.location[0]
        key = record_key(index)
        data = self._fetched.pop(index, None)
        try:
            if data is None:
                data = self._reader().get_many([index])[0]
            record = decode_record(data, key)
            reader = self._reader()
            check_record(record, key, 0, reader.manifest, _targets(entry, reader.manifest))
        except (CorruptRecordError, IncompatibleStoreError) as exc:
            raise BadImage(f"in the source store: {exc}") from None
        header = record.header
        if header.kind is PayloadKind.RAW:
            pixels = np.frombuffer(record.payload, dtype=np.uint8).reshape(header.shape)
            return framed_array(pixels)
        framed = bytearray(HEADER_SIZE + len(record.payload))
        framed[HEADER_SIZE:] = record.payload
        return framed

    def close(self) -> None:
        opened, self._opened = self._opened, None
        self._fetched = {}
        if opened is not None and opened[0] == os.getpid():
            opened[1].close()

    def _reader(self) -> StoreReader:
        if self._opened is None or self._opened[0] != os.getpid():  # first read, or forked: open our own
            self._opened = (os.getpid(), self.spec.open_reader())
        return self._opened[1]


def _targets(entry: SourceEntry, manifest: Manifest) -> np.ndarray:
    """The label table's row of ``entry`` alone, as :func:`~datakit.format.manifest.check_record` takes it."""
    if not manifest.multi_label:
        return np.asarray([entry.location[1]], dtype=np.int64)
    row = np.zeros((1, len(manifest.classes)), dtype=np.uint8)
    row[0, list(entry.location[1:])] = 1
    return row


def is_datakit_lmdb(path: str) -> bool:
    """Whether the folder ``path`` holds a datakit LMDB store, complete or interrupted.

    Asked through the store's own contract (:meth:`~datakit.stores.contract.StoreWriter.is_store`,
    which only looks, through this process's shared read-only environment: a dataset
    open on the store in this process does not hide it).
    """
    if not os.path.isdir(path):
        return False
    with resolve_store(path).open_writer() as writer:
        return writer.is_store()


def scan_datakit_store(spec: StoreSpec) -> tuple[StoreFolder, str]:
    """The records of the complete store at ``spec`` as entries, and the scan rules naming them.

    Raises:
        SourceError: the store is incomplete (the message says how to finish it).
        StoreError: there is no store, or its manifest or label table is damaged.
    """
    where = spec.describe()
    try:
        reader = spec.open_reader()
    except IncompleteStoreError as exc:
        raise SourceError(f"cannot copy {where}: {exc} first, then copy it") from None
    with reader:
        manifest = reader.manifest
        table = reader.labels()
        entries, rejected = _entries(reader, table, manifest.multi_label)
    digest = hashlib.sha256(manifest.to_json()).hexdigest()
    folder = StoreFolder(where, list(manifest.classes), entries, class_order=manifest.class_order,
                         kind=DATAKIT, reader=StoreRecords(spec), rejected=rejected,
                         payload_kind="raw" if manifest.payload_kind == PayloadKind.RAW.label else "",
                         multi_label=manifest.multi_label, exif_transpose=manifest.exif_transpose,
                         max_side=manifest.max_side, quality=manifest.quality)
    return folder, f"{DATAKIT} {spec.backend} manifest sha256:{digest}"


def _entries(reader: StoreReader, table: np.ndarray,
             multi: bool) -> tuple[list[SourceEntry], list[tuple[str, str]]]:
    """One entry per record, named by its source path; the records that cannot be, with why."""
    entries: list[SourceEntry] = []
    rejected: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for start in range(0, len(reader), _PATH_WINDOW):
        stop = min(len(reader), start + _PATH_WINDOW)
        for index, path in enumerate(_source_paths(reader, start, stop), start):
            key = record_key(index)
            if path == "?":
                rejected.append((f"record {key}", "its source path is missing from the source store, so it "
                                                  "has no name to be copied under"))
                continue
            if path in seen:
                first = record_key(seen[path])
                rejected.append((path, f"record {key} has the source path of record {first}; copied once, "
                                       "as the first"))
                continue
            seen[path] = index
            classes = tuple(int(label) for label in np.flatnonzero(table[index])) if multi else ()
            if multi and not classes:
                rejected.append((path, f"record {key} has no class in the source store's label table"))
                continue
            label = classes[0] if multi else int(table[index])
            entries.append(SourceEntry(path, label, classes, (index, *(classes or (label,)))))
    return entries, rejected


def _source_paths(reader: StoreReader, start: int, stop: int) -> list[str]:
    """The source paths of records ``start .. stop - 1``; ``"?"`` for one the store lost."""
    try:
        return reader.source_path_range(start, stop)
    except StoreError:  # a path is missing: read them one by one, to name only that record
        return reader.source_paths(range(start, stop))


def kept_settings(folder: SourceFolder, exif_transpose: bool, max_side: int | None,
                  quality: int) -> tuple[bool, int | None, int]:
    """The image settings a conversion of ``folder`` stores under: those asked for, except that a
    copy keeps its source store's where none is asked (``max_side`` not given, ``exif_transpose``
    off).

    The source's records are upright and resized as its settings say, so the copy's manifest
    says so too, and an append to the copy resizes and turns its images the same way.
    """
    if not isinstance(folder, StoreFolder):
        return exif_transpose, max_side, quality
    if max_side is None and folder.max_side:
        max_side, quality = folder.max_side, folder.quality
    return exif_transpose or folder.exif_transpose, max_side, quality


def check_not_the_source(source: str, dest: StoreSpec) -> None:
    """Refuse to write a store into the source it is read from: it would be replaced, or grown,
    while read.

    Args:
        source: SRC's path, or the name a scan gave a source on a server (a MongoDB
            collection's :meth:`~datakit.stores.contract.StoreSpec.describe`).
        dest: the destination.

    Raises:
        InvalidLocationError: ``dest`` is the datakit store at ``source``, or the collection it names.
    """
    local = dest.local_path()
    if local is None:
        same = source == dest.describe()
    else:
        same = os.path.realpath(local) == os.path.realpath(source) and is_datakit_lmdb(source)
    if same:
        raise InvalidLocationError(f"{dest.describe()} is the source store itself; write the copy to another "
                                   "path or collection")
