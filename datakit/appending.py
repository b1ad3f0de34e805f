"""Growing a complete store: ``datakit convert SRC DEST --append``.

An append adds the images of a folder (or of a label file) that the store
does not hold yet, matched by relative path, as records after the last one.
Existing records and their labels never change; a class the store does not
know is added at the end of ``classes``, so ``class_to_idx`` is no longer
sorted afterwards.

The append commits like a conversion (:mod:`datakit.conversion`): batches
with a progress entry, and the manifest and label table replaced in the final
step. The manifest of the store as it was stays in place until then, so a
reader opened at any moment, or after the append was killed, sees the store
as it was; ``--append`` again (or ``--resume``) finishes an interrupted one.
This module only plans: which classes, which settings, which entries, which
labels the records already stored carry, and the manifest at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from datakit.errors import ConversionError
from datakit.manifest import KEPT_SKIPPED_FILES, Manifest, Stats
from datakit.source import SourceEntry, SourceFolder
from datakit.stores.base import AppendState, CommittedState, ConversionSettings

__all__ = ["APPEND_RULES", "AppendPlan", "plan_append", "appended_manifest"]

APPEND_RULES = "append "
"""Prefix of an append's ``scan`` in its progress entry, before the scan rules of its source."""


@dataclass
class AppendPlan:
    """What an append does.

    Attributes:
        settings: the progress settings: the store's payload kind, EXIF and
            size options and label kind, with the grown class list.
        state: what the store holds, every record's source path and label,
            and the running totals the commits continue from.
        entries: the source entries, their labels in the store's classes.
        labels: each stored record's label (class index, or a multi-label
            record's tuple of classes), in index order.
        before: the manifest of the store before the append.
    """

    settings: ConversionSettings
    state: CommittedState
    entries: list[SourceEntry]
    labels: list[Any]
    before: Manifest


def plan_append(appended: AppendState, folder: SourceFolder, rules: str, multi_label: bool,
                where: str) -> AppendPlan:
    """Plan adding ``folder`` to the store read back as ``appended``.

    Args:
        appended: the store, from :meth:`~datakit.stores.base.StoreWriter.append_state`.
        folder: the scanned source (a folder, or a label file's entries).
        rules: the scan rules of ``folder`` (recorded, so that an interrupted
            append is finished from the same kind of source).
        multi_label: ``folder`` comes from a multi-label file.
        where: the store, for messages.

    Raises:
        ConversionError: the source does not fit the store (several labels
            per image for a single-label store, a new class for a multi-label
            one), or an interrupted append into it came from another source.
    """
    before = appended.manifest
    multi = before.multi_label
    if multi_label and not multi:
        raise ConversionError(f"{where} is a single-label store; a label file giving images several "
                              "classes cannot be appended to it (convert a new store instead)")
    interrupted = appended.interrupted
    known = list(interrupted.settings.classes if interrupted is not None else before.classes)
    new = [name for name in folder.classes if name not in known]
    if new and multi:
        raise ConversionError(f"{where} is a multi-label store, whose label rows have one column per "
                              f"class; --append cannot add the classes {new} to it (convert a new store)")
    classes = known + new
    settings = ConversionSettings(folder.root, classes, before.payload_kind, APPEND_RULES + rules,
                                  before.exif_transpose, before.max_side, before.quality, before.label_kind)
    if interrupted is not None:
        if interrupted.settings.scan != settings.scan or interrupted.settings.classes != classes:
            raise ConversionError(
                f"{where} holds an append from {interrupted.settings.source} that was interrupted; "
                f"finish it first with `datakit convert {interrupted.settings.source} {where} --append` "
                "and the same --labels and --extensions as then")
        stats = interrupted.stats
    else:
        stats = Stats.from_dict(before.stats.to_dict(), where)  # a copy the commits advance
        stats.class_counts.extend([0] * len(new))
    position = [classes.index(name) for name in folder.classes]
    entries = []
    for entry in folder.entries:
        indices = tuple(sorted(position[index] for index in entry.classes))
        entries.append(SourceEntry(entry.path, indices[0] if indices else position[entry.label], indices))
    labels: list[Any] = list(appended.labels)
    if multi:
        by_path = {entry.path: entry.classes for entry in entries}
        old = [tuple(np.flatnonzero(row).tolist()) for row in appended.table]
        # records an interrupted append committed came from this source (its scan matched)
        labels = old + [by_path[path] for path in appended.sources[before.length:]]
    state = CommittedState(settings, stats, list(appended.sources), list(appended.labels))
    return AppendPlan(settings, state, entries, labels, before)


def appended_manifest(plan: AppendPlan, skipped: Sequence[list[str]], label_file: str) -> Manifest:
    """The manifest of the grown store: the old one, with the new classes, totals and
    skipped files, and an entry in its ``appends`` history."""
    before = plan.before
    listed = [*before.skipped_files, *skipped]
    history = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "added": plan.state.stats.length - before.length, "source": plan.settings.source,
               "label_file": label_file}
    return dataclasses.replace(
        before, classes=list(plan.settings.classes), stats=plan.state.stats,
        skipped=before.skipped + sum(1 for _, reason in skipped if not reason.startswith("ignored")),
        skipped_files=listed[:KEPT_SKIPPED_FILES],
        skipped_files_omitted=before.skipped_files_omitted + max(0, len(listed) - KEPT_SKIPPED_FILES),
        appends=[*before.appends, history])
