"""What a conversion did: the report :func:`datakit.convert` returns.

The report is plain data (``datakit convert --json`` prints :meth:`ConversionReport.to_dict`);
the scan starts it (:func:`scanned_report`), the numbering stage fills it in. Its
skipped and ignored files are also what the manifest keeps for ``datakit inspect --skipped``
(:func:`listed_skips`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from datakit.conversion.sources.coco.source import CocoFolder
from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.labelfile import LabelledFolder
from datakit.errors import ConversionError, SourceError

__all__ = ["SkippedFile", "ConversionReport", "scanned_report", "checked", "listed_skips", "nothing_stored"]

_SHOWN_REASONS = 3
_BOX_COUNTS = ("outside", "degenerate", "clipped", "dropped")


@dataclass(frozen=True)
class SkippedFile:
    """A source file that was not stored, and why."""

    path: str
    reason: str


@dataclass
class ConversionReport:
    """What a conversion did.

    Attributes:
        source: the image folder.
        destination: the store.
        written: records written by this run.
        total: records in the store when the run ended.
        resumed_from: records the store already held when the run started.
        skipped: files that could not be stored, each with its reason.
        ignored: files that are not images by extension, or outside any class folder.
        empty_classes: class folders without any image.
        bytes_written: payload bytes written by this run.
        seconds: wall time of the run.
        complete: whether the store ended complete (it does unless interrupted).
        already_complete: ``resume`` found the store complete and did nothing.
        exif_oriented: images written by this run whose EXIF orientation is
            not 1: stored as in the file, or upright with ``exif_transpose``.
        high_bit_depth: images written by this run with 16-bit or float
            pixels, which decoding scales to 8 bits.
        exif_transpose: whether images were stored upright.
        downscaled: images written by this run stored resized under ``max_side``.
        max_side: the ``max_side`` of the conversion, or 0.
        label_file: the label file the labels came from, or ``""``.
        unlisted: images under the source folder that the label file does not
            name (not converted).
        appended_to: with ``append``, the records the store held before the
            append began (``None`` for a conversion).
        held_elsewhere: with ``append``, images of the source not appended
            because the store holds a record with their relative path from
            another folder (appends match images by relative path).
        discarded: records of an unfinished append that ``discard_unfinished``
            rolled back before this append began (0: none).
        discarded_from: the source of that unfinished append (``""``: none).
        resumed_nothing: ``resume`` found no store at the destination and
            converted a new one (as after a conversion killed before it wrote anything).
        standalone_names: the paths of ``skipped``, ``unlisted`` and ``ignored`` are
            entry names of an existing store (``old.lmdb/42``), not paths under ``source``.
        splits: the rows of each split of a Hugging Face ``DatasetDict`` that
            was converted, in order (every split unless ``split`` chose); empty
            for other sources.
        annotation_files: the COCO annotation files the images and their
            annotations came from (``coco``); empty for other sources.
        unannotated: images the COCO annotation files list without any
            annotation or caption: stored all the same, as negatives.
        boxes: boxes this run wrote or mended that lie outside their image
            (``outside``) or have no size or a NaN coordinate (``degenerate``),
            kept as given; or that ``boxes="clip"`` moved inside (``clipped``)
            or ``boxes="drop"`` left out (``dropped``). Only counts above 0.
    """

    source: str
    destination: str
    written: int = 0
    total: int = 0
    resumed_from: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    empty_classes: list[str] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0
    complete: bool = False
    already_complete: bool = False
    exif_oriented: int = 0
    high_bit_depth: int = 0
    exif_transpose: bool = False
    downscaled: int = 0
    max_side: int = 0
    label_file: str = ""
    unlisted: list[str] = field(default_factory=list)
    appended_to: int | None = None
    held_elsewhere: list[str] = field(default_factory=list)
    discarded: int = 0
    discarded_from: str = ""
    resumed_nothing: bool = False
    standalone_names: bool = False
    splits: dict[str, int] = field(default_factory=dict)
    annotation_files: list[str] = field(default_factory=list)
    unannotated: int = 0
    boxes: dict[str, int] = field(default_factory=dict)

    @property
    def images_per_second(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    def count_boxes(self, measured: dict[str, dict[str, Any]] | None) -> None:
        """Add one record's field statistics' box counts (:attr:`boxes`)."""
        for totals in (measured or {}).values():
            for key in _BOX_COUNTS:
                if totals.get(key):
                    self.boxes[key] = self.boxes.get(key, 0) + totals[key]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["images_per_second"] = round(self.images_per_second, 1)
        return data


def scanned_report(folder: SourceFolder, where: str, exif_transpose: bool, max_side: int) -> ConversionReport:
    """The report as the scan of ``folder`` leaves it: what was ignored, empty or unreadable."""
    report = ConversionReport(folder.root, where, ignored=folder.ignored,
                              empty_classes=folder.empty_classes(), exif_transpose=exif_transpose,
                              max_side=max_side, standalone_names=folder.standalone_names,
                              splits=dict(folder.splits))
    if isinstance(folder, LabelledFolder):
        report.label_file, report.unlisted = folder.label_file, folder.unlisted
    if isinstance(folder, CocoFolder):
        report.annotation_files, report.unannotated = folder.annotation_files, folder.unannotated
    report.skipped.extend(SkippedFile(item.path, f"folder not readable ({item.reason})")
                          for item in folder.unreadable)
    report.skipped.extend(SkippedFile(loop.path, f"folder not followed (a symlink to "
                                      f"{os.path.normpath(os.path.join(folder.root, loop.target))}, which "
                                      "contains it: ImageFolder would store its images again)")
                          for loop in folder.loops)
    report.skipped.extend(SkippedFile(name, reason) for name, reason in folder.rejected)
    return report


def checked(report: ConversionReport, strict: bool) -> ConversionReport:
    """``report``, or with ``strict`` a :class:`ConversionError` when anything was skipped
    (raised after the store is complete, so a strict run loses none of its work)."""
    if strict and report.skipped:
        raise ConversionError(
            f"{len(report.skipped)} file(s) or folder(s) were skipped (the store is complete without them): "
            + "; ".join(f"{item.path}: {item.reason}" for item in report.skipped[:5])
        )
    return report


def nothing_stored(report: ConversionReport) -> SourceError:
    """The error of a conversion that would end with no record: every image was skipped (the first
    few named, with their reasons), or the source held none."""
    skipped = report.skipped
    if not skipped:
        return SourceError(f"{report.source}: nothing to convert, it holds no image")
    shown = "; ".join(f"{item.path}: {item.reason}" for item in skipped[:_SHOWN_REASONS])
    more = f"; and {len(skipped) - _SHOWN_REASONS} more" if len(skipped) > _SHOWN_REASONS else ""
    return SourceError(f"{report.source}: no image could be stored, {len(skipped)} file(s) were skipped "
                       f"({shown}{more}); no store was written")


def listed_skips(report: ConversionReport) -> list[list[str]]:
    """``[path, reason]`` of every skipped file and folder, then of every ignored file."""
    listed = [[item.path, item.reason] for item in report.skipped]
    listed.extend([path, "ignored: not an image by extension" if "/" in path
                   else "ignored: outside any class folder"] for path in report.ignored)
    listed.extend([path, "ignored: not named in the label file"] for path in report.unlisted)
    return listed
