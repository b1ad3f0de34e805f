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
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import numpy as np

from datakit.convert.appending import AppendPlan, appended_manifest, plan_append
from datakit.convert.destination import check_outside_source, prepare_destination, resolve_destination
from datakit.convert.downscale import DEFAULT_QUALITY
from datakit.convert.images import DEFAULT_MAX_PIXELS
from datakit.convert.labelfile import (
    LabelledFolder,
    in_class_order,
    label_scan_rules,
    labelled_folder,
    read_label_file,
)
from datakit.convert.read_stage import ReadOptions, ReadOutcome, read_images, too_many_readers, usable_cpus
from datakit.convert.report import ConversionReport, SkippedFile, checked, listed_skips
from datakit.convert.source import SourceEntry, SourceFolder, scan_folder, scan_rules
from datakit.errors import DatakitWarning
from datakit.manifest import KEPT_SKIPPED_FILES, Manifest, Stats
from datakit.records import MULTI_LABEL_VERSION, SINGLE_LABEL_VERSION, PayloadKind
from datakit.stores import given_options
from datakit.stores.base import AppendState, ConversionSettings, PendingRecord, StoreSpec

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

    The images are ``ImageFolder``'s, in its order (see :mod:`datakit.convert.source`),
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
        verify: decode every image fully, not only its header.
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
            images stay byte for byte (:mod:`datakit.convert.downscale`).
        quality: JPEG quality of the downscaled JPEGs, 1 to 100.
        labels: a label file (CSV with the header ``path,label``, or JSON
            Lines of ``{"path": ..., "label": ...}``) naming the images to
            convert, relative to ``src``, and their classes; the classes are
            its labels, sorted (as numbers when every label is an integer,
            else as text), and the records come in its order. Images
            under ``src`` it does not name are not converted, and counted
            (:mod:`datakit.convert.labelfile`).
        append: add to the complete store ``dest`` the images it does not hold
            yet (by relative path), after its records, which never change; new
            classes go at the end of ``classes``. The store keeps its own
            ``format``, ``exif_transpose``, ``max_side`` and ``quality``, and
            its labels' origin: class folders, or a label file (``labels``).
            Crash-safe: ``append`` (or ``resume``) again finishes an
            interrupted append (:mod:`datakit.convert.appending`).
        progress: called as ``progress(done, total)`` while converting.
        commit_every: records per commit (commits are also cut at 8 MiB and
            every 2 seconds). Smaller commits lose less work to a crash and
            cost more syncs.

    Returns:
        A :class:`ConversionReport`.

    Warns:
        DatakitWarning: a class folder is hidden (``.ipynb_checkpoints``: a
            class, as in ``ImageFolder``), or ``workers`` exceeds the usable
            CPUs. Warnings name the caller's line.

    Raises:
        SourceError: ``src`` is missing or holds no image.
        LabelFileError: the label file is unreadable or malformed (the message
            names its line).
        InvalidLocationError: ``dest`` is inside ``src``, a URI of a scheme
            datakit does not support, or one missing its colon (``mongodb//host``).
        StoreNotFoundError: ``append`` without a store at ``dest``.
        DestinationExistsError: ``dest`` exists and neither ``resume`` nor
            ``overwrite`` was given.
        ConversionError: with ``strict``, when files or folders were skipped;
            when a resumed store was converted with other settings; or when an
            append's labels come from elsewhere than the store's.
    """
    _check_arguments(resume=resume, overwrite=overwrite, append=append, format=format,
                     commit_every=commit_every, workers=workers, max_pixels=max_pixels, max_side=max_side,
                     quality=quality)
    started = time.perf_counter()
    root = os.path.abspath(os.path.expanduser(os.fspath(src)))
    spec = resolve_destination(root, dest, given_options(collection=collection, database=database))
    check_outside_source(root, spec)
    folder, rules = _scan_source(root, labels, extensions)
    _warn_caller([_hidden_class_warning(folder, name) for name in folder.hidden_classes()])
    multi = isinstance(folder, LabelledFolder) and folder.multi_label
    settings = ConversionSettings(folder.root, folder.classes, format, rules, exif_transpose, max_side or 0,
                                  quality if max_side else 0, "multi" if multi else "single")
    report = _new_report(folder, spec.describe(), exif_transpose, max_side or 0)

    with spec.open_writer() as writer:
        prepared = prepare_destination(writer, settings, folder, resume=resume, overwrite=overwrite,
                                       append=append)
        if prepared is None:  # resumed a store that is already complete
            report.complete = report.already_complete = True
            return _finished(report, started)
        plan: AppendPlan | None = None
        if isinstance(prepared, AppendState):
            plan = plan_append(prepared, folder, rules, multi, spec.describe())
            writer.begin_append(plan.settings)
            state, entries, settings = plan.state, plan.entries, plan.settings
            report.appended_to = plan.before.length
        else:  # a new store, or one resumed in the class order it was started in
            state, folder = prepared, in_class_order(folder, prepared.settings.classes)
            entries = folder.entries
        done = set(state.sources)
        pending = [entry for entry in entries if entry.path not in done]
        report.resumed_from = state.stats.length
        if plan is not None and not pending and state.stats.length == plan.before.length:
            report.total, report.complete = state.stats.length, True  # nothing new: the store is left alone
            return _finished(report, started)
        multi = settings.label_kind == "multi"
        _warn_caller([too_many_readers(workers or 1, len(pending))])
        outcomes = _read(pending, folder.root, settings, verify, max_pixels, workers)
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
        listed = listed_skips(report)
        if plan is not None:
            manifest = appended_manifest(plan, listed, report.label_file)
        else:
            manifest = _manifest(folder, settings, state.stats, report, listed)
        writer.finish(manifest, _label_table(stored_labels, len(settings.classes), multi))
    report.total, report.complete = state.stats.length, True
    return checked(_finished(report, started), strict)


def _check_arguments(*, resume: bool, overwrite: bool, append: bool, format: str, commit_every: int,
                     workers: int | None, max_pixels: int, max_side: int | None, quality: int) -> None:
    """Refuse arguments :func:`convert` cannot work with, naming them (``ValueError``)."""
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


def _scan_source(root: str, labels: str | os.PathLike[str] | None,
                 extensions: Sequence[str]) -> tuple[SourceFolder, str]:
    """The source's entries (a folder scanned, or a label file's rows) and their scan rules."""
    if labels is not None:
        label_file = read_label_file(labels)
        return labelled_folder(root, label_file, tuple(extensions)), label_scan_rules(label_file)
    folder = scan_folder(root, extensions)
    return folder, scan_rules(folder.extensions)


def _new_report(folder: SourceFolder, where: str, exif_transpose: bool, max_side: int) -> ConversionReport:
    """The report as the scan leaves it: what was ignored, empty or unreadable."""
    report = ConversionReport(folder.root, where, ignored=folder.ignored,
                              empty_classes=folder.empty_classes(), exif_transpose=exif_transpose,
                              max_side=max_side)
    if isinstance(folder, LabelledFolder):
        report.label_file, report.unlisted = folder.label_file, folder.unlisted
    report.skipped.extend(SkippedFile(item.path, f"folder not readable ({item.reason})")
                          for item in folder.unreadable)
    report.skipped.extend(SkippedFile(loop.path, f"folder not followed (a symlink to "
                                      f"{os.path.normpath(os.path.join(folder.root, loop.target))}, which "
                                      "contains it: ImageFolder would store its images again)")
                          for loop in folder.loops)
    return report


def _read(pending: Sequence[SourceEntry], root: str, settings: ConversionSettings, verify: bool,
          max_pixels: int, workers: int | None) -> Iterator[ReadOutcome]:
    """The reading stage, with the store's own payload, EXIF, size and label settings."""
    kind = PayloadKind.RAW if settings.payload_kind == PayloadKind.RAW.label else PayloadKind.ENCODED
    options = ReadOptions(root, kind, verify, max_pixels, settings.exif_transpose, settings.max_side or None,
                          settings.quality or DEFAULT_QUALITY, settings.label_kind == "multi")
    decodes = verify or kind is PayloadKind.RAW
    return read_images(pending, options, workers or (usable_cpus() if decodes else 1))


