"""Exporting a store back to files: ``datakit export STORE DIR``.

Every record is written to ``DIR/<its source path>``, the path relative to
the folder it was converted from (for a folder conversion that path starts
with the class folder, so ``DIR`` is an ``ImageFolder`` again). An encoded
record is written as the original bytes, so converting ``DIR`` again gives
a store with the same records, byte for byte; a raw record is written as a
PNG of its pixels, under its path with the extension ``.png``. When the
labels are not the folder names (a store converted with ``--labels``, or a
multi-label one) the labels are written too, as ``DIR/labels.csv`` (one class
per image) or ``DIR/labels.jsonl`` (several), in record order, for
``datakit convert DIR DEST --labels``; an unlabelled store has none to write.
With ``format="webdataset"`` the
records go into tar shards instead (:mod:`datakit.tools.export.webdataset`).

An export never loses a sample: it refuses a ``DIR`` that is not empty,
refuses, before writing anything, source paths that would escape ``DIR``,
hold a NUL, or collide (two records at one file, one record's file where
another's folder goes, as ``a`` and ``a/b.jpg``, case folded as a
case-insensitive file system does, or a record where the label file goes), checks every
record's checksum as it reads it (a bad record stops the export, naming its
key), and counts what it wrote. An export killed at any moment leaves ``DIR``
marked unfinished, with whole files only; a plain export refuses it and
``resume=True`` (``datakit export STORE DIR --resume``) finishes it, checking
the files already there against their records (:mod:`datakit.tools.export.folder`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from datakit.errors import ExportError, StoreError
from datakit.format.manifest import Manifest
from datakit.format.records import PayloadKind, decode_record, record_key
from datakit.stores import given_options, resolve_store
from datakit.stores.contract import StoreReader, StoreSpec
from datakit.tools.export import folder as export_folder
from datakit.tools.export import webdataset as export_webdataset

__all__ = ["ExportReport", "export"]

_WINDOW = 1024


@dataclass
class ExportReport:
    """What an export wrote.

    Attributes:
        store: the store, as messages name it.
        directory: the folder written, absolute.
        written: image files this run wrote (one per record, less ``kept``).
        kept: with ``resume``, image files found already whole (compared with
            their records byte for byte) and left as they were.
        rewritten: with ``resume``, files of ``written`` that were there but
            short or different (an interrupted write).
        total_bytes: the bytes of every image file of the export, kept ones
            included.
        label_file: the label file written beside them, or ``""`` when the
            class folders carry the labels.
        resumed: the run finished an unfinished export.
        seconds: wall time.
        format: ``"folder"`` (image files) or ``"webdataset"`` (tar shards).
        shards: the tar shards of a WebDataset export (0 for a folder).
    """

    store: str
    directory: str
    written: int = 0
    kept: int = 0
    rewritten: int = 0
    total_bytes: int = 0
    label_file: str = ""
    resumed: bool = False
    seconds: float = 0.0
    format: str = "folder"
    shards: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def export(store: StoreSpec | str | os.PathLike[str], directory: str | os.PathLike[str], *,
           collection: str | None = None, database: str | None = None, resume: bool = False,
           progress: Callable[[int, int], None] | None = None,
           format: Literal["folder", "webdataset"] = "folder") -> ExportReport:
    """Write every record of ``store`` back to files under ``directory`` (or into tar shards there).

    Args:
        store: a path (LMDB), a ``mongodb://`` URI, or a store spec.
        directory: an empty or missing folder; with ``resume``, the folder of
            an unfinished export of this store (an empty or missing one
            starts afresh).
        collection, database: MongoDB only.
        resume: finish an export that was interrupted: files already there
            are compared with their records, and a short or different one
            is written again.
        progress: called as ``progress(done, total)`` before the first record and after
            each one (after each shard for WebDataset), so that a caller can show how far it
            got (the library prints nothing).
        format: ``"folder"`` writes each record as a file under its source
            path; ``"webdataset"`` writes WebDataset shards of
            ``<key>.<extension>`` and ``<key>.cls`` (single-label stores only).

    Returns:
        An :class:`ExportReport`.

    Raises:
        ExportError: ``directory`` is not an empty folder (or, with
            ``resume``, holds no unfinished export of this store in this
            format), the store's source paths would escape it or collide, or
            a multi-label store is exported as WebDataset shards.
        CorruptRecordError: a record fails its checksum (named by key).
        StoreError: the store cannot be read.
    """
    started = time.perf_counter()
    if format not in ("folder", "webdataset"):
        raise ValueError(f"format must be 'folder' or 'webdataset', not {format!r}")
    spec = resolve_store(store, given_options(collection=collection, database=database))
    target = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    state = export_folder.folder_state(target)
    _check_folder(target, state, resume)
    with spec.open_reader() as reader:
        manifest = reader.manifest
        identity = export_folder.ExportIdentity(spec.describe(), manifest.length, manifest.created, format)
        if state.unfinished is not None:
            _check_same_store(target, state.unfinished, identity)
        report = ExportReport(spec.describe(), target, resumed=state.unfinished is not None, format=format)
        if format == "webdataset":
            _export_shards(reader, spec, target, identity, report, progress)
        else:
            _export_files(reader, spec, target, identity, report, progress)
    export_folder.finish(target)
    report.seconds = time.perf_counter() - started
    return report


def _export_files(reader: StoreReader, spec: StoreSpec, target: str, identity: export_folder.ExportIdentity,
                  report: ExportReport, progress: Callable[[int, int], None] | None) -> None:
    """Each record as a file under its source path, and the label file where folders do not say."""
    manifest = reader.manifest
    raw = manifest.payload_kind == PayloadKind.RAW.label
    paths = [_file_name(path, raw, spec) for path in reader.source_path_range(0, len(reader))]
    labels = reader.labels()
    label_file = None
    if not _labelled_by_folder(manifest, paths, labels):
        label_file = "labels.jsonl" if manifest.multi_label else "labels.csv"
    _check_placeable(paths, label_file, spec)
    export_folder.start(target, identity)
    if report.resumed:
        export_folder.remove_partials(target)
    _write_records(reader, target, paths, raw, report, progress)
    _check_all_exported(report, len(paths), spec)
    if label_file is not None:
        report.label_file = _write_labels(os.path.join(target, label_file), paths, labels, manifest.classes,
                                          manifest.multi_label)


def _export_shards(reader: StoreReader, spec: StoreSpec, target: str, identity: export_folder.ExportIdentity,
                   report: ExportReport, progress: Callable[[int, int], None] | None) -> None:
    """The records as WebDataset shards (:mod:`datakit.tools.export.webdataset`)."""
    manifest = reader.manifest
    if manifest.multi_label:
        raise ExportError(f"{spec.describe()} is a multi-label store, and a WebDataset .cls holds one class; "
                          "export it as a folder (its labels go into labels.jsonl)")
    raw = manifest.payload_kind == PayloadKind.RAW.label
    labels = reader.labels()
    export_folder.start(target, identity)
    if report.resumed:
        export_folder.remove_partials(target)
    samples = ((index, payload, "png" if raw else export_webdataset.extension_of(payload))
               for index, payload in _payloads(reader, raw))
    tally = export_webdataset.write_shards(samples, labels, target, resume=report.resumed, progress=progress)
    report.written, report.kept, report.rewritten = tally.written, tally.kept, tally.rewritten
    report.total_bytes, report.shards = tally.total_bytes, tally.shards
    _check_all_exported(report, len(labels), spec)


def _check_all_exported(report: ExportReport, length: int, spec: StoreSpec) -> None:
    if report.written + report.kept != length:
        raise StoreError(f"{spec.describe()}: {length - report.written - report.kept} record(s) are "
                         "missing from the store; check it with `datakit inspect --verify`")


def _check_folder(target: str, state: export_folder.FolderState, resume: bool) -> None:
    """Refuse a folder this export must not write into."""
    if state.unfinished is not None and not resume:
        raise ExportError(f"{target} holds an unfinished export of {state.unfinished.store} (it was "
                          "interrupted); finish it with `datakit export STORE DIR --resume` "
                          "(resume=True), or export into a new folder")
    if state.unfinished is None and not state.empty:
        finished = (" and holds no unfinished export, so there is nothing to resume (a finished export "
                    "carries no marker)") if resume else ""
        raise ExportError(f"{target} is not an empty folder{finished}; export into a new or empty one, so "
                          "that nothing already there is overwritten or mixed with the store's images")


def _check_same_store(target: str, unfinished: export_folder.ExportIdentity,
                      identity: export_folder.ExportIdentity) -> None:
    difference = unfinished.differs_from(identity)
    if difference is not None:
        raise ExportError(f"{target} holds an unfinished export of another store: {difference}; resume "
                          "it with the store it was exported from, or export into a new folder")


def _labelled_by_folder(manifest: Manifest, paths: list[str], labels: np.ndarray) -> bool:
    """Whether the class folders carry the labels, or there are none (an unlabelled store), so that
    no label file is needed."""
    if manifest.unlabelled:
        return True
    return not manifest.multi_label and not manifest.label_file \
        and not any(entry.get("label_file") for entry in manifest.appends) \
        and all(path.split("/")[0] == manifest.classes[int(label)]
                for path, label in zip(paths, labels, strict=True))


def _write_records(reader: StoreReader, target: str, paths: list[str], raw: bool, report: ExportReport,
                   progress: Callable[[int, int], None] | None) -> None:
    """Write each record's file, keeping (with ``resume``) one already whole."""
    if progress is not None:
        progress(0, len(paths))
    for index, payload in _payloads(reader, raw):
        path = os.path.join(target, *paths[index].split("/"))
        if report.resumed and export_folder.holds_exactly(path, payload):
            report.kept += 1
        else:
            if report.resumed and os.path.lexists(path):
                report.rewritten += 1
            elif os.path.lexists(path):  # a fresh export into an empty folder: nothing is there
                raise ExportError(f"{path} appeared while the export was writing; export into a folder "
                                  "that nothing else writes to")
            export_folder.write_whole(path, payload, str(index))
            report.written += 1
        report.total_bytes += len(payload)
        if progress is not None:
            progress(report.written + report.kept, len(paths))


