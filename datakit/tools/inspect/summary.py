"""``datakit.inspect``: a store's summary, with its verification and preview sheet when asked for.

``inspect()`` returns plain data (what ``datakit inspect --json`` prints), so
scripts and the CLI see the same thing. An incomplete store is summarised
from its conversion progress instead of being refused, since "how far did the
interrupted conversion get?" is exactly what one asks of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from datakit.conversion.sources.foreign.summary import foreign_summary
from datakit.errors import (
    CorruptStoreError,
    IncompleteStoreError,
    StoreError,
    StoreReplacedError,
)
from datakit.format.fields.schema import Schema
from datakit.format.manifest import Manifest
from datakit.format.stats import Stats
from datakit.stores import given_options, resolve_store
from datakit.stores.contract import StoreReader, StoreSpec
from datakit.stores.conversion_state import UnfinishedAppend
from datakit.stores.refusals import incomplete_message
from datakit.tools.inspect.field_stats import field_summaries
from datakit.tools.inspect.preview import PREVIEW_FORMATS, draw_preview, preview_format
from datakit.tools.inspect.verification import verify_records

__all__ = ["inspect", "split_rows", "verify_records", "draw_preview", "preview_format", "PREVIEW_FORMATS",
           "LABEL_WORDS"]

_SPLIT_WINDOW = 65536

LABEL_WORDS = {"single": "single-label", "multi": "multi-label", "none": "none (unlabelled store)"}
"""A store's ``label_kind`` in words, as ``datakit inspect`` shows it (and ``--json``'s ``labels``)."""


def inspect(
    store: StoreSpec | str | os.PathLike[str],
    *,
    collection: str | None = None,
    database: str | None = None,
    verify: bool = False,
    preview: str | os.PathLike[str] | None = None,
    preview_count: int = 36,
    skipped: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Summarise a store, optionally verifying it and drawing a preview sheet.

    Args:
        store: a path (LMDB), a ``mongodb://`` URI, or a store spec.
        collection, database: MongoDB only; they do not apply to a spec.
        verify: check every record's checksum and decode every image, and in a
            field store every field (:mod:`datakit.tools.inspect.verification`). The
            result's ``verify`` entry lists each bad record's key and reason.
        preview: write a grid of labelled thumbnails (in a field store, with
            their boxes, masks, keypoints and caption words) to this path, in the
            format its extension names (:data:`PREVIEW_FORMATS`: ``.png``,
            ``.jpg``/``.jpeg``, ``.webp``).
        preview_count: how many samples the preview shows, spread over classes.
        skipped: add ``skipped_files`` (``{"path", "reason"}`` of each source
            file or folder the conversion skipped or ignored, as kept in the
            manifest; ``None`` for an incomplete store) and ``skipped_files_omitted``.
        progress: called as ``progress(done, total)`` while ``verify`` checks
            the records, so that a caller can show how far it got (the
            library itself prints nothing).

    Returns:
        A JSON-serialisable dict: ``backend``, ``path``, ``length``,
        ``classes``, ``class_counts``, ``total_bytes``, ``mean_bytes``,
        ``payload_kind``, ``image_formats``, ``width_range``, ``height_range``,
        ``format_version``, ``complete``, ``skipped``, ``created``, ``store_id``
        (a new one for each conversion, kept by appends; ``None`` for an
        incomplete store and one written before store ids), ``source``,
        ``source_kind`` (``"folder"``, ``"huggingface"``, ``"webdataset"``; ``None``
        for an incomplete store), ``datakit_version``, ``exif_oriented`` and ``high_bit_depth`` (counts
        of images with an EXIF orientation, and with 16-bit or float pixels),
        ``exif_transpose`` (those were stored upright), ``downscaled`` with
        ``max_side`` and ``quality`` (images stored resized by ``--max-side``),
        ``label_kind`` (``"single"``: one class per record; ``"multi"``: a
        multi-hot vector per record, ``class_counts`` counting each class's records; ``"none"``: an
        unlabelled store, no classes, every label -1) and ``labels``, the same in words
        (:data:`LABEL_WORDS`: ``"none (unlabelled store)"``), ``label_file``
        (the ``--labels`` file the labels came from, ``None`` for class
        folders or an incomplete store), ``class_order`` (``"numeric"``: a
        label file's integer labels sorted as numbers; ``"text"``: sorted as
        text, as folder names are; ``None`` for an incomplete store; classes
        new in an append come last either way), ``unlisted`` (images under the
        source that the label file did not name), ``appends`` (each
        ``--append``: ``when``, ``added``, ``source``, ``label_file``), ``splits``
        (the records of each Hugging Face split the store holds, ``{name: records}``
        in the manifest's order; empty for other sources and incomplete stores),
        ``unfinished_append`` (``None``, or an append that was interrupted:
        its ``source``, the records it ``written`` that readers do not see
        yet, and the commands that ``finish`` it or ``discard`` it; the store
        stays readable as it was), ``being_written`` (a conversion is writing the
        store now) and ``writer`` (its ``"pid N on HOST"``, else ``None``),
        ``schema`` (the samples' fields, as the manifest lists them: ``[{"name", "type", ...}]``; an
        image and a label for a classification store) and ``fields`` (each field's figures but the
        image's and the label's, by name: ``type``, ``values``, ``null``, and by type: boxes per image
        and sizes, categories with counts, caption lengths, mask coverage, keypoints, a number's range;
        :mod:`datakit.tools.inspect.field_stats`), plus ``problem`` for an incomplete store and ``verify`` and
        ``preview`` when asked for. A store datakit did not write, in a layout
        ``datakit convert`` imports (the pickle recipe's LMDB or MongoDB
        layout, an LMDB of encoded images), gives ``backend``, ``path``,
        ``complete`` (false) and ``foreign``: ``layout``, ``records``,
        ``sample_keys``, ``detail`` and the ``command`` that imports it
        (:mod:`datakit.conversion.sources.foreign.summary`).

    Raises:
        ValueError: ``preview``'s extension names no format the sheet can be
            written in.
    """
    if preview is not None:
        preview_format(preview)  # before any work: a long --verify must not end in this refusal
    spec = resolve_store(store, given_options(collection=collection, database=database))
    try:
        reader = spec.open_reader()
    except IncompleteStoreError as exc:
        summary = foreign_summary(spec) or _summarise_incomplete(spec, str(exc))
        if skipped:
            summary.update(skipped_files=None, skipped_files_omitted=0)
        return summary
    except (CorruptStoreError, StoreReplacedError):
        raise  # a datakit store, damaged or replaced while opened: nobody else's layout
    except StoreError:
        found = foreign_summary(spec)
        if found is None:
            raise
        return found
    with reader:
        summary = _summarise(spec, reader.manifest)
        unfinished = reader.unfinished_append()
        summary["splits"] = split_rows(reader)
        if skipped:
            summary["skipped_files"] = [{"path": path, "reason": reason}
                                        for path, reason in reader.manifest.skipped_files]
            summary["skipped_files_omitted"] = reader.manifest.skipped_files_omitted
        if verify:
            bad = verify_records(reader, progress)
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
    elif unfinished is not None:
        summary["unfinished_append"] = _unfinished_fields(spec, unfinished)
    return summary


