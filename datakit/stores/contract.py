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

Record bytes are produced and parsed by :mod:`datakit.records` only; a backend
never looks inside them. Backends also share here the checks a resumed store's
statistics must pass (:func:`stats_fit`), the message that refuses an
incomplete store (:func:`incomplete_message`), and the check of option names
(:func:`check_option_names`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datakit.errors import StoreError
from datakit.manifest import Manifest, Stats

__all__ = [
    "StoreSpec",
    "StoreReader",
    "StoreWriter",
    "PendingRecord",
    "ConversionSettings",
    "CommittedState",
    "WriterIdentity",
    "stats_fit",
    "label_table_bytes",
    "label_table_size",
    "AppendState",
    "parse_label_table",
    "check_range",
    "missing_source_message",
    "incomplete_message",
    "busy_message",
    "check_option_names",
]


@dataclass(frozen=True)
class PendingRecord:
    """One record ready to be committed.

    Attributes:
        index: the sample index; the record's key is ``record_key(index)``.
        source: the image's path relative to the source folder (kept for
            inspection and for resuming, never loaded per sample).
        label: the class index.
        data: the encoded record (see :mod:`datakit.records`).
    """

    index: int
    source: str
    label: int
    data: bytes | bytearray


@dataclass(frozen=True)
class ConversionSettings:
    """What a resumed conversion must agree on with the one it continues.

    Attributes:
        source: the image folder.
        classes: its class names.
        payload_kind: ``"encoded"`` or ``"raw"``.
        scan: the rules that ordered the source files (:func:`datakit.source.scan_rules`);
            empty for a conversion started before they were recorded.
        exif_transpose: whether images with an EXIF orientation are stored upright.
        max_side: the ``--max-side`` images are downscaled under (0: none).
        quality: the JPEG quality they are re-encoded at (0 without ``max_side``).
        label_kind: ``"single"`` or ``"multi"`` (a multi-label ``--labels`` file).
    """

    source: str
    classes: list[str]
    payload_kind: str
    scan: str = ""
    exif_transpose: bool = False
    max_side: int = 0
    quality: int = 0
    label_kind: str = "single"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "classes": list(self.classes), "payload_kind": self.payload_kind,
                "scan": self.scan, "exif_transpose": self.exif_transpose, "max_side": self.max_side,
                "quality": self.quality, "label_kind": self.label_kind}

    @classmethod
    def from_dict(cls, data: Any) -> ConversionSettings | None:
        """Parse stored settings; ``None`` when they are not well formed."""
        if not isinstance(data, dict):
            return None
        source, classes, kind = data.get("source"), data.get("classes"), data.get("payload_kind")
        scan = data.get("scan", "")
        exif_transpose = data.get("exif_transpose", False)  # absent from older stores
        max_side, quality = data.get("max_side", 0), data.get("quality", 0)  # likewise
        label_kind = data.get("label_kind", "single")  # likewise
        if not (isinstance(source, str) and isinstance(kind, str) and isinstance(classes, list)
                and all(isinstance(name, str) for name in classes) and isinstance(scan, str)
                and isinstance(exif_transpose, bool) and type(max_side) is int and type(quality) is int
                and label_kind in ("single", "multi")):
            return None
        return cls(source, classes, kind, scan, exif_transpose, max_side, quality, label_kind)


@dataclass
class CommittedState:
    """What an interrupted conversion had committed, read back for ``--resume``.

    Attributes:
        settings: the settings of the interrupted conversion.
        stats: running totals up to the last commit.
        sources: source path of each committed record, in index order.
        labels: label of each committed record, in index order.
    """

    settings: ConversionSettings
    stats: Stats
    sources: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)