def _payloads(reader: StoreReader, raw: bool) -> Iterator[tuple[int, bytes]]:
    """Every record's file bytes (raw pixels as a PNG), in index order, its checksum verified."""
    for index, data in _records(reader):
        record = decode_record(data, record_key(index))  # verifies the checksum
        yield index, _png(record) if raw else bytes(record.payload)


def _records(reader: StoreReader) -> Iterator[tuple[int, bytes]]:
    """Every record, in index order, a window at a time (each one read once)."""
    length = len(reader)
    for start in range(0, length, _WINDOW):
        indices = list(range(start, min(length, start + _WINDOW)))
        yield from zip(indices, reader.get_many(indices), strict=True)


def _file_name(path: str, raw: bool, spec: StoreSpec) -> str:
    cleaned = posixpath.normpath(path)
    if cleaned.startswith(("/", "../")) or cleaned in ("..", ".") or "\\" in cleaned or ":" in cleaned[:2]:
        raise ExportError(f"{spec.describe()}: the source path {path!r} would be written outside the "
                          "export folder; the store is damaged or was not written by datakit")
    if "\x00" in cleaned:
        raise ExportError(f"{spec.describe()}: the source path {path!r} holds a NUL character, which no file "
                          "name can hold; nothing was exported")
    name = posixpath.splitext(cleaned)[0] + ".png" if raw else cleaned
    if export_folder.reserved_name(name):
        raise ExportError(f"{spec.describe()}: the source path {path!r} is a name datakit export keeps "
                          "for its own bookkeeping; nothing was exported")
    return name


