"""The small contract every storage backend implements, and what backends share.

A backend is three pieces, listed in the registry (``datakit.stores``):

* a :class:`StoreSpec`: a small, picklable description of where a store lives
  (a path, or a URI and a collection). Datasets hold a spec, never an open
  handle, so they cross ``fork`` and ``spawn`` safely and each process opens
  its own connection.
* a :class:`StoreWriter`: used by the conversion pipeline, which owns the
  logic (reading, verifying, numbering, statistics) and hands the writer
  whole batches to commit.
* a :class:`StoreReader`: raw record bytes by index, the manifest, the labels.

Record bytes are produced and parsed by :mod:`datakit.format.records` only; a
backend never looks inside them. What every backend does alike is written here
once: opening a reader, reading a store back for ``--resume`` and ``--append``,
refusing to remove what is not a store (with :mod:`~datakit.stores.conversion_state`,
:mod:`~datakit.stores.labeltable`, :mod:`~datakit.stores.refusals`, :mod:`~datakit.stores.unfinished_append`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from datakit.errors import DestinationExistsError, StoreError, option
from datakit.format.manifest import Manifest
from datakit.format.stats import Stats
from datakit.stores.conversion_state import (
    AppendState,
    CommittedState,
    ConversionSettings,
    PendingRecord,
    StoredMeta,
    WriterIdentity,
    parse_progress,
    stored_labels,
)
from datakit.stores.labeltable import label_table_size, parse_label_table
from datakit.stores.refusals import load_manifest, records_disagree
from datakit.stores.unfinished_append import AppendProgress, AppendRollback

__all__ = ["StoreSpec", "StoreReader", "StoreWriter"]


class StoreSpec(ABC):
    """Where a store lives. Picklable, cheap, holds no open handle."""

    backend: str
    """Short backend name, as ``datakit inspect --json`` reports it."""

    @abstractmethod
    def open_reader(self) -> StoreReader:
        """Open the store for reading in the calling process."""

    @abstractmethod
    def open_writer(self) -> StoreWriter:
        """Open the location for a conversion in the calling process."""

    @abstractmethod
    def describe(self) -> str:
        """The store's location as a user would write it, for messages."""

    def command_arguments(self) -> str:
        """How the CLI names this store after ``datakit convert SRC`` (with ``--collection``...)."""
        return self.describe()

    def summary_fields(self) -> dict[str, Any]:
        """Fields identifying the store in ``datakit inspect --json``."""
        return {"backend": self.backend, "path": self.describe()}

    def local_path(self) -> str | None:
        """The folder holding the store when it lives on this machine's file system,
        else ``None`` (a conversion refuses a destination inside its source folder)."""
        return None

    def server(self) -> str | None:
        """The server holding the store, as messages name it (no password), or ``None``
        for a local store; the command line says it is connecting before it waits."""
        return None

    def __str__(self) -> str:
        return self.describe()


