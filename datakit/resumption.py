"""Whether an interrupted conversion can be finished by this one.

``resume`` continues a store from its conversion progress, so the run that
finishes it must store the same kind of records (payload, EXIF handling,
downscaling), from the same kind of source (a folder or a label file, the
same file), with the same classes and the same file order; anything else
would mix two conversions in one store. The check names what differs and
the option that would agree.
"""

from __future__ import annotations

from datakit.errors import ConversionError
from datakit.source import SourceFolder, legacy_order_matches
from datakit.stores.base import CommittedState, ConversionSettings

__all__ = ["check_resumable"]

_LABELS_RULES = "labels "  # how label_scan_rules() names a label file's order


def _downscaling(settings: ConversionSettings) -> str:
    if not settings.max_side:
        return "no --max-side"
    return f"--max-side {settings.max_side} --quality {settings.quality}"


def check_resumable(state: CommittedState, wanted: ConversionSettings, where: str,
                    folder: SourceFolder) -> None:
    stored = state.settings
    if stored.payload_kind != wanted.payload_kind:
        raise ConversionError(
            f"{where} was started with --format {stored.payload_kind}; resume with the same "
            "format, or start again with --overwrite"
        )
    if stored.exif_transpose != wanted.exif_transpose:
        raise ConversionError(
            f"{where} was started {'with' if stored.exif_transpose else 'without'} --exif-transpose; "
            "resume with the same option, or start again with --overwrite"
        )
    if (stored.max_side, stored.quality) != (wanted.max_side, wanted.quality):
        raise ConversionError(
            f"{where} was started with {_downscaling(stored)}, this conversion asks for "
            f"{_downscaling(wanted)}; resume with the same options, or start again with --overwrite"
        )
    labelled = (stored.scan.startswith(_LABELS_RULES), wanted.scan.startswith(_LABELS_RULES))
    if any(labelled) and stored.scan != wanted.scan:
        if not labelled[0]:
            advice = "was started without --labels; resume without it"
        elif not labelled[1]:
            advice = "was started with --labels FILE; resume with the same file, unchanged"
        else:
            advice = ("was started with another label file, or this one changed since; resume with the "
                      "same --labels file, unchanged")
        raise ConversionError(f"{where} {advice}, or start again with --overwrite")
    if stored.classes != wanted.classes:
        raise ConversionError(
            f"{where} was started from a folder with classes {stored.classes}, but "
            f"{wanted.source} has {wanted.classes}; resume from the same folder, "
            "or start again with --overwrite"
        )
    if stored.scan == wanted.scan or not state.sources:  # nothing stored yet: no order to keep
        return
    if not stored.scan:
        if legacy_order_matches(folder):  # an older datakit, which ordered these files the same way
            return
        raise ConversionError(
            f"{where} was started by an earlier datakit, which took .gif files and ordered the "
            f"images of nested folders differently from ImageFolder; resuming would mix the two "
            f"orders. Start again with --overwrite (or finish it with the datakit that started it)"
        )
    raise ConversionError(
        f"{where} was started with the files chosen and ordered by {stored.scan!r}, this "
        f"conversion's are {wanted.scan!r} ('+.gif' means --extensions .gif); resume with the "
        "same --extensions, or start again with --overwrite"
    )