def _check_placeable(paths: list[str], label_file: str | None, spec: StoreSpec) -> None:
    """Refuse, before anything is written, files that one folder cannot hold side by side.

    Two records at one file, one record's file where another's folder goes
    (``a`` and ``a/b.jpg``), or a record where the label file goes would stop
    the export half-way or overwrite a record. Paths are compared case folded:
    a case-insensitive file system (macOS, Windows) would overwrite one with
    the other.
    """
    files: dict[str, int] = {}  # case-folded path -> record index; -1: the label file
    if label_file is not None:
        files[label_file] = -1
    for index, path in enumerate(paths):
        other = files.setdefault(path.lower(), index)
        if other != index:
            raise ExportError(f"{spec.describe()}: {_owner(other, paths, label_file)} and "
                              f"{_owner(index, paths, label_file)} would be the same file; nothing was "
                              "exported")
    for index, path in enumerate(paths):
        parts = path.lower().split("/")
        for depth in range(1, len(parts)):
            folder = files.get("/".join(parts[:depth]))
            if folder is not None:
                raise ExportError(f"{spec.describe()}: {_owner(folder, paths, label_file)} is a file where "
                                  f"{_owner(index, paths, label_file)} needs a folder; nothing was exported")


def _owner(index: int, paths: list[str], label_file: str | None) -> str:
    """A file of the export, for a message: a record and its path, or the label file (``-1``)."""
    if index < 0:
        return f"{label_file!r}, the label file this export writes beside the images,"
    return f"record {record_key(index)!r} at {paths[index]!r}"


def _png(record: Any) -> bytes:
    from PIL import Image

    height, width, channels = record.header.shape
    pixels = np.frombuffer(record.payload, dtype=np.uint8).reshape(height, width, channels)
    buffer = io.BytesIO()
    Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_labels(location: str, paths: list[str], labels: np.ndarray, classes: list[str],
                  multi: bool) -> str:
    """Write the label file (whole, like the images; a resumed export writes it again)."""
    buffer = io.StringIO(newline="")
    if multi:
        for path, row in zip(paths, labels, strict=True):
            names = [classes[index] for index in np.flatnonzero(row)]
            buffer.write(json.dumps({"path": path, "label": names}, ensure_ascii=False) + "\n")
    else:
        writer = csv.writer(buffer)
        writer.writerow(["path", "label"])
        for path, label in zip(paths, labels, strict=True):
            writer.writerow([path, classes[int(label)]])
    export_folder.write_whole(location, buffer.getvalue().encode("utf-8"), "labels")
    return location
