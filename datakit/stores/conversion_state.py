"""What a conversion hands a store and reads back from one: the conversion-state types.

The pipeline gives a writer :class:`PendingRecord` batches under
:class:`ConversionSettings`; ``--resume`` reads a :class:`CommittedState` back,
``--append`` an :class:`AppendState`; a running writer is named by its
:class:`WriterIdentity`; a writer reading a store back first finds its
:class:`StoredMeta`. Both backends store the same progress entry (the
settings and the running :class:`~datakit.format.manifest.Stats`), which
:func:`parse_progress` reads back and checks once for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datakit.errors import StoreError, option
from datakit.format.fields.base import FieldError
from datakit.format.fields.schema import Schema
from datakit.format.manifest import LABEL_KINDS, NO_LABEL, Manifest
from datakit.format.stats import Stats, check_stats

__all__ = [
    "PendingRecord",
    "ConversionSettings",
    "CommittedState",
    "AppendState",
    "UnfinishedAppend",
    "WriterIdentity",
    "StoredMeta",
    "stats_fit",
    "stored_labels",
    "parse_progress",
    "progress_source",
    "unfinished_append",
]


@dataclass(frozen=True)
class PendingRecord:
    """One record ready to be committed.

    Attributes:
        index: the sample index; the record's key is ``record_key(index)``.
        source: the image's path relative to the source folder (kept for
            inspection and for resuming, never loaded per sample).
        label: the class index.
        data: the encoded record (see :mod:`datakit.format.records`).
        document: the record's numbers, text and JSON by field name, which a
            MongoDB document keeps beside the record so they can be queried
            (the record stays the truth); None for a classification store.
    """

    index: int
    source: str
    label: int
    data: bytes | bytearray
    document: dict[str, Any] | None = None


@dataclass(frozen=True)
class ConversionSettings:
    """What a resumed conversion must agree on with the one it continues.

    Attributes:
        source: the image folder.
        classes: its class names.
        payload_kind: ``"encoded"`` or ``"raw"``.
        scan: the rules that ordered the source files (:func:`datakit.conversion.sources.folder.scan_rules`);
            empty for a conversion started before they were recorded.
        exif_transpose: whether images with an EXIF orientation are stored upright.
        max_side: the ``--max-side`` images are downscaled under (0: none).
        quality: the JPEG quality they are re-encoded at (0 without ``max_side``).
        label_kind: ``"single"``, ``"multi"`` (a multi-label ``--labels`` file) or
            ``"none"`` (an unlabelled source: no classes, every label -1).
        schema: the samples' fields (the manifest's ``schema``); empty for a
            classification store.
        boxes: what ``--boxes`` does with boxes outside their image or of no size.
    """

    source: str
    classes: list[str]
    payload_kind: str
    scan: str = ""
    exif_transpose: bool = False
    max_side: int = 0
    quality: int = 0
    label_kind: str = "single"
    schema: list[dict[str, Any]] = field(default_factory=list)
    boxes: str = "keep"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "classes": list(self.classes), "payload_kind": self.payload_kind,
                "scan": self.scan, "exif_transpose": self.exif_transpose, "max_side": self.max_side,
                "quality": self.quality, "label_kind": self.label_kind, "schema": self.schema,
                "boxes": self.boxes}

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
        schema, boxes = data.get("schema", []), data.get("boxes", "keep")  # likewise
        if not (isinstance(source, str) and isinstance(kind, str) and isinstance(classes, list)
                and all(isinstance(name, str) for name in classes) and isinstance(scan, str)
                and isinstance(exif_transpose, bool) and type(max_side) is int and type(quality) is int
                and label_kind in LABEL_KINDS and isinstance(boxes, str)
                and (schema == [] or _parses(schema))):
            return None
        return cls(source, classes, kind, scan, exif_transpose, max_side, quality, label_kind, schema, boxes)


def _parses(schema: Any) -> bool:
    try:
        Schema.from_json(schema)
    except FieldError:
        return False
    return True


@dataclass
class CommittedState:
    """What an interrupted conversion had committed, read back for ``--resume``.

    Attributes:
        settings: the settings of the interrupted conversion.
        stats: running totals up to the last commit.
        sources: source path of each committed record, in index order.
        labels: label of each committed record, in index order.
        new: the store was created by this run (nothing was at the destination,
            or ``overwrite`` replaced what was).
    """

    settings: ConversionSettings
    stats: Stats
    sources: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    new: bool = False


@dataclass
class AppendState:
    """A complete store read back for ``--append``.

    Attributes:
        manifest: its manifest, which stays in place until the append finishes.
        table: its label table (:meth:`~datakit.stores.contract.StoreReader.labels`'s array).
        sources: the source path of every record, in index order, including
            those an interrupted append committed after the manifest's length.
        labels: the label of each of those records (a multi-label record's first class).
        interrupted: the progress of an append that was interrupted, if one was.
        discarded: an unfinished append this run rolled back before reading
            the store (``discard_unfinished``), if it did.
    """

    manifest: Manifest
    table: np.ndarray
    sources: list[str]
    labels: list[int]
    interrupted: CommittedState | None = None
    discarded: UnfinishedAppend | None = None


@dataclass(frozen=True)
class UnfinishedAppend:
    """An append that committed records after a complete store's manifest and did not finish.

    Readers see the store as the manifest has it; the append is finished from
    its own source (``--append`` or ``--resume`` again) or discarded
    (``--append --discard-unfinished``), never continued from another source.

    Attributes:
        source: the folder it appends from; ``None`` when its progress is unreadable.
        written: the records it committed after the manifest's; ``None`` likewise.
        problem: why its progress is unreadable; empty when it is readable.
    """

    source: str | None
    written: int | None
    problem: str = ""


@dataclass(frozen=True)
class StoredMeta:
    """What a writer finds at its location before it reads any record back.

    Attributes:
        manifest: the manifest's JSON, or ``None`` (an incomplete store, or none).
        progress: the conversion progress entry, parsed (a mapping as stored, or
            whatever its JSON held), or ``None`` when there is none.
        not_a_store: when the location holds no datakit store, why, in words
            (``"it has no data.mdb"``); empty otherwise.
    """

    manifest: bytes | None
    progress: object
    not_a_store: str = ""


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


def stats_fit(stats: Stats, settings: ConversionSettings) -> bool:
    """Whether running totals read back from a store can be resumed (one count per class,
    counts adding up to the length, each size range empty or ``[min, max]``)."""
    ranges_ok = all(len(bounds) == (2 if stats.length else 0) and bounds == sorted(bounds)
                    for bounds in (stats.width_range, stats.height_range))
    counts = stats.class_counts
    if settings.label_kind == "none":  # no classes, nothing counted
        adds_up = not settings.classes
    elif settings.label_kind == "multi":  # each record counts once per class it carries
        adds_up = all(count <= stats.length for count in counts) and sum(counts) >= stats.length
    else:
        adds_up = sum(counts) == stats.length
    return (len(counts) == len(settings.classes) and stats.length >= 0
            and all(count >= 0 for count in counts) and adds_up and ranges_ok)


def stored_labels(label_kind: str, classes: int) -> range:
    """The labels a store's records may carry: its class indices, or in an unlabelled store
    (``label_kind`` ``"none"``) :data:`~datakit.format.manifest.NO_LABEL` alone."""
    return range(NO_LABEL, NO_LABEL + 1) if label_kind == "none" else range(classes)


def parse_progress(data: object, where: str, what: str = "conversion progress") -> CommittedState:
    """The settings and running totals of a stored progress entry, checked.

    A progress entry is a mapping of ``settings`` and ``stats``. MongoDB's also
    holds ``committed``, the count of committed samples, which must equal the
    totals' length, and ``removing`` while ``--overwrite`` deletes the store.

    Args:
        data: the entry as parsed (``None``, or anything else that is not such
            a mapping, is unreadable).
        where: the store, as messages name it.
        what: what the entry records, as messages name it (``"append progress"``).

    Raises:
        StoreError: the entry is unreadable, or its totals do not fit its settings.
    """
    settings = ConversionSettings.from_dict(data.get("settings")) if isinstance(data, dict) else None
    if not isinstance(data, dict) or settings is None or data.get("removing") \
            or not _count_or_absent(data, "committed"):
        raise StoreError.advising("{where} has no readable {what}; reconvert with {overwrite}",
                                  where=where, what=what, overwrite=option("overwrite"))
    stats = Stats.from_dict(data.get("stats"), where)
    check_stats(stats, where)  # the totals a resume writes into the manifest
    if data.get("committed", stats.length) != stats.length or not stats_fit(stats, settings):
        raise StoreError.advising("{where}: the {what}'s statistics do not fit its settings; reconvert with "
                                  "{overwrite}", where=where, what=what, overwrite=option("overwrite"))
    return CommittedState(settings, stats)


def progress_source(progress: object) -> object:
    """The source folder a parsed progress entry names, for the message that refuses an
    incomplete store; ``None`` when it names none."""
    settings = progress.get("settings") if isinstance(progress, dict) else None
    return settings.get("source") if isinstance(settings, dict) else None


def unfinished_append(manifest: Manifest, progress: object, where: str) -> UnfinishedAppend | None:
    """The unfinished append a progress entry beside ``manifest`` records (``None``: no entry).

    An unreadable entry is reported with its problem, not raised: the store
    is readable as it was, and the entry can still be discarded.
    """
    if progress is None:
        return None
    try:
        state = parse_progress(progress, where, "append progress")
    except StoreError as exc:
        source = progress_source(progress)
        return UnfinishedAppend(source if isinstance(source, str) else None, None, str(exc))
    return UnfinishedAppend(state.settings.source, max(0, state.stats.length - manifest.length))


def _count_or_absent(data: dict[str, Any], name: str) -> bool:
    value = data.get(name, 0)
    return isinstance(value, int) and not isinstance(value, bool)