@dataclass
class AppendState:
    """A complete store read back for ``--append``.

    Attributes:
        manifest: its manifest, which stays in place until the append finishes.
        table: its label table (:meth:`StoreReader.labels`'s array).
        sources: the source path of every record, in index order, including
            those an interrupted append committed after the manifest's length.
        labels: the label of each of those records (a multi-label record's first class).
        interrupted: the progress of an append that was interrupted, if one was.
    """

    manifest: Manifest
    table: np.ndarray
    sources: list[str]
    labels: list[int]
    interrupted: CommittedState | None = None


@dataclass(frozen=True)
class WriterIdentity:
    """The process of a conversion that is writing a store now.

    Attributes:
        pid: its process id, on ``host``.
        host: the host name it runs on.
    """

    pid: int
    host: str

    def describe(self) -> str:
        host = " ".join(self.host.split())[:200] or "an unknown host"  # stored text: keep it one line
        return f"pid {self.pid} on {host}"


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
        """How the CLI names this store after ``datakit convert SRC``: its location, plus
        any option a backend needs (``--collection``)."""
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


class StoreReader(ABC):
    """Read access to one complete store, owned by a single process."""

    spec: StoreSpec

    @property
    @abstractmethod
    def manifest(self) -> Manifest:
        """The store's manifest, loaded when the reader opened."""

    @abstractmethod
    def labels(self) -> np.ndarray:
        """Every record's label, in index order: a 1-D int64 array, or a 2-D uint8 multi-hot
        array in a multi-label store (:func:`parse_label_table`)."""

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