def _manifest(folder: SourceFolder, settings: ConversionSettings, stats: Stats, report: ConversionReport,
              listed: list[list[str]]) -> Manifest:
    """The manifest of a finished conversion."""
    multi = settings.label_kind == "multi"
    return Manifest(classes=folder.classes, payload_kind=settings.payload_kind, stats=stats,
                    skipped=len(report.skipped), source=folder.root,
                    skipped_files=listed[:KEPT_SKIPPED_FILES],
                    skipped_files_omitted=max(0, len(listed) - KEPT_SKIPPED_FILES),
                    exif_transpose=settings.exif_transpose, max_side=settings.max_side,
                    quality=settings.quality, label_file=report.label_file,
                    unlisted=len(report.unlisted), label_kind=settings.label_kind,
                    format_version=MULTI_LABEL_VERSION if multi else SINGLE_LABEL_VERSION,
                    class_order=folder.class_order)


def _hidden_class_warning(folder: SourceFolder, name: str) -> str:
    return (f"{folder.root}/{name} is a hidden folder, taken as the class {name!r} as ImageFolder takes it "
            f"(the labels of the classes after it shift by one); if it is not a class (Jupyter's "
            f".ipynb_checkpoints, say), delete it or move it out of {folder.root}")


def _warn_caller(messages: Sequence[str | None]) -> None:
    """Warn about the conversion, naming the line that called :func:`convert` (not a line of datakit's)."""
    for message in messages:
        if message is not None:
            warnings.warn(message, DatakitWarning, stacklevel=3)


def _finished(report: ConversionReport, started: float) -> ConversionReport:
    report.seconds = time.perf_counter() - started
    return report


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
