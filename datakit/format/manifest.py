"""The manifest: what a store holds, written in the conversion's last commit.

A store without a manifest is incomplete, and readers refuse it. The manifest
is JSON (never pickle) and is validated field by field when read, so a damaged
or hostile manifest is reported as a :class:`~datakit.errors.StoreError`
instead of surfacing as a ``KeyError`` deep inside a training job.

Record keys are derived from the sample index (:func:`record_key`), so a
reader needs no list of keys: ``__keys__`` in the manifest describes the
scheme instead of enumerating it.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from datakit.errors import CorruptRecordError, StoreError
from datakit.format.bounds import (
    MAX_SIDE,
    check_count,
)
from datakit.format.fields.base import FieldError
from datakit.format.fields.schema import Schema
from datakit.format.fields.stats import check_field_stats
from datakit.format.records import (
    FIELDS_VERSION,
    KEY_DIGITS,
    MULTI_LABEL_VERSION,
    NO_LABEL,
    SINGLE_LABEL_VERSION,
    PayloadKind,
    Record,
    check_format_version,
    record_key,
)
from datakit.format.stats import Stats, check_stats
from datakit.format.typed_json import build_checked
from datakit.version import __version__

__all__ = ["KEY_DIGITS", "KEPT_SKIPPED_FILES", "LABEL_KINDS", "NO_LABEL", "record_key", "new_store_id",
           "Stats", "Manifest", "check_stats", "source_spans", "check_record"]


KEPT_SKIPPED_FILES = 1000
"""At most this many skipped and ignored files are listed in a manifest (the rest are counted)."""

LABEL_KINDS = ("single", "multi", "none")
"""A manifest's ``label_kind``s: one class per record, several, or none (an unlabelled store)."""



_ABSENT: dict[str, Any] = {"store_id": ""}
"""What a field added later reads as in a manifest written before it, where that is not the
field's default: a new manifest draws a fresh store id, an old store has none."""


def new_store_id() -> str:
    """A fresh, random store id: 32 hex digits (:attr:`Manifest.store_id`)."""
    return uuid.uuid4().hex