class StoreReader(AppendProgress, ABC):
    """Read access to one complete store, owned by a single process.

    Opening is the same for every backend: connect (:meth:`_connect`), then
    load and check the manifest (:meth:`_manifest_json`); a failure in between
    closes what was opened, so a refused store leaves no connection behind.

    Args:
        spec: the store.
    """

    spec: StoreSpec

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self._connect()
        try:
            self._manifest = load_manifest(self._manifest_json(), spec.describe())
        except BaseException:
            self.close()
            raise

    @abstractmethod
    def _connect(self) -> None:
        """Open this process's connection to the store.

        Raises:
            StoreNotFoundError: nothing is at the location.
            StoreError: what is there cannot be a store of this backend.
        """

    @abstractmethod
    def _manifest_json(self) -> bytes:
        """The stored manifest's JSON.

        Raises:
            IncompleteStoreError: the store has none; the message is
                :func:`~datakit.stores.refusals.incomplete_message`'s, naming the running writer if one is.
            StoreError: the location holds something else than a datakit store.
        """

    @property
    def manifest(self) -> Manifest:
        """The store's manifest, loaded when the reader opened."""
        return self._manifest

    def labels(self) -> np.ndarray:
        """Every record's label, in index order: a 1-D int64 array, or a 2-D uint8 multi-hot
        array in a multi-label store (:func:`~datakit.stores.labeltable.parse_label_table`).

        A table longer than this reader's manifest is read up to the manifest's
        length when an append grew the store since the reader opened.

        Raises:
            StoreError: the table is missing or does not fit the manifest.
        """
        raw = self._label_table()
        size = label_table_size(self._manifest)
        if raw is not None and len(raw) > size and self._grown():
            raw = raw[:size]
        return parse_label_table(raw, self._manifest, self.spec.describe())

    @abstractmethod
    def _label_table(self) -> bytes | None:
        """The stored label table's bytes, ``None`` when there is none."""

    @abstractmethod
    def _grown(self) -> bool:
        """Whether an append is growing the store, or grew it since this reader opened."""

    @abstractmethod
    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        """Raw record bytes for ``indices``, in that order, in one read.

        Raises:
            CorruptRecordError: a record is missing.
        """

    @abstractmethod
    def iter_records(self) -> Iterator[tuple[int, bytes]]:
        """Every ``(index, record bytes)`` in index order, streamed."""

    @abstractmethod
    def source_paths(self, indices: Sequence[int]) -> list[str]:
        """The source path each record was converted from (``"?"`` where the store lost it)."""

    @abstractmethod
    def source_path_range(self, start: int, stop: int) -> list[str]:
        """The source paths of records ``start .. stop - 1``, in one range read.

        Each path is relative to the manifest's ``source`` folder and
        ``/``-separated. Datasets read their ``samples`` through this, a slice
        or a window at a time, so no process ever holds every path.

        Raises:
            IndexError: the range is not within ``0 .. len(self)``.
            StoreError: a record's source path is missing from the store.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the connection; the reader is unusable afterwards."""

    def __len__(self) -> int:
        return self.manifest.length

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class StoreWriter(AppendRollback, ABC):
    """Write access for one conversion.

    The pipeline (the conversion pipeline) first looks at the location: when
    :meth:`exists` is false it calls :meth:`create`; with ``--overwrite`` it
    calls :meth:`remove`, then :meth:`create`; with ``--resume`` it asks
    :meth:`is_complete` (a complete store is left alone) and otherwise reopens
    the store with :meth:`committed_state`. Then it calls :meth:`commit` for
    each batch, then :meth:`finish` with the manifest. Each commit is atomic and must
    survive the process being killed once it returns (a power loss may undo
    the last one, never part of one), and a crash between commits must leave a
    store that :meth:`committed_state` can read back; the manifest is written by
    :meth:`finish` only, durably, so a store without one is known to be incomplete.

    Before any of that, the pipeline calls :meth:`lock`: one conversion at a
    time may write a store, and the claim lasts until :meth:`close` or the
    writer's process dies, whichever comes first.

    Reading a store back and refusing to remove what is not a store are the
    same for every backend and written here once; a backend says what it
    holds (:meth:`_read_meta`, :meth:`_read_records`, :meth:`_read_label_table`)
    and how to delete it (:meth:`_remove_store`).

    Args:
        spec: the store to write.
    """

    spec: StoreSpec

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self._conversion: ConversionSettings | None = None
        self._resumed_at: int | None = None  # records committed when the store was read back

    @abstractmethod
    def lock(self) -> None:
        """Claim the location for this conversion until :meth:`close`.

        The claim must end with the process that holds it (a lock the kernel
        drops, or a lease that expires), so a killed conversion never blocks
        its ``--resume`` for good.

        Raises:
            StoreBusyError: another conversion holds the location; the message
                names its pid and host (:func:`~datakit.stores.refusals.busy_message`).
        """

    @abstractmethod
    def running_writer(self) -> WriterIdentity | None:
        """The conversion that holds the location now, if another than this writer.

        ``datakit inspect`` asks, so that a store being written is not called
        interrupted (which would invite a second writer with ``--resume``).
        """

    @abstractmethod
    def exists(self) -> bool:
        """Whether anything is at the location already."""

    @abstractmethod
    def is_store(self) -> bool:
        """Whether the location holds a datakit store, complete or not."""

    @abstractmethod
    def is_complete(self) -> bool:
        """Whether the location holds a complete store (one with a manifest)."""

    def remove(self) -> None:
        """Delete the store at the location (``--overwrite``).

        Raises:
            DestinationExistsError: the location holds something that is not
                a datakit store; it is left untouched.
        """
        if not self.is_store():
            raise DestinationExistsError(f"{self.spec.describe()} exists and is not a datakit store; "
                                         "refusing to delete it. Delete it yourself or choose another "
                                         "destination.")
        self._remove_store()

    @abstractmethod
    def create(self, settings: ConversionSettings) -> None:
        """Start a new, empty, incomplete store."""

    def committed_state(self) -> CommittedState:
        """Reopen an incomplete store and read back what it committed.

        Changes nothing: ``datakit inspect`` asks too, possibly while a conversion runs.

        Raises:
            StoreError: the location is not an incomplete datakit store, or
                its progress disagrees with itself or with its records.
        """
        where = self.spec.describe()
        meta = self._read_meta()
        if meta.manifest is not None:
            raise StoreError(f"{where} is already complete; there is nothing to resume")
        if meta.progress is None and meta.not_a_store:
            raise StoreError(f"{where} is not a datakit store ({meta.not_a_store}), so there is nothing to "
                             "resume; choose another destination")
        state = parse_progress(meta.progress, where)
        labels = stored_labels(state.settings.label_kind, len(state.settings.classes))
        state.sources, state.labels = self._read_records(state.stats.length, labels, "conversion progress")
        self._conversion, self._resumed_at = state.settings, state.stats.length
        return state

    @abstractmethod
    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        """Add ``records`` and record ``stats`` as the running totals, in one atomic step."""

    def append_state(self) -> AppendState:
        """Read back a complete store that ``--append`` grows (after :meth:`lock`).

        Raises:
            StoreError: the location holds no complete store, or its records
                disagree with its manifest or its append progress.
        """
        where = self.spec.describe()
        meta = self._read_meta()
        if meta.manifest is None:
            if meta.progress is None and meta.not_a_store:
                raise StoreError.advising("{where} is not a datakit store ({why}), so there is nothing to "
                                          "append to; convert into it without {append} first", where=where,
                                          why=meta.not_a_store, append=option("append"))
            raise StoreError.advising("{where} is not a complete store; finish it with {resume} before "
                                      "appending", where=where, resume=option("resume"))
        manifest = load_manifest(meta.manifest, where)
        interrupted = (None if meta.progress is None
                       else parse_progress(meta.progress, where, "append progress"))
        if interrupted is not None and interrupted.stats.length < manifest.length:
            raise records_disagree(where, "append progress")
        count = manifest.length if interrupted is None else interrupted.stats.length
        classes = len(manifest.classes if interrupted is None else interrupted.settings.classes)
        sources, labels = self._read_records(count, stored_labels(manifest.label_kind, classes),
                                             "manifest" if interrupted is None else "append progress")
        table = self._read_label_table()
        size = label_table_size(manifest)
        self._resumed_at = count  # records past it are a batch an interrupted append left
        return AppendState(manifest, parse_label_table(None if table is None else table[:size], manifest,
                                                       where), sources, labels, interrupted)

    def begin_append(self, settings: ConversionSettings) -> None:
        """Commit the records that follow into a complete store under ``settings``
        (after :meth:`append_state`).

        The manifest stays as it is, so readers keep seeing the store as it
        was; each :meth:`commit` writes the append's progress next to it, and
        :meth:`finish` replaces the label table and the manifest, readers
        opened before keeping their view (a longer label table is read up
        to their manifest's length).
        """
        self._conversion = settings

    @abstractmethod
    def finish(self, manifest: Manifest, labels: np.ndarray) -> None:
        """Write the labels and the manifest, completing the store."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection, whether or not the store was finished."""

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # what a backend supplies to read a store back and to remove it

    @abstractmethod
    def _read_meta(self) -> StoredMeta:
        """The manifest and progress at the location, read together (opening the
        store for writing, if it is one)."""

    @abstractmethod
    def _read_records(self, count: int, labels: range, against: str) -> tuple[list[str], list[int]]:
        """The source path and label of records ``0 .. count - 1``.

        Raises:
            StoreError: one is missing, or its label is not in ``labels``
                (:func:`~datakit.stores.conversion_state.stored_labels`);
                the message says that the ``against`` (what gave ``count``)
                disagrees with the stored records (:func:`~datakit.stores.refusals.records_disagree`).
        """

    @abstractmethod
    def _read_label_table(self) -> bytes | None:
        """The stored label table's bytes, ``None`` when there is none."""

    @abstractmethod
    def _remove_store(self) -> None:
        """Delete the datakit store at the location, leaving anything else there alone."""

    def _settings(self) -> ConversionSettings:
        """The settings records are committed under: from :meth:`create`,
        :meth:`committed_state` or :meth:`begin_append`."""
        if self._conversion is None:
            raise StoreError(f"{self.spec.describe()}: commit before create() or committed_state()")
        return self._conversion