class StoreWriter(ABC):
    """Write access for one conversion.

    The pipeline (:mod:`datakit.conversion`) first looks at the location: when
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
    """

    spec: StoreSpec

    @abstractmethod
    def lock(self) -> None:
        """Claim the location for this conversion until :meth:`close`.

        The claim must end with the process that holds it (a lock the kernel
        drops, or a lease that expires), so a killed conversion never blocks
        its ``--resume`` for good.

        Raises:
            StoreBusyError: another conversion holds the location; the message
                names its pid and host (:func:`busy_message`).
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

    @abstractmethod
    def remove(self) -> None:
        """Delete the store at the location (``--overwrite``).

        Raises:
            DestinationExistsError: the location holds something that is not
                a datakit store; it is left untouched.
        """

    @abstractmethod
    def create(self, settings: ConversionSettings) -> None:
        """Start a new, empty, incomplete store."""

    @abstractmethod
    def committed_state(self) -> CommittedState:
        """Reopen an incomplete store and read back what it committed.

        Raises:
            StoreError: the location is not an incomplete datakit store.
        """

    @abstractmethod
    def commit(self, records: Sequence[PendingRecord], stats: Stats) -> None:
        """Add ``records`` and record ``stats`` as the running totals, in one atomic step."""

    @abstractmethod
    def append_state(self) -> AppendState:
        """Read back a complete store that ``--append`` grows (after :meth:`lock`).

        Raises:
            StoreError: the location holds no complete store, or its records
                disagree with its manifest or its append progress.
        """

    @abstractmethod
    def begin_append(self, settings: ConversionSettings) -> None:
        """Commit the records that follow into a complete store under ``settings``.

        The manifest stays as it is, so readers keep seeing the store as it
        was; each :meth:`commit` writes the append's progress next to it, and
        :meth:`finish` replaces the label table and the manifest, readers
        opened before keeping their view (a longer label table is read up
        to their manifest's length).
        """

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


def check_range(start: int, stop: int, length: int) -> None:
    """Refuse a record range outside ``0 .. length`` (for :meth:`StoreReader.source_path_range`).

    Raises:
        IndexError: it is.
    """
    if not 0 <= start <= stop <= length:
        raise IndexError(f"records {start}..{stop} are out of range for a store of {length} records")


def missing_source_message(where: str, key: str) -> str:
    """The error message for a record whose source path is not in the store."""
    return f"{where}: the source path of record {key!r} is missing; reconvert with --overwrite"


def stats_fit(stats: Stats, settings: ConversionSettings) -> bool:
    """Whether running totals read back from a store can be resumed (one count per class,
    counts adding up to the length, each size range empty or ``[min, max]``)."""
    ranges_ok = all(len(bounds) == (2 if stats.length else 0) and bounds == sorted(bounds)
                    for bounds in (stats.width_range, stats.height_range))
    counts = stats.class_counts
    if settings.label_kind == "multi":  # each record counts once per class it carries
        adds_up = all(count <= stats.length for count in counts) and sum(counts) >= stats.length
    else:
        adds_up = sum(counts) == stats.length
    return (len(counts) == len(settings.classes) and stats.length >= 0
            and all(count >= 0 for count in counts) and adds_up and ranges_ok)


def label_table_bytes(labels: np.ndarray) -> bytes:
    """A store's label table as stored: int32 little-endian class indices for a 1-D
    ``labels``, or the rows of a 2-D multi-hot ``labels`` as uint8 bytes."""
    array = np.asarray(labels)
    return array.astype(np.uint8 if array.ndim == 2 else "<i4").tobytes()


def label_table_size(manifest: Manifest) -> int:
    """The bytes of the label table of a store with ``manifest``."""
    return manifest.length * (len(manifest.classes) if manifest.multi_label else 4)


def parse_label_table(raw: bytes | None, manifest: Manifest, where: str) -> np.ndarray:
    """The label table read back: a 1-D int64 array of class indices, or for a multi-label
    store a ``(length, len(classes))`` uint8 array of 0 and 1.

    Raises:
        StoreError: the table is missing, has the wrong size, or holds values
            outside the classes.
    """
    classes = len(manifest.classes)
    if manifest.multi_label:
        if raw is None or len(raw) != manifest.length * classes:
            raise StoreError(f"{where}: the label table does not match the manifest")
        table = np.frombuffer(raw, dtype=np.uint8).reshape(manifest.length, classes)
        if table.size and table.max() > 1:
            raise StoreError(f"{where}: the multi-label table holds values other than 0 and 1")
        copied: np.ndarray = table.copy()
        return copied  # writable, as torch wants when it wraps a row
    if raw is None or len(raw) % 4 or len(raw) // 4 != manifest.length:
        raise StoreError(f"{where}: the label table does not match the manifest")
    labels = np.frombuffer(raw, dtype="<i4")
    if len(labels) and (labels.min() < 0 or labels.max() >= classes):
        raise StoreError(f"{where}: the label table holds labels outside the classes")
    return labels.astype(np.int64)


def incomplete_message(spec: StoreSpec, source: object, writer: WriterIdentity | None = None) -> str:
    """The error message for a store without a manifest.

    Args:
        spec: the store.
        source: the source folder its progress names; anything but text
            (missing, or a damaged progress record) is shown as ``SRC``.
        writer: the conversion writing the store now, if one is: the store is
            then being written, not interrupted, and ``--resume`` is no advice.
    """
    if writer is not None:
        return (f"{spec.describe()} is being written by a conversion that is still running "
                f"({writer.describe()}); wait for it to finish")
    return (
        f"{spec.describe()} is an incomplete store (its conversion was interrupted); "
        f"finish it with `datakit convert {source if isinstance(source, str) else 'SRC'} "
        f"{spec.command_arguments()} --resume`"
    )


def busy_message(spec: StoreSpec, writer: WriterIdentity, detail: str = "") -> str:
    """The error message that refuses a second writer."""
    return (f"a conversion into {spec.describe()} is running ({writer.describe()}); wait for it to "
            f"finish or stop that process{detail}")


def check_option_names(options: Mapping[str, object], accepted: Collection[str]) -> None:
    """Refuse an option a backend does not know, as a call with an unknown keyword would.

    Raises:
        TypeError: an option's name is not in ``accepted``.
    """
    for name in options:
        if name not in accepted:
            raise TypeError(f"unknown store option {name!r}; the options are "
                            + ", ".join(repr(known) for known in sorted(accepted)))
