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
``datakit convert DIR DEST --labels``.

An export never loses a sample: it refuses a ``DIR`` that is not empty,
refuses source paths that would escape ``DIR`` or collide, checks every
record's checksum as it reads it (a bad record stops the export, naming its
key), and counts what it wrote.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from datakit.errors import ExportError, StoreError
from datakit.manifest import record_key
from datakit.records import PayloadKind, decode_record
from datakit.stores import given_options, resolve_store
from datakit.stores.base import StoreReader, StoreSpec

__all__ = ["ExportReport", "export"]

_WINDOW = 1024


@dataclass
class ExportReport:
    """What an export wrote.

    Attributes:
        store: the store, as messages name it.
        directory: the folder written, absolute.
        written: image files written (one per record).
        total_bytes: their bytes.
        label_file: the label file written beside them, or ``""`` when the
            class folders carry the labels.
        seconds: wall time.
    """

    store: str
    directory: str
    written: int = 0
    total_bytes: int = 0
    label_file: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def export(store: StoreSpec | str | os.PathLike[str], directory: str | os.PathLike[str], *,
           collection: str | None = None, database: str | None = None) -> ExportReport:
    """Write every record of ``store`` back to files under ``directory``.

    Args:
        store: a path (LMDB), a ``mongodb://`` URI, or a store spec.
        directory: an empty or missing folder.
        collection, database: MongoDB only.

    Returns:
        An :class:`ExportReport`.

    Raises:
        ExportError: ``directory`` is not an empty folder, or the store's
            source paths would escape it or collide.
        CorruptRecordError: a record fails its checksum (named by key).
        StoreError: the store cannot be read.
    """
    started = time.perf_counter()
    spec = resolve_store(store, given_options(collection=collection, database=database))
    target = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    if os.path.lexists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise ExportError(f"{target} is not an empty folder; export into a new or empty one, so that "
                          "nothing already there is overwritten or mixed with the store's images")
    with spec.open_reader() as reader:
        manifest = reader.manifest
        raw = manifest.payload_kind == PayloadKind.RAW.label
        paths = [_file_name(path, raw, spec) for path in reader.source_path_range(0, len(reader))]
        _check_distinct(paths, spec)
        labels = reader.labels()
        by_folder = not manifest.multi_label and not manifest.label_file \
            and not any(entry.get("label_file") for entry in manifest.appends) \
            and all(path.split("/")[0] == manifest.classes[int(label)] for path, label in zip(paths, labels,
                                                                                              strict=True))
        os.makedirs(target, exist_ok=True)
        report = ExportReport(spec.describe(), target)
        for index, data in _records(reader):
            record = decode_record(data, record_key(index))  # verifies the checksum
            payload = _png(record) if raw else bytes(record.payload)
            path = os.path.join(target, *paths[index].split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "xb") as stream:  # "x": never overwrite a sample written before
                stream.write(payload)
            report.written += 1
            report.total_bytes += len(payload)
        if report.written != len(paths):
            raise StoreError(f"{spec.describe()}: {len(paths) - report.written} record(s) are missing from "
                             "the store; check it with `datakit inspect --verify`")
        if not by_folder:
            report.label_file = _write_labels(target, paths, labels, manifest.classes, manifest.multi_label)
    report.seconds = time.perf_counter() - started
    return report


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
    return posixpath.splitext(cleaned)[0] + ".png" if raw else cleaned


def _check_distinct(paths: list[str], spec: StoreSpec) -> None:
    seen: dict[str, int] = {}
    for index, path in enumerate(paths):
        folded = path.lower()  # a case-insensitive file system would overwrite one with the other
        if folded in seen:
            raise ExportError(f"{spec.describe()}: records {record_key(seen[folded])!r} and "
                              f"{record_key(index)!r} would both be written to {path!r}; nothing was "
                              "exported")
        seen[folded] = index


def _png(record: Any) -> bytes:
    from PIL import Image

    height, width, channels = record.header.shape
    pixels = np.frombuffer(record.payload, dtype=np.uint8).reshape(height, width, channels)
    buffer = io.BytesIO()
    Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_labels(target: str, paths: list[str], labels: np.ndarray, classes: list[str], multi: bool) -> str:
    if multi:
        location = os.path.join(target, "labels.jsonl")
        with open(location, "x", encoding="utf-8") as stream:
            for path, row in zip(paths, labels, strict=True):
                names = [classes[index] for index in np.flatnonzero(row)]
                stream.write(json.dumps({"path": path, "label": names}, ensure_ascii=False) + "\n")
        return location
    location = os.path.join(target, "labels.csv")
    with open(location, "x", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["path", "label"])
        for path, label in zip(paths, labels, strict=True):
            writer.writerow([path, classes[int(label)]])
    return location
