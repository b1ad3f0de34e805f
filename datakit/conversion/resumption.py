"""Whether an interrupted conversion can be finished by this one.

``resume`` continues a store from its conversion progress, so the run that
finishes it must store the same kind of records (payload, EXIF handling,
downscaling), from the same kind of source (a folder or a label file, the
same file), with the same classes and the same file order; anything else
would mix two conversions in one store. The check names what differs and
the option that would agree.

Two rules changed under stores that may be half written, and such stores
still resume the way they were started: a label file's integer labels were
sorted as text before they were sorted as numbers (the stored class order is
kept, :func:`datakit.conversion.sources.labelfile.in_class_order`), and a symlink back up the
folder was followed before it was skipped (a store that holds records found
through one is refused; one that does not resumes as if started today).
"""

from __future__ import annotations

from typing import Any

from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.folder import legacy_order_matches
from datakit.errors import ConversionError, Spelling, option
from datakit.format.fields.schema import Schema
from datakit.stores.conversion_state import CommittedState, ConversionSettings

__all__ = ["check_resumable"]

_LABELS_RULES = "labels "  # how label_scan_rules() names a label file's order
_DATASET_RULES = ("huggingface ", "webdataset ", "datakit ", "coco ", "fields ")
"""How the scan rules of sources other than folders begin: their entries are pinned by their files' digest."""
_OVERWRITE = option("overwrite")


def _downscaling(settings: ConversionSettings) -> Spelling:
    if not settings.max_side:
        return Spelling("max_side=None", "no --max-side")
    spelled = option("max_side", settings.max_side), option("quality", settings.quality)
    return Spelling(", ".join(each.python for each in spelled),
                    " ".join(each.command_line for each in spelled))


def _fields_of(settings: ConversionSettings) -> list[dict[str, Any]]:
    """The settings' schema; a conversion started before schemas were recorded read an image and a label."""
    return settings.schema or Schema.classification(settings.label_kind != "none").to_json()


def _named(schema: list[dict[str, Any]]) -> str:
    return ", ".join(f"{field['name']} ({field['type']})" for field in schema)


def check_resumable(state: CommittedState, wanted: ConversionSettings, where: str,
                    folder: SourceFolder) -> None:
    """Refuse to finish the conversion read back as ``state`` with ``wanted`` from ``folder``.

    Raises:
        ConversionError: they disagree; the message names the option that would agree.
    """
    _check_records_alike(state.settings, wanted, where)
    _check_same_source(state, wanted, where, folder)


def _check_records_alike(stored: ConversionSettings, wanted: ConversionSettings, where: str) -> None:
    """The records of both runs must be stored alike: payload, EXIF handling, downscaling."""
    if stored.payload_kind != wanted.payload_kind:
        raise ConversionError.advising(
            "{where} was started with {format}; resume with the same format, or start again with "
            "{overwrite}", where=where, format=option("format", stored.payload_kind), overwrite=_OVERWRITE)
    if stored.exif_transpose != wanted.exif_transpose:
        started = (Spelling("with exif_transpose=True", "with --exif-transpose") if stored.exif_transpose
                   else Spelling("with exif_transpose=False", "without --exif-transpose"))
        raise ConversionError.advising(
            "{where} was started {started}; resume with the same option, or start again with {overwrite}",
            where=where, started=started, overwrite=_OVERWRITE)
    stored_fields, wanted_fields = _fields_of(stored), _fields_of(wanted)
    if stored_fields != wanted_fields:
        raise ConversionError.advising(
            "{where} was started with the fields {stored}, this conversion reads {wanted}; convert the same "
            "source, or start again with {overwrite}", where=where, stored=_named(stored_fields),
            wanted=_named(wanted_fields), overwrite=_OVERWRITE)
    if stored.boxes != wanted.boxes:
        raise ConversionError.advising("{where} was started with {stored}; resume with the same option, or "
                                       "start again with {overwrite}", where=where,
                                       stored=option("boxes", stored.boxes), overwrite=_OVERWRITE)
    if (stored.max_side, stored.quality) != (wanted.max_side, wanted.quality):
        raise ConversionError.advising(
            "{where} was started with {stored}, this conversion asks for {wanted}; resume with the "
            "same options, or start again with {overwrite}", where=where, stored=_downscaling(stored),
            wanted=_downscaling(wanted), overwrite=_OVERWRITE)


