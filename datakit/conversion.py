"""The conversion pipeline: an image folder in, a complete store out.

The pipeline is a chain of small stages::

    scan_folder ─► drop what a resumed store already holds (ImageFolder's files and order)
                ─► read_images   (reader processes read, verify and encode records: reading.py)
                ─► number        (assigns consecutive indices, collects skipped files)
                ─► commit        (batches go to the backend's writer, atomically)
                ─► finish        (labels + manifest, the store becomes complete)

A bad file, or a folder that cannot be read, is skipped and reported by
name, never fatal; the names are kept in the manifest. Every commit is
atomic and carries the running totals, so a conversion killed at any moment
leaves a store that readers refuse as incomplete and that ``resume=True``
completes with every image exactly once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from datakit.appending import AppendPlan, appended_manifest, plan_append
from datakit.downscale import DEFAULT_QUALITY
from datakit.errors import ConversionError, DestinationExistsError, InvalidLocationError
from datakit.images import DEFAULT_MAX_PIXELS
from datakit.labelfile import LabelledFolder, label_scan_rules, labelled_folder, read_label_file
from datakit.manifest import KEPT_SKIPPED_FILES, Manifest, Stats
from datakit.reading import ReadOptions, ReadOutcome, read_images
from datakit.records import MULTI_LABEL_VERSION, SINGLE_LABEL_VERSION, PayloadKind
from datakit.source import SourceFolder, legacy_order_matches, scan_folder, scan_rules
from datakit.stores import given_options, is_mongodb_uri, resolve_store
from datakit.stores.base import (
    AppendState,
    CommittedState,
    ConversionSettings,
    PendingRecord,
    StoreSpec,
    StoreWriter,
)

__all__ = ["convert", "resolve_destination", "check_outside_source", "ConversionReport", "SkippedFile",
           "ProgressCallback"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each source file is handled."""

# A commit waits for the disk (a sync), so commits are cut by whichever comes first:
# a count, a size, or a time; a crash loses at most that much work. The size is
# small because records wait in memory for their commit: memory a small commit
# frees is reused by the next batch, while a large batch is faulted in fresh
# (measured with 3,000 JPEGs: 2 readers went from 1.27x to 1.6x one reader,
# --no-verify from 13,000 to 14,900 images/s, cutting at 8 instead of 64 MiB).
_COMMIT_RECORDS = 8192
_COMMIT_BYTES = 8 << 20
_COMMIT_SECONDS = 2.0
_LABELS_RULES = "labels "  # how label_scan_rules() names a label file's order


@dataclass(frozen=True)
class SkippedFile:
    """A source file that was not stored, and why."""

    path: str
    reason: str