@dataclass
class Manifest:
    """Everything a reader needs to know about a complete store.

    Attributes:
        length: number of records; keys are ``record_key(0) .. record_key(length - 1)``.
        classes: class names, sorted; a label is an index into this list.
        payload_kind: ``"encoded"`` (source bytes) or ``"raw"`` (decoded pixels).
        stats: counts, sizes and formats of the records.
        skipped: how many source files and folders were skipped as unreadable
            or broken (files ignored by their extension are not counted).
        source: the folder the store was converted from.
        created: ISO 8601 time the conversion finished, in UTC.
        datakit_version: the datakit that wrote the store.
        format_version: the record and manifest format version: 1 for a
            single-label store, 2 for a multi-label one (older datakits refuse it).
        keys: the key scheme (``{"scheme": "index", "digits": 10}``).
        skipped_files: ``[path, reason]`` of each skipped file or folder, then of
            each ignored file, for ``datakit inspect --skipped``; at most
            :data:`KEPT_SKIPPED_FILES` of them, the manifest travels with every dataset.
        skipped_files_omitted: how many more there were than that.
        exif_transpose: images with an EXIF orientation were stored upright
            (``datakit convert --exif-transpose``); false in older stores.
        max_side: images whose longer side exceeded this were stored resized
            to it (``--max-side``); 0 when sizes were kept.
        quality: the JPEG quality of those re-encoded (``--quality``); 0 with ``max_side`` 0.
        label_file: the label file the labels came from (``datakit convert --labels``);
            empty when they are the class folders' names, and in older stores.
        unlisted: images under ``source`` that the label file did not name, so
            were not converted; 0 without a label file.
        appends: one entry per ``datakit convert --append`` that grew the store:
            ``{"when": ISO time, "added": records, "source": folder, "label_file": path or ""}``.
        label_kind: ``"single"`` (a class index per record), ``"multi"`` (a
            multi-hot uint8 vector per record; ``class_counts`` then count the
            records carrying each class) or ``"none"`` (an unlabelled store: no
            classes, every label :data:`NO_LABEL`; a datakit older than this
            kind refuses the store as of an unknown label kind).
        class_order: how ``classes`` were sorted: ``"text"`` (folder names, as
            ``ImageFolder`` sorts them; and every store written before this
            field), or ``"numeric"`` (a label file whose labels are all
            integers). Classes new in an append come after them. A Hugging Face
            dataset's ``ClassLabel`` names keep the dataset's order ("text" here).
        source_kind: what ``source`` is: ``"folder"`` (image files; every store
            written before this field), ``"huggingface"`` (a ``datasets`` dataset
            on disk) or ``"webdataset"`` (tar shards). Appends come from the same kind.
        store_id: drawn at random for each conversion and kept by its appends, so
            that a dataset can tell the store it was built on from one that
            replaced it at the same location (``--overwrite``); ``""`` in a store
            written before this field.
        splits: the splits of a Hugging Face ``DatasetDict`` the records came
            from (``datakit convert --split``; every split without it), in order;
            empty for other sources, and in stores written before this field.
            Records are named ``<split>/<row>``, so ``datakit inspect`` counts each.
    """

    classes: list[str]
    payload_kind: str
    stats: Stats
    skipped: int
    source: str
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    datakit_version: str = __version__
    format_version: int = SINGLE_LABEL_VERSION
    keys: dict[str, Any] = field(default_factory=lambda: {"scheme": "index", "digits": KEY_DIGITS})
    skipped_files: list[list[str]] = field(default_factory=list)
    skipped_files_omitted: int = 0
    exif_transpose: bool = False
    max_side: int = 0
    quality: int = 0
    label_file: str = ""
    unlisted: int = 0
    label_kind: str = "single"
    appends: list[dict[str, Any]] = field(default_factory=list)
    class_order: str = "text"
    source_kind: str = "folder"
    store_id: str = field(default_factory=new_store_id)
    splits: list[str] = field(default_factory=list)
    schema: list[dict[str, Any]] = field(default_factory=list)

    @functools.cached_property
    def sample_fields(self) -> Schema:
        """The samples' fields (:mod:`datakit.format.fields`): the manifest's ``schema``, or for a store
        written before fields existed an image and its label (or, unlabelled, the image alone)."""
        if self.schema:
            return Schema.from_json(self.schema)
        return Schema.classification(self.label_kind != "none")

    @property
    def multi_label(self) -> bool:
        return self.label_kind == "multi"

    @property
    def unlabelled(self) -> bool:
        return self.label_kind == "none"

    @property
    def length(self) -> int:
        return self.stats.length

    def to_json(self) -> bytes:
        data = asdict(self)
        data["stats"] = self.stats.to_dict()
        data["length"] = self.length  # redundant, for people reading the raw manifest
        return json.dumps(data, ensure_ascii=False, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes | memoryview, where: str) -> Manifest:
        """Parse and validate a manifest read from the store at ``where``."""
        try:
            data = json.loads(bytes(raw).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{where}: the manifest is not valid JSON ({exc})") from None
        except RecursionError:
            raise StoreError(f"{where}: the manifest is nested too deeply to be a manifest") from None
        if not isinstance(data, dict):
            raise StoreError(f"{where}: the manifest is not a JSON object")
        version = data.get("format_version")
        if not isinstance(version, int):
            raise StoreError(f"{where}: the manifest has no integer format_version")
        check_format_version(version, where)
        redundant = data.pop("length", None)
        data["stats"] = Stats.from_dict(data.get("stats"), where)
        manifest = build_checked(cls, data, where, _ADDED_LATER, _ABSENT)
        if redundant is not None and (type(redundant) is not int or redundant != manifest.length):
            raise StoreError(f"{where}: manifest field 'length' is {redundant!r}, but 'stats.length' "
                             f"is {manifest.length}")
        _check_consistent(manifest, where)
        _check_schema(manifest, where)
        _check_numbers(manifest, where)
        return manifest


def _check_consistent(manifest: Manifest, where: str) -> None:
    if not all(type(item) is dict and type(item.get("when")) is str and type(item.get("added")) is int
               and type(item.get("source")) is str and type(item.get("label_file")) is str
               for item in manifest.appends):
        raise StoreError(f"{where}: manifest field 'appends' should be append records")
    if manifest.payload_kind not in {kind.label for kind in PayloadKind}:
        raise StoreError(f"{where}: unknown payload kind {manifest.payload_kind!r} in the manifest")
    if len(manifest.stats.class_counts) != len(manifest.classes):
        raise StoreError(f"{where}: the manifest lists {len(manifest.classes)} classes but "
                         f"{len(manifest.stats.class_counts)} class counts")
    if manifest.label_kind not in LABEL_KINDS:
        raise StoreError(f"{where}: unknown label kind {manifest.label_kind!r} in the manifest")
    if manifest.class_order not in ("text", "numeric"):
        raise StoreError(f"{where}: unknown class order {manifest.class_order!r} in the manifest")
    if len(manifest.source_kind) > 40 or not manifest.source_kind.isidentifier():
        raise StoreError(f"{where}: malformed source kind {manifest.source_kind[:40]!r} in the manifest")
    if len(manifest.store_id) > 64 or (manifest.store_id and not manifest.store_id.isalnum()):
        raise StoreError(f"{where}: malformed store id {manifest.store_id[:64]!r} in the manifest")
    if manifest.multi_label and manifest.format_version < MULTI_LABEL_VERSION:
        raise StoreError(f"{where}: a multi-label manifest must have format version {MULTI_LABEL_VERSION} "
                         f"or later, not {manifest.format_version}")
    counts, length = manifest.stats.class_counts, manifest.length
    if manifest.unlabelled and manifest.classes:
        raise StoreError(f"{where}: the manifest of an unlabelled store lists classes")
    if manifest.unlabelled:
        fits = length >= 0
    elif manifest.multi_label:
        fits = length >= 0 and all(0 <= count <= length for count in counts) and sum(counts) >= length
    else:
        fits = sum(counts) == length and length >= 0
    if not fits:
        raise StoreError(f"{where}: the manifest's class counts ('stats.class_counts') do not add up to "
                         "its length")
    if manifest.unlisted < 0:
        raise StoreError(f"{where}: the manifest counts fewer than no unlisted images")
    if manifest.skipped_files_omitted < 0:
        raise StoreError(f"{where}: the manifest counts fewer than no omitted skipped files")
    if manifest.keys != {"scheme": "index", "digits": KEY_DIGITS}:
        raise StoreError(f"{where}: unknown key scheme {manifest.keys!r} in the manifest")


def _check_schema(manifest: Manifest, where: str) -> None:
    """The schema parses, and agrees with the format version and the labels."""
    if not manifest.schema:
        if manifest.format_version >= FIELDS_VERSION:
            raise StoreError(f"{where}: a manifest of format version {manifest.format_version} declares its "
                             "fields ('schema'); this one has none")
        return
    try:
        schema = Schema.from_json(manifest.schema)
    except FieldError as exc:
        raise StoreError(f"{where}: manifest field 'schema': {exc}") from None
    if not schema.is_classification and manifest.format_version < FIELDS_VERSION:
        raise StoreError(f"{where}: a store with fields beyond an image and a label has format version "
                         f"{FIELDS_VERSION}, not {manifest.format_version}")
    problem = check_field_stats(manifest.stats.fields, set(schema.names))
    if problem is not None:
        raise StoreError(f"{where}: manifest field 'stats.fields': {problem}")
    if schema.label is None and manifest.classes:
        raise StoreError(f"{where}: the manifest lists classes, but its schema has no label field")


def check_record(record: Record, key: str, position: int, manifest: Manifest, targets: np.ndarray) -> None:
    """Refuse a record whose header disagrees with the store's label table or size ranges.

    A record's checksum proves only that its bytes are the ones written, and a
    hostile store writes its own checksums. So before a record is decoded, its
    header is checked against what the store promises elsewhere: its label (or,
    in a multi-label store, its first class) against the label table that
    samplers and class statistics use, and its image size against the manifest's
    size ranges, from which ``datakit.DataLoader`` sizes its batch slots. Every
    read path and ``inspect --verify`` make the same checks here, so a record
    that fails one is refused by all of them, including ``output="bytes"``.

    Args:
        record: the decoded record (its checksum already checked).
        key: its key, named in the error.
        position: its index in the store.
        manifest: the store's manifest.
        targets: the store's label table, as datasets hold it (one label per
            record, or a multi-hot row per record in a multi-label store).

    Raises:
        CorruptRecordError: the header disagrees.
    """
    header = record.header
    if manifest.multi_label:  # the header holds the first class of the multi-hot row
        row = targets[position]
        if (header.version < MULTI_LABEL_VERSION or not 0 <= header.label < len(row)
                or not row[header.label] or row[:header.label].any()):
            raise CorruptRecordError(key, f"its label {header.label} (format version {header.version}) "
                                          f"disagrees with the store's multi-label table ({row.tolist()})")
    elif header.label != targets[position]:
        raise CorruptRecordError(key, f"its label {header.label} disagrees with the store's label table "
                                      f"({targets[position]})")
    widths, heights = manifest.stats.width_range, manifest.stats.height_range
    if not (widths and widths[0] <= header.width <= widths[1] and heights[0] <= header.height <= heights[1]):
        raise CorruptRecordError(key, f"its header says {header.width}x{header.height}, outside the "
                                      f"manifest's sizes (widths {widths}, heights {heights})")


def _check_numbers(manifest: Manifest, where: str) -> None:
    """Every number within what a conversion writes (:mod:`datakit.format.bounds`)."""
    check_stats(manifest.stats, where)
    length = manifest.length
    check_count(where, "skipped", manifest.skipped)
    check_count(where, "max_side", manifest.max_side, MAX_SIDE)
    check_count(where, "quality", manifest.quality, 100)
    for position, entry in enumerate(manifest.appends):
        check_count(where, f"appends[{position}].added", entry["added"], length)
    check_count(where, "appends[*].added (their sum)", sum(entry["added"] for entry in manifest.appends),
                length)  # the records they added are a part of the store's


def source_spans(manifest: Manifest) -> list[tuple[int, str]]:
    """Where the records came from: ``(first index, source)`` of the conversion, then of each
    append that added records, in index order. A record's source path is relative to the
    source of the last span starting at or before its index."""
    position = manifest.length - sum(entry["added"] for entry in manifest.appends)
    spans = [(0, manifest.source)]
    for entry in manifest.appends:
        if entry["added"]:
            spans.append((position, entry["source"]))
        position += entry["added"]
    return spans


_ADDED_LATER = frozenset({"schema", "exif_transpose", "max_side",
                          "quality", "label_file", "unlisted", "label_kind", "appends", "class_order",
                          "source_kind", "store_id", "skipped_files", "skipped_files_omitted", "splits"})
"""Fields a store written by an earlier datakit lacks (the first added without a version change,
``skipped_files``, among them: older datakits ignore them); their defaults apply."""
