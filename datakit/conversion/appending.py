"""Growing a complete store: ``datakit convert SRC DEST --append``.

An append adds the images of a folder (or of a label file) that the store
does not hold yet, matched by relative path, as records after the last one.
Existing records and their labels never change; a class the store does not
know is added at the end of ``classes``, so ``class_to_idx`` is no longer
sorted afterwards.

The append commits like a conversion (:mod:`datakit.conversion.pipeline`): batches
with a progress entry, and the manifest and label table replaced in the final
step. The manifest of the store as it was stays in place until then, so a
reader opened at any moment, or after the append was killed, sees the store
as it was; ``--append`` again (or ``--resume``) from the same source finishes
an interrupted one, and only that source may: the records' paths are relative
to it. ``--append --discard-unfinished`` rolls it back instead
(:mod:`datakit.stores.unfinished_append`).
This module only plans: which classes, which settings, which entries, which
labels the records already stored carry, and the manifest at the end.

An append takes its labels the way the store did: from class folders into a
store converted from class folders, from a label file into one converted
from a label file; anything else would mix two labelling schemes in one
store, and is refused before anything is written; so is an unlabelled source
(bare pixel arrays) for a labelled store, and the other way round. Skipped files are counted
per source file across the conversion and its appends: a file skipped again
is not counted twice, and one stored since (mended, say) is no longer listed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.labelfile import LabelledFolder
from datakit.errors import ConversionError, Spelling
from datakit.format.fields.schema import Schema
from datakit.format.manifest import KEPT_SKIPPED_FILES, NO_LABEL, Manifest
from datakit.format.stats import Stats
from datakit.stores import is_mongodb_uri
from datakit.stores.conversion_state import AppendState, CommittedState, ConversionSettings
from datakit.stores.refusals import Described

__all__ = ["APPEND_RULES", "AppendPlan", "plan_append", "appended_manifest"]

APPEND_RULES = "append "
"""Prefix of an append's ``scan`` in its progress entry, before the scan rules of its source."""

_KIND_NAMES = {"folder": "an image folder", "huggingface": "a Hugging Face dataset",
               "webdataset": "WebDataset shards", "datakit": "a datakit store",
               "coco": "an images folder with COCO annotation files"}


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
                store: Described) -> AppendPlan:
    """Plan adding ``folder`` to the store read back as ``appended``.

    Args:
        appended: the store, from :meth:`~datakit.stores.contract.StoreWriter.append_state`.
        folder: the scanned source (a folder, or a label file's entries).
        rules: the scan rules of ``folder`` (recorded, so that an interrupted
            append is finished from the same kind of source).
        multi_label: ``folder`` comes from a multi-label file.
        store: the store, for messages.

    Raises:
        ConversionError: the source does not fit the store (several labels
            per image for a single-label store, a new class for a multi-label
            one), or an unfinished append into it came from another source
            (or the same one read otherwise: other labels or extensions).
    """
    where = store.describe()
    before = appended.manifest
    multi = before.multi_label
    _check_label_origin(before, folder, where)
    _check_same_fields(before, folder, where)
    _check_labelled(before, folder, where)
    if multi_label and not multi:
        raise ConversionError(f"{where} is a single-label store; a label file giving images several "
                              "classes cannot be appended to it (convert a new store instead)")
    interrupted = appended.interrupted
    known = list(interrupted.settings.classes if interrupted is not None else before.classes)
    new = [name for name in folder.classes if name not in known]
    if new and multi:
        raise ConversionError(f"{where} is a multi-label store, whose label rows have one column per "
                              f"class; an append cannot add the classes {new} to it (convert a new store)")
    classes = known + new
    settings = ConversionSettings(folder.root, classes, before.payload_kind, APPEND_RULES + rules,
                                  before.exif_transpose, before.max_side, before.quality, before.label_kind,
                                  before.sample_fields.to_json())
    if interrupted is not None:
        if (not _same_source(interrupted.settings.source, settings.source)
                or interrupted.settings.scan != settings.scan or interrupted.settings.classes != classes):
            raise _unfinished_elsewhere(interrupted, before, folder.root, store)
        stats = interrupted.stats
    else:
        stats = Stats.from_dict(before.stats.to_dict(), where)  # a copy the commits advance
        stats.class_counts.extend([0] * len(new))
    position = [classes.index(name) for name in folder.classes]
    entries = []
    for entry in folder.entries:
        indices = tuple(sorted(position[index] for index in entry.classes))
        label = indices[0] if indices else NO_LABEL if folder.unlabelled else position[entry.label]
        entries.append(dataclasses.replace(entry, label=label, classes=indices))
    labels: list[Any] = list(appended.labels)
    if multi:
        by_path = {entry.path: entry.classes for entry in entries}
        old = [tuple(np.flatnonzero(row).tolist()) for row in appended.table]
        # records an interrupted append committed came from this source (its scan matched)
        labels = old + [by_path[path] for path in appended.sources[before.length:]]
    state = CommittedState(settings, stats, list(appended.sources), list(appended.labels))
    return AppendPlan(settings, state, entries, labels, before)


def _same_source(stored: str, given: str) -> bool:
    """Whether two sources are the same folder (or the same URI): an unfinished append's records
    are paths relative to its own source, so only that source may finish it."""
    if stored == given or is_mongodb_uri(stored) or is_mongodb_uri(given):
        return stored == given
    return os.path.realpath(stored) == os.path.realpath(given)