def _check_same_source(state: CommittedState, wanted: ConversionSettings, where: str,
                       folder: SourceFolder) -> None:
    """Both runs must take the same files, in the same order, with the same classes."""
    stored = state.settings
    if stored.scan != wanted.scan and (stored.scan.startswith(_DATASET_RULES)
                                       or wanted.scan.startswith(_DATASET_RULES)):
        raise ConversionError.advising(
            "{where} was started from {source}, read as {stored!r}; this conversion reads {wanted_source} as "
            "{wanted!r} (the source's kind, its columns or label file, or its data files' names, sizes or "
            "modification times differ); resume from the same, unchanged source with the same options, or "
            "start again with {overwrite}", where=where, source=stored.source, stored=stored.scan,
            wanted_source=wanted.source, wanted=wanted.scan, overwrite=_OVERWRITE)
    labelled = (stored.scan.startswith(_LABELS_RULES), wanted.scan.startswith(_LABELS_RULES))
    if any(labelled) and stored.scan != wanted.scan:
        if not labelled[0]:
            advice = "was started without {labels}; resume without it"
        elif not labelled[1]:
            advice = "was started with {labels_file}; resume with the same file, unchanged"
        else:
            advice = ("was started with another label file, or this one changed since; resume with the "
                      "same {labels} file, unchanged")
        raise ConversionError.advising("{where} " + advice + ", or start again with {overwrite}", where=where,
                                       labels=Spelling("labels", "--labels"),
                                       labels_file=Spelling("labels=FILE", "--labels FILE"),
                                       overwrite=_OVERWRITE)
    # The same label file names the same classes; an earlier datakit may have sorted them otherwise.
    same_classes = sorted(stored.classes) == sorted(wanted.classes) if labelled[0] else \
        stored.classes == wanted.classes
    if not same_classes:
        raise ConversionError.advising(
            "{where} was started from a folder with classes {stored}, but {source} has {wanted}; resume "
            "from the same folder, or start again with {overwrite}", where=where, stored=stored.classes,
            source=wanted.source, wanted=wanted.classes, overwrite=_OVERWRITE)
    _check_no_records_through_loops(state, where, folder)
    if stored.scan == wanted.scan or not state.sources:  # nothing stored yet: no order to keep
        return
    _check_older_rules(stored, wanted, where, folder)


def _check_no_records_through_loops(state: CommittedState, where: str, folder: SourceFolder) -> None:
    """A store an earlier datakit filled through a symlink loop would mix that walk with today's."""
    for loop in folder.loops:
        inside = loop.path + "/"
        through = next((path for path in state.sources if path.startswith(inside)), None)
        if through is not None:
            raise ConversionError.advising(
                "{where} holds {path}, found through {loop}, a symlink back up the folder that this "
                "datakit does not follow; resuming would mix two walks of the folder. Start again with "
                "{overwrite}", where=where, path=through, loop=loop.path, overwrite=_OVERWRITE)


def _check_older_rules(stored: ConversionSettings, wanted: ConversionSettings, where: str,
                       folder: SourceFolder) -> None:
    """Files were chosen or ordered by other rules (older, or other ``extensions``)."""
    if not stored.scan:
        if legacy_order_matches(folder):  # an older datakit, which ordered these files the same way
            return
        raise ConversionError.advising(
            "{where} was started by an earlier datakit, which took .gif files and ordered the images of "
            "nested folders differently from ImageFolder; resuming would mix the two orders. Start again "
            "with {overwrite} (or finish it with the datakit that started it)", where=where,
            overwrite=_OVERWRITE)
    raise ConversionError.advising(
        "{where} was started with the files chosen and ordered by {stored!r}, this conversion's are "
        "{wanted!r} ('+.gif' means {gif}); resume with the same {extensions}, or start again with "
        "{overwrite}", where=where, stored=stored.scan, wanted=wanted.scan,
        gif=Spelling("extensions=['.gif']", "--extensions .gif"),
        extensions=Spelling("extensions", "--extensions"), overwrite=_OVERWRITE)