def _unfinished_fields(spec: StoreSpec, unfinished: UnfinishedAppend) -> dict[str, Any]:
    """An interrupted append, and the two commands that end it: finish it from its own source,
    or discard it (appending SRC, whatever it is, instead)."""
    arguments = spec.command_arguments()
    fields: dict[str, Any] = {
        "source": unfinished.source, "written": unfinished.written,
        "finish": None if unfinished.source is None else
        f"datakit convert {unfinished.source} {arguments} --append",
        "discard": f"datakit convert SRC {arguments} --append --discard-unfinished"}
    if unfinished.problem:
        fields["problem"] = unfinished.problem
    return fields


def _summarise(spec: StoreSpec, manifest: Manifest) -> dict[str, Any]:
    summary = spec.summary_fields()
    summary.update(_stats_fields(manifest.classes, manifest.stats))
    summary.update(_schema_fields(manifest.sample_fields, manifest.stats))
    summary.update(
        payload_kind=manifest.payload_kind,
        format_version=manifest.format_version,
        complete=True,
        skipped=manifest.skipped,
        created=manifest.created,
        store_id=manifest.store_id or None,
        source=manifest.source,
        source_kind=manifest.source_kind,
        datakit_version=manifest.datakit_version,
        exif_transpose=manifest.exif_transpose,
        max_side=manifest.max_side,
        quality=manifest.quality,
        label_kind=manifest.label_kind,
        labels=LABEL_WORDS[manifest.label_kind],
        label_file=manifest.label_file or None,
        class_order=manifest.class_order,
        unlisted=manifest.unlisted,
        appends=[dict(entry) for entry in manifest.appends],
        unfinished_append=None,
        being_written=False,
        writer=None,
    )
    return summary


def split_rows(reader: StoreReader) -> dict[str, int]:
    """The records of each split a store's manifest names, counted by their names (``<split>/<row>``),
    reading the source paths a window at a time; ``{}`` for a store of no splits."""
    manifest = reader.manifest
    if not manifest.splits:
        return {}
    counts = dict.fromkeys(manifest.splits, 0)
    for start in range(0, manifest.length, _SPLIT_WINDOW):
        for path in reader.source_path_range(start, min(manifest.length, start + _SPLIT_WINDOW)):
            name = path.split("/", 1)[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


def _summarise_incomplete(spec: StoreSpec, message: str) -> dict[str, Any]:
    with spec.open_writer() as writer:
        state = writer.committed_state()
        running = writer.running_writer()
    if running is not None:  # being written, not interrupted: say so, and never suggest --resume
        message = incomplete_message(spec, state.settings.source, running)
    summary = spec.summary_fields()
    summary.update(_stats_fields(state.settings.classes, state.stats))
    settings = state.settings
    schema = Schema.from_json(settings.schema) if settings.schema else \
        Schema.classification(settings.label_kind != "none")
    summary.update(_schema_fields(schema, state.stats))
    summary.update(payload_kind=state.settings.payload_kind, format_version=None, complete=False,
                   skipped=None, created=None, store_id=None, source=state.settings.source, source_kind=None,
                   datakit_version=None,
                   exif_transpose=state.settings.exif_transpose, max_side=state.settings.max_side,
                   quality=state.settings.quality, label_kind=state.settings.label_kind,
                   labels=LABEL_WORDS[state.settings.label_kind], label_file=None,
                   class_order=None, unlisted=0, appends=[], unfinished_append=None, splits={},
                   being_written=running is not None,
                   writer=running.describe() if running is not None else None, problem=message)
    return summary


def _schema_fields(schema: Schema, stats: Stats) -> dict[str, Any]:
    """The store's ``schema`` (as the manifest keeps it) and each field's figures
    (:func:`~datakit.tools.inspect.field_stats.field_summaries`; none in a classification store)."""
    return {"schema": schema.to_json(), "fields": field_summaries(schema, stats.fields, stats.length)}


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