def _unfinished_elsewhere(interrupted: CommittedState, before: Manifest, root: str,
                          store: Described) -> ConversionError:
    """The refusal of an append onto an unfinished one from another source, or from the same
    source read otherwise: the two ways out, each as a command."""
    source, arguments = interrupted.settings.source, store.command_arguments()
    return ConversionError.advising(
        "{where} holds an unfinished append from {source} ({written} record(s) written so far); finish it "
        "with {finish} and the same {labels} and {extensions} as then, or discard it and append from "
        "{root} with {discard}", where=store.describe(), source=source,
        written=interrupted.stats.length - before.length, root=root,
        finish=Spelling(f"convert({source!r}, ..., append=True)",
                        f"`datakit convert {source} {arguments} --append`"),
        labels=Spelling("labels", "--labels"), extensions=Spelling("extensions", "--extensions"),
        discard=Spelling(f"convert({root!r}, ..., append=True, discard_unfinished=True)",
                         f"`datakit convert {root} {arguments} --append --discard-unfinished`"))


def _check_labelled(before: Manifest, folder: SourceFolder, where: str) -> None:
    """Refuse images without labels for a labelled store, and labelled ones for an unlabelled store."""
    if before.unlabelled and not folder.unlabelled:
        raise ConversionError(f"{where} is an unlabelled store (every label -1); the images of {folder.root} "
                              "come with labels, which it cannot hold (append them without --class or "
                              "--labels, or convert a new store)")
    if folder.unlabelled and not before.unlabelled:
        raise ConversionError(f"{where} is a labelled store; the pixel arrays of {folder.root} are "
                              "unlabelled (give their class with --class NAME or --labels FILE, or convert a "
                              "new store)")


def _check_label_origin(before: Manifest, folder: SourceFolder, where: str) -> None:
    """Refuse a source whose labels come from elsewhere than the store's (folders, or a label file),
    or a source of another kind (a folder appended to a store of WebDataset shards)."""
    if folder.kind != before.source_kind:
        raise ConversionError(
            f"{where} was converted from {_KIND_NAMES.get(before.source_kind, before.source_kind)}; an "
            f"append to it comes from one too, not from {_KIND_NAMES.get(folder.kind, folder.kind)} "
            f"({folder.root}); convert a new store instead")
    from_file = isinstance(folder, LabelledFolder)
    if bool(before.label_file) == from_file:
        return
    if before.label_file:
        raise ConversionError.advising(
            "{where} takes its labels from the label file {store_file}, not from class folders; an append "
            "to it takes them from a label file too: pass {labels} (or convert a new store)", where=where,
            store_file=before.label_file, labels=Spelling("labels=FILE", "--labels FILE"))
    raise ConversionError.advising(
        "{where} takes its labels from its class folders, not from a label file; an append to it takes "
        "them from class folders too: append without {labels} (or convert a new store)", where=where,
        labels=Spelling("labels", "--labels"))


def _check_same_fields(before: Manifest, folder: SourceFolder, where: str) -> None:
    """An append brings the store's own fields, each of the same type and options.

    Raises:
        ConversionError: naming the first field that differs.
    """
    stored = {spec.name: spec.to_json() for spec in before.sample_fields.fields}
    given = folder.schema or Schema.classification(before.sample_fields.label is not None)
    brought = {spec.name: spec.to_json() for spec in given.fields}
    for name in [*stored, *(name for name in brought if name not in stored)]:
        if stored.get(name) != brought.get(name):
            raise ConversionError(
                f"{where} has the fields {', '.join(stored)}; this source's field {name!r} is "
                + ("not among them" if name not in stored else "missing" if name not in brought
                   else f"{brought[name]} where the store has {stored[name]}")
                + ": an append brings the store's own fields (convert a new store for other ones)")


def appended_manifest(plan: AppendPlan, skipped: Sequence[list[str]], label_file: str) -> Manifest:
    """The manifest of the grown store: the old one, with the new classes, totals and
    skipped files, and an entry in its ``appends`` history.

    ``skipped`` is this append's ``[path, reason]`` list (skipped, then ignored
    files). Each path is listed once, with its latest reason, and not at all
    once the store holds it. Skips beyond the :data:`KEPT_SKIPPED_FILES` an
    earlier run listed are known only by their count, which is carried over.
    """
    before = plan.before
    again = {path for path, reason in skipped if not _ignored(reason)}
    held = set(plan.state.sources) | {entry.path for entry in plan.entries if entry.path not in again}
    merged: dict[str, str] = {}
    for path, reason in [*before.skipped_files, *skipped]:
        merged[path] = reason  # a path keeps its first place and takes its latest reason
    listed = [[path, reason] for path, reason in merged.items() if path not in held]
    unlisted_skips = max(0, before.skipped - sum(not _ignored(reason) for _, reason in before.skipped_files))
    history = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "added": plan.state.stats.length - before.length, "source": plan.settings.source,
               "label_file": label_file}
    return dataclasses.replace(
        before, classes=list(plan.settings.classes), stats=plan.state.stats,
        skipped=unlisted_skips + sum(not _ignored(reason) for _, reason in listed),
        skipped_files=listed[:KEPT_SKIPPED_FILES],
        skipped_files_omitted=before.skipped_files_omitted + max(0, len(listed) - KEPT_SKIPPED_FILES),
        appends=[*before.appends, history])


def _ignored(reason: str) -> bool:
    """Whether a listed file was ignored (not an image by extension, not named) rather than skipped."""
    return reason.startswith("ignored")
