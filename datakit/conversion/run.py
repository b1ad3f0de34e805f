"""What one conversion run writes: a new store, the rest of an interrupted one, or an append.

The destination says which (:func:`~datakit.conversion.destination.prepare_destination`:
created, replaced, resumed, or read back to grow). Each case becomes one
:class:`Run`, so that the pipeline reads, numbers and commits the same way for
all three: the source entries the store does not hold yet, the committed state
the commits continue from, every stored record's label, and how to write the
manifest that completes the store.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datakit.conversion.appending import AppendPlan, appended_manifest, plan_append
from datakit.conversion.destination import prepare_destination
from datakit.conversion.fields import FieldOptions
from datakit.conversion.report import ConversionReport, listed_skips
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.files import EntryBytes, entry_bytes
from datakit.conversion.sources.labelfile import in_class_order
from datakit.format.fields.schema import Schema
from datakit.format.manifest import KEPT_SKIPPED_FILES, Manifest, source_spans
from datakit.format.records import FIELDS_VERSION, MULTI_LABEL_VERSION, SINGLE_LABEL_VERSION
from datakit.stores.contract import StoreWriter
from datakit.stores.conversion_state import AppendState, CommittedState, ConversionSettings

__all__ = ["Run", "start_run"]


@dataclass
class Run:
    """What this run writes into its destination.

    Attributes:
        settings: the progress settings the records are read with: this
            conversion's, or for an append the store's own (and its grown classes).
        state: the committed state the commits continue from; its totals
            advance as records are numbered.
        entries: the source entries the store does not hold yet, in order.
        labels: every stored record's label (a class index, or a multi-label
            record's tuple of classes), in index order; numbering appends to it.
        source: how the reading stage gets the entries' bytes.
        manifest: the manifest that completes the store, from the finished report.
        fields: how the reading stage gets and encodes the other fields (None
            for a classification store).
    """

    settings: ConversionSettings
    state: CommittedState
    entries: list[SourceEntry]
    labels: list[Any]
    source: EntryBytes
    manifest: Callable[[ConversionReport], Manifest]
    fields: FieldOptions | None = None

    def label_table(self) -> np.ndarray:
        """The label table: class indices, or a ``(records, classes)`` multi-hot uint8 array."""
        if self.settings.label_kind != "multi":
            return np.asarray(self.labels, dtype=np.int64)
        table = np.zeros((len(self.labels), len(self.settings.classes)), dtype=np.uint8)
        for row, indices in enumerate(self.labels):
            table[row, list(indices)] = 1
        return table


def start_run(writer: StoreWriter, folder: SourceFolder, wanted: ConversionSettings, report: ConversionReport,
              *, resume: bool, overwrite: bool, append: bool, discard_unfinished: bool = False) -> Run | None:
    """Make the destination ready (under the writer's lock) and say what this run writes into it.

    ``wanted`` are the settings this conversion asks for, with the scan rules of
    ``folder``; ``discard_unfinished`` rolls an unfinished append back first.

    Returns:
        The run, or ``None`` when the store needs nothing: a resumed store that
        is complete already, or an append that finds nothing new (``report``
        says which).

    Raises:
        StoreNotFoundError, DestinationExistsError: from
            :func:`~datakit.conversion.destination.prepare_destination`.
        ConversionError: a resumed store was converted with other settings, or
            the source does not fit the store it would grow.
    """
    prepared = prepare_destination(writer, wanted, folder, resume=resume, overwrite=overwrite, append=append,
                                   discard_unfinished=discard_unfinished)
    if prepared is None:
        report.complete = report.already_complete = True
        return None
    if isinstance(prepared, AppendState):
        discarded = prepared.discarded
        if discarded is not None:
            report.discarded, report.discarded_from = discarded.written or 0, discarded.source or "?"
        return _append_run(writer, prepared, folder, wanted, report)
    report.resumed_nothing = resume and prepared.new
    return _conversion_run(prepared, folder, wanted, report)


def _conversion_run(state: CommittedState, folder: SourceFolder, wanted: ConversionSettings,
                    report: ConversionReport) -> Run:
    """A new store, or one resumed in the class order it was started in."""
    folder = in_class_order(folder, state.settings.classes)
    report.resumed_from = state.stats.length
    multi = wanted.label_kind == "multi"
    labels = _multi_labels(folder, state.sources) if multi else list(state.labels)
    return Run(wanted, state, _not_stored(folder.entries, state), labels, entry_bytes(folder),
               lambda done: _manifest(folder, wanted, state, done), field_options(folder, wanted))


def _append_run(writer: StoreWriter, appended: AppendState, folder: SourceFolder, wanted: ConversionSettings,
                report: ConversionReport) -> Run | None:
    """The store grown by what ``folder`` holds that it does not (``None``: nothing new)."""
    plan = plan_append(appended, folder, wanted.scan, wanted.label_kind == "multi", writer.spec)
    writer.begin_append(plan.settings)
    report.appended_to = plan.before.length
    report.resumed_from = plan.state.stats.length
    pending = _not_stored(plan.entries, plan.state)
    report.held_elsewhere = _held_elsewhere(plan, folder.root)
    if not pending and plan.state.stats.length == plan.before.length:
        report.total, report.complete = plan.state.stats.length, True  # nothing new: the store is left alone
        return None
    def manifest(done: ConversionReport) -> Manifest:
        return _with_splits(appended_manifest(plan, listed_skips(done), done.label_file), folder)

    return Run(plan.settings, plan.state, pending, plan.labels, entry_bytes(folder), manifest,
               field_options(folder, wanted))


def field_options(folder: SourceFolder, settings: ConversionSettings) -> FieldOptions | None:
    """How the reader processes encode ``folder``'s fields under ``settings`` (None: an image and a label)."""
    if folder.schema is None or folder.schema.is_classification:
        return None
    if folder.fields is None:
        raise ValueError(f"the {folder.kind} source declares fields but gives no way to read them")
    return FieldOptions(folder.schema, folder.fields, settings.boxes)


def _with_splits(manifest: Manifest, folder: SourceFolder) -> Manifest:
    """An appended store's manifest naming the splits it held and those the append brought."""
    new = [name for name in folder.splits if name not in manifest.splits]
    return dataclasses.replace(manifest, splits=[*manifest.splits, *new]) if new else manifest


def _held_elsewhere(plan: AppendPlan, root: str) -> list[str]:
    """The entries of ``root`` taken as held because a record stored from another folder has
    their relative path (appends match images by relative path), so that the report names them."""
    spans = source_spans(plan.before)
    if all(source == root for _, source in spans):
        return []  # the store's own folder, as usual: nothing to compare
    starts = [start for start, _ in spans]
    stored = {path: index for index, path in enumerate(plan.state.sources[:plan.before.length])}
    held = ((entry.path, stored.get(entry.path)) for entry in plan.entries)
    return [path for path, index in held
            if index is not None and spans[bisect.bisect_right(starts, index) - 1][1] != root]


def _not_stored(entries: Sequence[SourceEntry], state: CommittedState) -> list[SourceEntry]:
    done = set(state.sources)
    return [entry for entry in entries if entry.path not in done]


def _multi_labels(folder: SourceFolder, sources: Sequence[str]) -> list[Any]:
    """The classes of each record a resumed multi-label conversion holds, from its label file
    (the same file, as the progress's SHA-256 made sure: stores keep only a first class per record)."""
    by_path = {entry.path: entry.classes for entry in folder.entries}
    return [by_path[path] for path in sources]


def _manifest(folder: SourceFolder, settings: ConversionSettings, state: CommittedState,
              report: ConversionReport) -> Manifest:
    """The manifest of a finished conversion."""
    listed = listed_skips(report)
    return Manifest(classes=folder.classes, payload_kind=settings.payload_kind, stats=state.stats,
                    skipped=len(report.skipped), source=folder.root,
                    skipped_files=listed[:KEPT_SKIPPED_FILES],
                    skipped_files_omitted=max(0, len(listed) - KEPT_SKIPPED_FILES),
                    exif_transpose=settings.exif_transpose, max_side=settings.max_side,
                    quality=settings.quality, label_file=report.label_file,
                    unlisted=len(report.unlisted), label_kind=settings.label_kind,
                    format_version=_format_version(settings), class_order=folder.class_order,
                    source_kind=folder.kind, schema=settings.schema, splits=list(folder.splits))


def _format_version(settings: ConversionSettings) -> int:
    """The oldest format that holds these records: fields need 3, several labels 2."""
    if settings.schema and not Schema.from_json(settings.schema).is_classification:
        return FIELDS_VERSION
    return MULTI_LABEL_VERSION if settings.label_kind == "multi" else SINGLE_LABEL_VERSION
