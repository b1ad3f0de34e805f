"""Inspecting a store: a summary, a full verification, a preview sheet.

``inspect()`` returns plain data (what ``datakit inspect --json`` prints), so
scripts and the CLI see the same thing. An incomplete store is summarised
from its conversion progress instead of being refused, since "how far did the
interrupted conversion get?" is exactly what one asks of it.
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from datakit.decode import record_to_array, record_to_pil
from datakit.errors import DatakitError, IncompleteStoreError
from datakit.manifest import Manifest, Stats, record_key
from datakit.record_checks import check_record
from datakit.records import decode_record
from datakit.stores import given_options, resolve_store
from datakit.stores.base import StoreReader, StoreSpec, incomplete_message

__all__ = ["inspect", "verify_records", "draw_preview"]

_THUMB = 96
_CAPTION = 14


def inspect(
    store: StoreSpec | str | os.PathLike[str],
    *,
    collection: str | None = None,
    database: str | None = None,
    verify: bool = False,
    preview: str | os.PathLike[str] | None = None,
    preview_count: int = 36,
    skipped: bool = False,
) -> dict[str, Any]:
    """Summarise a store, optionally verifying it and drawing a preview sheet.

    Args:
        store: a path (LMDB), a ``mongodb://`` URI, or a store spec.
        collection, database: MongoDB only; they do not apply to a spec.
        verify: check every record's checksum and decode every image. The
            result's ``verify`` entry lists each bad record's key and reason.
        preview: write a PNG grid of labelled thumbnails to this path.
        preview_count: how many samples the preview shows, spread over classes.
        skipped: add ``skipped_files`` (``{"path", "reason"}`` of each source
            file or folder the conversion skipped or ignored, as kept in the
            manifest; ``None`` for an incomplete store) and ``skipped_files_omitted``.

    Returns:
        A JSON-serialisable dict: ``backend``, ``path``, ``length``,
        ``classes``, ``class_counts``, ``total_bytes``, ``mean_bytes``,
        ``payload_kind``, ``image_formats``, ``width_range``, ``height_range``,
        ``format_version``, ``complete``, ``skipped``, ``created``, ``source``,
        ``datakit_version``, ``exif_oriented`` and ``high_bit_depth`` (counts
        of images with an EXIF orientation, and with 16-bit or float pixels),
        ``exif_transpose`` (those were stored upright), ``downscaled`` with
        ``max_side`` and ``quality`` (images stored resized by ``--max-side``),
        ``label_kind`` (``"single"``: one class per record; ``"multi"``: a
        multi-hot vector per record, ``class_counts`` counting each class's records), ``label_file``
        (the ``--labels`` file the labels came from, ``None`` for class
        folders or an incomplete store), ``unlisted`` (images under the
        source that the label file did not name), ``appends`` (each
        ``--append``: ``when``, ``added``, ``source``, ``label_file``),
        ``being_written`` (a conversion is writing the
        store now) and ``writer`` (its ``"pid N on HOST"``, else ``None``),
        plus ``problem`` for an incomplete store and ``verify`` and
        ``preview`` when asked for.
    """
    spec = resolve_store(store, given_options(collection=collection, database=database))
    try:
        reader = spec.open_reader()
    except IncompleteStoreError as exc:
        summary = _summarise_incomplete(spec, str(exc))
        if skipped:
            summary.update(skipped_files=None, skipped_files_omitted=0)
        return summary
    with reader:
        summary = _summarise(spec, reader.manifest)
        if skipped:
            summary["skipped_files"] = [{"path": path, "reason": reason}
                                        for path, reason in reader.manifest.skipped_files]
            summary["skipped_files_omitted"] = reader.manifest.skipped_files_omitted
        if verify:
            bad = verify_records(reader)
            summary["verify"] = {"checked": summary["length"], "ok": not bad, "bad": bad}
        if preview is not None:
            draw_preview(reader, os.fspath(preview), preview_count)
            summary["preview"] = os.path.abspath(os.fspath(preview))
    # A complete store can be being written too: an append holds the writer lock (or lease) while
    # readers still see the store as it was. Asked after the reader closed: LMDB allows one
    # environment per store and process.
    with spec.open_writer() as writer:
        running = writer.running_writer()
    if running is not None:
        summary.update(being_written=True, writer=running.describe())
    return summary


def _summarise(spec: StoreSpec, manifest: Manifest) -> dict[str, Any]:
    summary = spec.summary_fields()
    summary.update(_stats_fields(manifest.classes, manifest.stats))
    summary.update(
        payload_kind=manifest.payload_kind,
        format_version=manifest.format_version,
        complete=True,
        skipped=manifest.skipped,
        created=manifest.created,
        source=manifest.source,
        datakit_version=manifest.datakit_version,
        exif_transpose=manifest.exif_transpose,
        max_side=manifest.max_side,
        quality=manifest.quality,
        label_kind=manifest.label_kind,
        label_file=manifest.label_file or None,
        unlisted=manifest.unlisted,
        appends=[dict(entry) for entry in manifest.appends],
        being_written=False,
        writer=None,
    )
    return summary


def _summarise_incomplete(spec: StoreSpec, message: str) -> dict[str, Any]:
    with spec.open_writer() as writer:
        state = writer.committed_state()
        running = writer.running_writer()
    if running is not None:  # being written, not interrupted: say so, and never suggest --resume
        message = incomplete_message(spec, state.settings.source, running)
    summary = spec.summary_fields()
    summary.update(_stats_fields(state.settings.classes, state.stats))
    summary.update(payload_kind=state.settings.payload_kind, format_version=None, complete=False,
                   skipped=None, created=None, source=state.settings.source, datakit_version=None,
                   exif_transpose=state.settings.exif_transpose, max_side=state.settings.max_side,
                   quality=state.settings.quality, label_kind=state.settings.label_kind, label_file=None,
                   unlisted=0, appends=[], being_written=running is not None,
                   writer=running.describe() if running is not None else None, problem=message)
    return summary


def _stats_fields(classes: list[str], stats: Stats) -> dict[str, Any]:
    return {
        "length": stats.length,
        "classes": list(classes),
        "class_counts": dict(zip(classes, stats.class_counts, strict=True)),
        "total_bytes": stats.total_bytes,
        "mean_bytes": round(stats.total_bytes / stats.length, 1) if stats.length else 0,
        "image_formats": dict(stats.image_formats),
        "width_range": list(stats.width_range),
        "height_range": list(stats.height_range),
        "exif_oriented": stats.exif_oriented,
        "high_bit_depth": stats.high_bit_depth,
        "downscaled": stats.downscaled,
    }


def verify_records(reader: StoreReader) -> list[dict[str, str]]:
    """Check every record: present, checksum, what its header says (label, size: as reads check
    it, :mod:`datakit.record_checks`), and a full image decode.

    Returns:
        One ``{"key", "reason"}`` dict per bad record; empty when all is well.
    """
    manifest = reader.manifest
    labels = reader.labels()
    bad: list[dict[str, str]] = []
    expected = 0
    for index, data in reader.iter_records():
        while expected < index:  # a gap: records that should be there are not
            bad.append({"key": record_key(expected), "reason": "missing"})
            expected += 1
        expected = index + 1
        key = record_key(index)
        try:
            record = decode_record(data, key)
            check_record(record, key, index, manifest, labels)
            record_to_array(record)
        except Exception as exc:  # every failure is a finding, not a crash
            bad.append({"key": key, "reason": getattr(exc, "reason", None) or str(exc)})
    bad.extend({"key": record_key(index), "reason": "missing"} for index in range(expected, manifest.length))
    return bad


def draw_preview(reader: StoreReader, path: str, count: int) -> None:
    """Write a grid of thumbnails, each captioned with its class and key."""
    labels = reader.labels()  # validated against the classes when read
    indices = _spread_over_classes(labels, count)
    if not indices:
        raise DatakitError(f"{reader.spec.describe()} holds no record to preview")
    columns = max(1, math.ceil(math.sqrt(len(indices))))
    rows = math.ceil(len(indices) / columns)
    sheet = Image.new("RGB", (columns * _THUMB, rows * (_THUMB + _CAPTION)), "white")
    draw = ImageDraw.Draw(sheet)
    classes = reader.manifest.classes
    for slot, (index, data) in enumerate(zip(indices, reader.get_many(indices), strict=True)):
        key = record_key(index)
        x, y = (slot % columns) * _THUMB, (slot // columns) * (_THUMB + _CAPTION)
        caption = f"bad #{index}"
        try:
            record = decode_record(data, key)
            caption = f"{classes[labels[index]]} #{index}"
            thumb = record_to_pil(record)
            thumb.thumbnail((_THUMB - 4, _THUMB - 4))
            sheet.paste(thumb, (x + (_THUMB - thumb.width) // 2, y + (_THUMB - thumb.height) // 2))
        except Exception:  # a broken record still gets its slot, marked; --verify says what is wrong
            draw.line((x, y, x + _THUMB, y + _THUMB), fill="red", width=3)
        draw.text((x + 3, y + _THUMB), caption[:16], fill="black")
    sheet.save(path, format="PNG")


def _spread_over_classes(labels: np.ndarray, count: int) -> list[int]:
    """Up to ``count`` indices, taking the first samples of each class in turn."""
    order = np.argsort(labels, kind="stable")
    present, starts = np.unique(labels[order], return_index=True)
    ends = [*starts[1:], len(order)]
    queues = [deque(order[start:end][:count].tolist()) for start, end in zip(starts, ends, strict=True)]
    chosen: list[int] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.popleft())
    return sorted(chosen)