@dataclass
class ConversionReport:
    """What a conversion did.

    Attributes:
        source: the image folder.
        destination: the store.
        written: records written by this run.
        total: records in the store when the run ended.
        resumed_from: records the store already held when the run started.
        skipped: files that could not be stored, each with its reason.
        ignored: files that are not images by extension, or outside any class folder.
        empty_classes: class folders without any image.
        bytes_written: payload bytes written by this run.
        seconds: wall time of the run.
        complete: whether the store ended complete (it does unless interrupted).
        already_complete: ``resume`` found the store complete and did nothing.
        exif_oriented: images written by this run whose EXIF orientation is
            not 1: stored as in the file, or upright with ``exif_transpose``.
        high_bit_depth: images written by this run with 16-bit or float
            pixels, which decoding scales to 8 bits.
        exif_transpose: whether images were stored upright.
        downscaled: images written by this run stored resized under ``max_side``.
        max_side: the ``max_side`` of the conversion, or 0.
        label_file: the label file the labels came from, or ``""``.
        unlisted: images under the source folder that the label file does not
            name (not converted).
        appended_to: with ``append``, the records the store held before the
            append began (``None`` for a conversion).
    """

    source: str
    destination: str
    written: int = 0
    total: int = 0
    resumed_from: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    empty_classes: list[str] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0
    complete: bool = False
    already_complete: bool = False
    exif_oriented: int = 0
    high_bit_depth: int = 0
    exif_transpose: bool = False
    downscaled: int = 0
    max_side: int = 0
    label_file: str = ""
    unlisted: list[str] = field(default_factory=list)
    appended_to: int | None = None

    @property
    def images_per_second(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["images_per_second"] = round(self.images_per_second, 1)
        return data


def convert(
    src: str | os.PathLike[str],
    dest: StoreSpec | str | os.PathLike[str],
    *,
    collection: str | None = None,
    database: str | None = None,
    workers: int | None = None,
    verify: bool = True,
    format: Literal["encoded", "raw"] = "encoded",
    resume: bool = False,
    overwrite: bool = False,
    strict: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    extensions: Sequence[str] = (),
    exif_transpose: bool = False,
    max_side: int | None = None,
    quality: int = DEFAULT_QUALITY,
    labels: str | os.PathLike[str] | None = None,
    append: bool = False,
    progress: ProgressCallback | None = None,
    commit_every: int = _COMMIT_RECORDS,
) -> ConversionReport:
    """Pack the image folder ``src`` into the store ``dest``.

    The images are ``ImageFolder``'s, in its order (see :mod:`datakit.source`),
    so index ``i`` of the store is sample ``i`` of
    ``torchvision.datasets.ImageFolder(src)``, minus the files skipped as broken.

    Args:
        src: a folder laid out as ``src/<class>/**/<image>`` (``~`` is expanded).
        dest: a filesystem path (LMDB) outside ``src``, a ``mongodb://`` URI, or
            a store spec (see :func:`resolve_destination`; ``collection`` and
            ``database`` then do not apply).
        collection: the MongoDB collection (default: the name of ``src``).
        database: the MongoDB database, when the URI names none.
        workers: reader processes; 1 reads in-process. By default the CPU
            count when images are decoded (``verify`` or ``format="raw"``),
            else 1: reading a file and its header is cheaper than sending
            its bytes between processes.
        verify: decode every image fully, not only its header (JPEGs cut short are skipped either way).
        format: ``"encoded"`` keeps each file's bytes untouched; ``"raw"``
            stores decoded RGB pixels, which cost more space and no decoding.
        resume: continue an interrupted conversion of ``src`` into ``dest``
            (starts a new one when ``dest`` does not exist).
        overwrite: replace a store already at ``dest``.
        strict: raise :class:`ConversionError` after finishing when any file
            was skipped.
        max_pixels: skip images with more pixels than this (Pillow's limit
            against decompression bombs by default).
        extensions: file extensions to take besides ``ImageFolder``'s
            (``[".gif"]``); matched case-insensitively.
        exif_transpose: store images with an EXIF orientation upright (raw
            pixels turned; encoded files re-encoded in their format, JPEG at
            quality 95), as ``PIL.ImageOps.exif_transpose`` turns them. By
            default files are stored as they are, as ``ImageFolder`` loads
            them; either way the report counts them.
        max_side: store images whose longer side exceeds this resized to it
            (JPEGs re-encoded at ``quality``, other formats as PNG); smaller
            images stay byte for byte (:mod:`datakit.downscale`).
        quality: JPEG quality of the downscaled JPEGs, 1 to 100.
        labels: a label file (CSV with the header ``path,label``, or JSON
            Lines of ``{"path": ..., "label": ...}``) naming the images to
            convert, relative to ``src``, and their classes; the classes are
            its labels, sorted, and the records come in its order. Images
            under ``src`` it does not name are not converted, and counted
            (:mod:`datakit.labelfile`).
        append: add to the complete store ``dest`` the images it does not hold
            yet (by relative path), after its records, which never change; new
            classes go at the end of ``classes``. The store keeps its own
            ``format``, ``exif_transpose``, ``max_side`` and ``quality``.
            Crash-safe: ``append`` (or ``resume``) again finishes an
            interrupted append (:mod:`datakit.appending`). Without a store at
            ``dest`` it converts one.
        progress: called as ``progress(done, total)`` while converting.
        commit_every: records per commit (commits are also cut at 8 MiB and
            every 2 seconds). Smaller commits lose less work to a crash and
            cost more syncs.

    Returns:
        A :class:`ConversionReport`.

    Raises:
        SourceError: ``src`` is missing or holds no image.
        LabelFileError: the label file is unreadable or malformed (the message
            names its line).
        InvalidLocationError: ``dest`` is inside ``src``, or a URI of a scheme
            datakit does not support.
        DestinationExistsError: ``dest`` exists and neither ``resume`` nor
            ``overwrite`` was given.
        ConversionError: with ``strict``, when files or folders were skipped;
            or when a resumed store was converted with other settings.
    """
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: choose one")
    if append and overwrite:
        raise ValueError("append and overwrite exclude each other: choose one")
    if format not in ("encoded", "raw"):
        raise ValueError(f"format must be 'encoded' or 'raw', not {format!r}")
    if commit_every < 1:
        raise ValueError(f"commit_every must be at least 1, not {commit_every}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be at least 1, not {max_pixels}")
    if max_side is not None and max_side < 1:
        raise ValueError(f"max_side must be at least 1, not {max_side}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be between 1 and 100, not {quality}")
    started = time.perf_counter()
    root = os.path.abspath(os.path.expanduser(os.fspath(src)))
    spec = resolve_destination(root, dest, given_options(collection=collection, database=database))
    check_outside_source(root, spec)
    folder: SourceFolder
    if labels is not None:
        label_file = read_label_file(labels)
        folder = labelled_folder(root, label_file, tuple(extensions))
        rules = label_scan_rules(label_file)
    else:
        folder = scan_folder(root, extensions)
        rules = scan_rules(folder.extensions)
    kind = PayloadKind.RAW if format == "raw" else PayloadKind.ENCODED
    multi = isinstance(folder, LabelledFolder) and folder.multi_label
    settings = ConversionSettings(folder.root, folder.classes, kind.label, rules,
                                  exif_transpose, max_side or 0, quality if max_side else 0,
                                  "multi" if multi else "single")
    report = ConversionReport(folder.root, spec.describe(), ignored=folder.ignored,
                              empty_classes=folder.empty_classes(), exif_transpose=exif_transpose,
                              max_side=max_side or 0)
    if isinstance(folder, LabelledFolder):
        report.label_file, report.unlisted = folder.label_file, folder.unlisted
    report.skipped.extend(SkippedFile(item.path, f"folder not readable ({item.reason})")
                          for item in folder.unreadable)

    with spec.open_writer() as writer:
        prepared = _prepare_destination(writer, settings, folder, resume=resume, overwrite=overwrite,
                                        append=append)
        if prepared is None:  # resumed a store that is already complete
            report.complete = report.already_complete = True
            report.seconds = time.perf_counter() - started
            return report
        plan: AppendPlan | None = None
        entries = folder.entries
        if isinstance(prepared, AppendState):
            plan = plan_append(prepared, folder, rules, multi, spec.describe())
            writer.begin_append(plan.settings)
            state, entries, settings = plan.state, plan.entries, plan.settings
            kind = PayloadKind.RAW if settings.payload_kind == PayloadKind.RAW.label else PayloadKind.ENCODED
            exif_transpose, max_side = settings.exif_transpose, settings.max_side or None
            quality = settings.quality
            multi = settings.label_kind == "multi"
            report.appended_to = plan.before.length
        else:
            state = prepared
        done = set(state.sources)
        pending = [entry for entry in entries if entry.path not in done]
        report.resumed_from = state.stats.length
        if plan is not None and not pending and state.stats.length == plan.before.length:
            report.total, report.complete = state.stats.length, True  # nothing new: the store is left alone
            report.seconds = time.perf_counter() - started
            return report
        read_options = ReadOptions(folder.root, kind, verify, max_pixels, exif_transpose, max_side,
                                    quality or DEFAULT_QUALITY, multi)
        decodes = verify or kind is PayloadKind.RAW
        outcomes = read_images(pending, read_options, workers or ((os.cpu_count() or 1) if decodes else 1))
        if progress is not None:
            outcomes = _reporting(outcomes, progress, len(pending))
        if plan is not None:
            stored_labels: list[Any] = plan.labels
        else:
            stored_labels = _multi_labels(folder, state.sources) if multi else list(state.labels)
        records = _number(outcomes, state.stats, stored_labels, report)
        # `records` updates `state.stats` as it yields, so at each commit the
        # totals describe exactly the records committed so far.
        for batch in _batches(records, commit_every):
            writer.commit(batch, state.stats)
        listed = _skipped_files(report)
        if plan is not None:
            writer.finish(appended_manifest(plan, listed, report.label_file),
                          _label_table(stored_labels, len(settings.classes), multi))
            report.total, report.complete = state.stats.length, True
            report.seconds = time.perf_counter() - started
            return _checked(report, strict)
        manifest = Manifest(classes=folder.classes, payload_kind=kind.label, stats=state.stats,
                            skipped=len(report.skipped), source=folder.root,
                            skipped_files=listed[:KEPT_SKIPPED_FILES],
                            skipped_files_omitted=max(0, len(listed) - KEPT_SKIPPED_FILES),
                            exif_transpose=exif_transpose, max_side=settings.max_side,
                            quality=settings.quality, label_file=report.label_file,
                            unlisted=len(report.unlisted), label_kind=settings.label_kind,
                            format_version=MULTI_LABEL_VERSION if multi else SINGLE_LABEL_VERSION)
        writer.finish(manifest, _label_table(stored_labels, len(folder.classes), multi))
    report.total = state.stats.length
    report.complete = True
    report.seconds = time.perf_counter() - started
    return _checked(report, strict)


def _checked(report: ConversionReport, strict: bool) -> ConversionReport:
    if strict and report.skipped:
        raise ConversionError(
            f"{len(report.skipped)} file(s) or folder(s) were skipped (the store is complete without them): "
            + "; ".join(f"{item.path}: {item.reason}" for item in report.skipped[:5])
        )
    return report


def resolve_destination(src: str | os.PathLike[str], dest: StoreSpec | str | os.PathLike[str],
                        backend_options: Mapping[str, str]) -> StoreSpec:
    """The store a conversion of the folder ``src`` writes into.

    That is :func:`~datakit.stores.resolve_store` of ``dest`` with
    ``backend_options``, except that a MongoDB collection defaults to the
    name of ``src``. The CLI resolves its destination here, so that it hands
    :func:`convert` one spec rather than each option by name.
    """
    if isinstance(dest, StoreSpec):
        return dest
    location = str(dest)
    if is_mongodb_uri(location) and backend_options.get("collection") is None:
        name = os.path.basename(os.path.abspath(os.path.expanduser(os.fspath(src))).rstrip(os.sep))
        backend_options = {**backend_options, "collection": name}
    return resolve_store(location, backend_options)


def check_outside_source(root: str, spec: StoreSpec) -> None:
    """Refuse a destination in the folder being converted (symlinks resolved).

    A store there would be scanned as a class by the next conversion of that
    folder, shifting the label of every class after it, and an interrupted
    conversion there could not be resumed (its own files would change the scan).

    Raises:
        InvalidLocationError: the store's folder is ``root`` or lies inside it.
    """
    local = spec.local_path()
    if local is None:
        return
    source = os.path.realpath(root)
    if os.path.commonpath([source, os.path.realpath(local)]) == source:
        raise InvalidLocationError(
            f"the destination {local} is inside the folder being converted, {root}: the next "
            f"conversion would take it for a class and shift the labels; choose a destination "
            f"outside {root} (a store already there can be moved out with mv and resumed)"
        )


def _multi_labels(folder: SourceFolder, sources: Sequence[str]) -> list[Any]:
    """The classes of each record a resumed multi-label conversion holds, from its label file
    (the same file, as the progress's SHA-256 made sure: stores keep only a first class per record)."""
    by_path = {entry.path: entry.classes for entry in folder.entries}
    return [by_path[path] for path in sources]


def _label_table(labels: Sequence[Any], classes: int, multi: bool) -> np.ndarray:
    """The label table: class indices, or a ``(records, classes)`` multi-hot uint8 array."""
    if not multi:
        return np.asarray(labels, dtype=np.int64)
    table = np.zeros((len(labels), classes), dtype=np.uint8)
    for row, indices in enumerate(labels):
        table[row, list(indices)] = 1
    return table


def _skipped_files(report: ConversionReport) -> list[list[str]]:
    """``[path, reason]`` of every skipped file and folder, then of every ignored file."""
    listed = [[item.path, item.reason] for item in report.skipped]
    listed.extend([path, "ignored: not an image by extension" if "/" in path
                   else "ignored: outside any class folder"] for path in report.ignored)
    listed.extend([path, "ignored: not named in the label file"] for path in report.unlisted)
    return listed


def _prepare_destination(writer: StoreWriter, settings: ConversionSettings, folder: SourceFolder, *,
                         resume: bool, overwrite: bool, append: bool) -> CommittedState | AppendState | None:
    """Create, replace or reopen the destination; ``None`` when nothing is left to do, the
    store read back when an append grows it (``append``, or ``resume`` of an interrupted append)."""
    writer.lock()  # before looking: another conversion may be writing it
    if writer.exists():
        if overwrite:
            writer.remove()
        elif append:
            return writer.append_state()
        elif resume:
            if writer.is_complete():
                appended = writer.append_state()
                return appended if appended.interrupted is not None else None
            state = writer.committed_state()
            _check_resumable(state, settings, writer.spec.describe(), folder)
            return state
        else:
            raise DestinationExistsError(_exists_message(writer))
    writer.create(settings)
    return CommittedState(settings, Stats(class_counts=[0] * len(settings.classes)))


def _exists_message(writer: StoreWriter) -> str:
    where = writer.spec.describe()
    if writer.is_complete():
        return f"{where} already holds a store; pass --overwrite to replace it"
    if writer.is_store():
        return (f"{where} holds an interrupted conversion; pass --resume to finish it, "
                "or --overwrite to start again")
    return f"{where} already exists and is not a datakit store; choose another destination"


def _downscaling(settings: ConversionSettings) -> str:
    if not settings.max_side:
        return "no --max-side"
    return f"--max-side {settings.max_side} --quality {settings.quality}"


def _check_resumable(state: CommittedState, wanted: ConversionSettings, where: str,
                     folder: SourceFolder) -> None:
    stored = state.settings
    if stored.payload_kind != wanted.payload_kind:
        raise ConversionError(
            f"{where} was started with --format {stored.payload_kind}; resume with the same "
            "format, or start again with --overwrite"
        )
    if stored.exif_transpose != wanted.exif_transpose:
        raise ConversionError(
            f"{where} was started {'with' if stored.exif_transpose else 'without'} --exif-transpose; "
            "resume with the same option, or start again with --overwrite"
        )
    if (stored.max_side, stored.quality) != (wanted.max_side, wanted.quality):
        raise ConversionError(
            f"{where} was started with {_downscaling(stored)}, this conversion asks for "
            f"{_downscaling(wanted)}; resume with the same options, or start again with --overwrite"
        )
    labelled = (stored.scan.startswith(_LABELS_RULES), wanted.scan.startswith(_LABELS_RULES))
    if any(labelled) and stored.scan != wanted.scan:
        if not labelled[0]:
            advice = "was started without --labels; resume without it"
        elif not labelled[1]:
            advice = "was started with --labels FILE; resume with the same file, unchanged"
        else:
            advice = ("was started with another label file, or this one changed since; resume with the "
                      "same --labels file, unchanged")
        raise ConversionError(f"{where} {advice}, or start again with --overwrite")
    if stored.classes != wanted.classes:
        raise ConversionError(
            f"{where} was started from a folder with classes {stored.classes}, but "
            f"{wanted.source} has {wanted.classes}; resume from the same folder, "
            "or start again with --overwrite"
        )
    if stored.scan == wanted.scan or not state.sources:  # nothing stored yet: no order to keep
        return
    if not stored.scan:
        if legacy_order_matches(folder):  # an older datakit, which ordered these files the same way
            return
        raise ConversionError(
            f"{where} was started by an earlier datakit, which took .gif files and ordered the "
            f"images of nested folders differently from ImageFolder; resuming would mix the two "
            f"orders. Start again with --overwrite (or finish it with the datakit that started it)"
        )
    raise ConversionError(
        f"{where} was started with the files chosen and ordered by {stored.scan!r}, this "
        f"conversion's are {wanted.scan!r} ('+.gif' means --extensions .gif); resume with the "
        "same --extensions, or start again with --overwrite"
    )


def _reporting(outcomes: Iterable[ReadOutcome], progress: ProgressCallback,
               total: int) -> Iterator[ReadOutcome]:
    progress(0, total)
    for done, outcome in enumerate(outcomes, 1):
        yield outcome
        progress(done, total)


def _number(outcomes: Iterable[ReadOutcome], stats: Stats, labels: list[Any],
            report: ConversionReport) -> Iterator[PendingRecord]:
    """Give each good image the next index; collect the bad ones in the report."""
    for outcome in outcomes:
        entry = outcome.entry
        if outcome.record is None:
            report.skipped.append(SkippedFile(entry.path, outcome.error))
            continue
        index = stats.length
        oriented = outcome.orientation != 1
        stats.add(entry.classes or entry.label, outcome.payload_bytes, outcome.image_format, outcome.width,
                  outcome.height, oriented=oriented, high_bit_depth=outcome.high_bit_depth,
                  downscaled=outcome.downscaled)
        labels.append(entry.classes or entry.label)
        report.exif_oriented += oriented
        report.high_bit_depth += outcome.high_bit_depth
        report.downscaled += outcome.downscaled
        report.written += 1
        report.bytes_written += outcome.payload_bytes
        yield PendingRecord(index, entry.path, entry.label, outcome.record)


def _batches(records: Iterable[PendingRecord], limit: int) -> Iterator[list[PendingRecord]]:
    """Group records into commits of bounded count, size and age."""
    batch: list[PendingRecord] = []
    size = 0
    started = 0.0
    for record in records:
        if not batch:
            started = time.monotonic()
        batch.append(record)
        size += len(record.data)
        if len(batch) >= limit or size >= _COMMIT_BYTES or time.monotonic() - started >= _COMMIT_SECONDS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
