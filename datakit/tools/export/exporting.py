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
With ``format="webdataset"`` the records go into tar shards instead, every
field a member (:mod:`datakit.tools.export.webdataset`,
:mod:`datakit.tools.export.members`); with ``format="coco"`` the images go
under their paths and the annotations into ``annotations.json`` (and
``captions.json``) (:mod:`datakit.tools.export.coco`). A field a format has
no place for (a folder holds images and labels only) is listed in the
report's ``left_out``, with what keeps it.

An export never loses a sample: it refuses a ``DIR`` that is not empty,
refuses, before writing anything, source paths that would escape ``DIR``,
hold a NUL, or collide (:mod:`datakit.tools.export.paths`), checks every
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
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from datakit.errors import ExportError, StoreError
from datakit.format.fields.base import FieldError
from datakit.format.fields.values import field_values
from datakit.format.manifest import Manifest
from datakit.format.records import PayloadKind, record_key
from datakit.stores import given_options, resolve_store
from datakit.stores.contract import StoreReader, StoreSpec
from datakit.tools.export import folder as export_folder
from datakit.tools.export import webdataset as export_webdataset
from datakit.tools.export.coco import ANNOTATIONS, CAPTIONS, coco_plan, write_coco
from datakit.tools.export.members import Member, member_names, sample_members
from datakit.tools.export.paths import check_placeable, file_name
from datakit.tools.export.reading import image_file, records

__all__ = ["EXPORT_FORMATS", "ExportReport", "export"]

EXPORT_FORMATS = ("folder", "webdataset", "coco")
"""What ``datakit export`` writes: image files, WebDataset shards, or COCO (images and annotation files)."""


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
        format: ``"folder"`` (image files), ``"webdataset"`` (tar shards) or ``"coco"``.
        shards: the tar shards of a WebDataset export (0 otherwise).
        annotations: the annotations of a COCO export (its captions not among them).
        annotation_files: the annotation files of a COCO export.
        left_out: the fields the format has no place for, each with why and what keeps it.
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
    annotations: int = 0
    annotation_files: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def export(store: StoreSpec | str | os.PathLike[str], directory: str | os.PathLike[str], *,
           collection: str | None = None, database: str | None = None, resume: bool = False,
           progress: Callable[[int, int], None] | None = None,
           format: Literal["folder", "webdataset", "coco"] = "folder") -> ExportReport:
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
            ``<key>.<extension>``, ``<key>.cls`` and a member per field
            (single-label stores only); ``"coco"`` writes the images under
            their paths and ``annotations.json`` (and ``captions.json``),
            for a store with boxes or captions.

    Returns:
        An :class:`ExportReport`.

    Raises:
        ExportError: ``directory`` is not an empty folder (or, with
            ``resume``, holds no unfinished export of this store in this
            format), the store's source paths would escape it or collide, a
            multi-label store is exported as WebDataset shards, a store without
            annotations or captions as COCO, or a value cannot be written in
            the format (naming the record and the field).
        CorruptRecordError: a record fails its checksum (named by key).
        StoreError: the store cannot be read.
    """
    started = time.perf_counter()
    if format not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, EXPORT_FORMATS))}, not {format!r}")
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
        elif format == "coco":
            _export_coco(reader, spec, target, identity, report, progress)
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
    paths = [file_name(path, raw, spec) for path in reader.source_path_range(0, len(reader))]
    labels = reader.labels()
    label_file = None
    if not _labelled_by_folder(manifest, paths, labels):
        label_file = "labels.jsonl" if manifest.multi_label else "labels.csv"
    check_placeable(paths, {label_file: "the label file"} if label_file else {}, spec)
    schema = manifest.sample_fields
    report.left_out = {spec.name: "a folder holds the images and their labels; export as webdataset (or "
                       "coco) to keep it" for spec in schema.stored[1:]}
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
    """The records as WebDataset shards, every field a member (:mod:`datakit.tools.export.webdataset`)."""
    manifest = reader.manifest
    if manifest.multi_label:
        raise ExportError(f"{spec.describe()} is a multi-label store, and a WebDataset .cls holds one class; "
                          "export it as a folder (its labels go into labels.jsonl)")
    names = member_names(manifest.sample_fields, spec.describe())
    labels = reader.labels()
    export_folder.start(target, identity)
    if report.resumed:
        export_folder.remove_partials(target)
    tally = export_webdataset.write_shards(_samples(reader, spec, names, labels), len(labels), target,
                                           resume=report.resumed, progress=progress)
    report.written, report.kept, report.rewritten = tally.written, tally.kept, tally.rewritten
    report.total_bytes, report.shards = tally.total_bytes, tally.shards
    _check_all_exported(report, len(labels), spec)


def _samples(reader: StoreReader, spec: StoreSpec, names: dict[str, Member],
             labels: np.ndarray) -> Iterator[tuple[int, list[tuple[str, bytes]]]]:
    """Each record's members: its image, its ``.cls``, then a member per field."""
    raw = reader.manifest.payload_kind == PayloadKind.RAW.label
    schema = reader.manifest.sample_fields
    for index, record in records(reader):
        payload = image_file(record, raw)
        members = export_webdataset.sample_head(index, payload, "png" if raw else
                                                export_webdataset.extension_of(payload), int(labels[index]))
        if names:
            key = record_key(index)
            values = field_values(record, schema, key, [field.name for field in schema.stored[1:]])
            try:
                members += sample_members(values, schema, names, record.header.version,
                                          [extension for extension, _ in members])
            except FieldError as exc:
                raise ExportError(f"{spec.describe()}: record {key}: {exc}; nothing more was exported") \
                    from None
        yield index, members


def _export_coco(reader: StoreReader, spec: StoreSpec, target: str, identity: export_folder.ExportIdentity,
                 report: ExportReport, progress: Callable[[int, int], None] | None) -> None:
    """The images under their paths and their annotations as COCO files (:mod:`datakit.tools.export.coco`)."""
    manifest = reader.manifest
    plan = coco_plan(manifest.sample_fields, spec.describe())
    raw = manifest.payload_kind == PayloadKind.RAW.label
    paths = [file_name(path, raw, spec) for path in reader.source_path_range(0, len(reader))]
    beside = {ANNOTATIONS: "the COCO annotations file", **(
        {CAPTIONS: "the COCO captions file"} if plan.captions is not None else {})}
    check_placeable(paths, beside, spec)
    export_folder.start(target, identity)
    if report.resumed:
        export_folder.remove_partials(target)
    if progress is not None:
        progress(0, len(paths))
    images = ((index, record, paths[index], image_file(record, raw)) for index, record in records(reader))
    tally = write_coco(reader, spec, target, plan, images, report.resumed, progress)
    report.written, report.kept, report.rewritten = tally.written, tally.kept, tally.rewritten
    report.total_bytes, report.annotations, report.annotation_files = (tally.total_bytes, tally.annotations,
                                                                       tally.files)
    report.left_out = dict(plan.left_out)
    _check_all_exported(report, len(paths), spec)


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
    for index, record in records(reader):
        payload = image_file(record, raw)
        outcome = export_folder.place(os.path.join(target, *paths[index].split("/")), payload, str(index),
                                      report.resumed)
        report.kept += outcome == "kept"
        report.written += outcome != "kept"
        report.rewritten += outcome == "rewritten"
        report.total_bytes += len(payload)
        if progress is not None:
            progress(report.written + report.kept, len(paths))


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
