"""Conversion's reading stage: each source entry read, checked and sealed as a record, in order.

The entries of a chunk are read by one reader process (:mod:`datakit.conversion.reader_pool`)
or, with one worker, in the converting process itself: their bytes from the
source (a file, a tar member, a dataset row: :mod:`datakit.conversion.sources.files`),
then the same checks for all (:func:`~datakit.conversion.images.checks.check_source_image`).
An entry that cannot be stored becomes an outcome with the reason, never an exception.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from datakit.conversion.fields import FieldOptions, seal_with_fields
from datakit.conversion.file_reads import pixel_limit_for_reads
from datakit.conversion.images.checks import BadImage, ImageOptions, check_source_image, pixel_image
from datakit.conversion.images.downscale import DEFAULT_QUALITY
from datakit.conversion.images.pixels import FramedPixels
from datakit.conversion.reader_pool import ReaderPool
from datakit.conversion.sources.entries import SourceEntry
from datakit.conversion.sources.files import EntryBytes
from datakit.format.records import PayloadKind, seal_record
from datakit.stores.conversion_state import ConversionSettings

__all__ = ["ReadOptions", "ReadOutcome", "read_pending", "read_images", "usable_cpus", "too_many_readers"]

CHUNK = 16
"""Source files per task sent to a reader process."""


@dataclass(frozen=True)
class ReadOptions:
    """Everything a reader process needs, sent once when it starts.

    Attributes:
        source: how the entries' bytes are read (opened in each reader process).
        image: how each image is checked and stored.
        multi_label: the records carry several classes (a multi-label file).
        fields: the fields beyond the image and its label, and where their
            values come from (:mod:`datakit.conversion.fields`); None for a
            classification store.
    """

    source: EntryBytes
    image: ImageOptions
    multi_label: bool = False
    fields: FieldOptions | None = None


@dataclass(frozen=True)
class ReadOutcome:
    """One source file read: its record and what the manifest counts, or the reason it was skipped."""

    entry: SourceEntry
    record: bytearray | None = None
    image_format: str = ""
    width: int = 0
    height: int = 0
    payload_bytes: int = 0
    error: str = ""
    orientation: int = 1
    high_bit_depth: bool = False
    downscaled: bool = False
    field_stats: dict[str, dict[str, Any]] | None = None
    document: dict[str, Any] | None = None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; a container's share, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def too_many_readers(workers: int, files: int) -> str | None:
    """The warning for more reader processes than usable CPUs, or ``None``.

    The caller warns (:func:`datakit.convert`, so that the warning names its
    caller's line): ``read_images`` runs as a generator, at no line of the user's.
    """
    cpus = usable_cpus()
    if workers <= cpus or files <= CHUNK:  # a few files are read in this process
        return None
    return (f"{workers} reader processes for {cpus} usable CPU(s): the extra ones only compete for them, "
            "so the conversion gets no faster (the default is one per CPU)")


def read_pending(entries: Sequence[SourceEntry], source: EntryBytes, settings: ConversionSettings,
                 verify: bool, max_pixels: int, workers: int | None,
                 fields: FieldOptions | None = None) -> Iterator[ReadOutcome]:
    """The reading stage of a conversion: :func:`read_images` with the store's own payload, EXIF,
    size and label settings, and by default one reader per usable CPU when images are decoded
    (``verify``, or raw pixels), else one: reading a file and its header is cheaper than sending
    its bytes between processes."""
    kind = PayloadKind.RAW if settings.payload_kind == PayloadKind.RAW.label else PayloadKind.ENCODED
    image = ImageOptions(kind, verify, max_pixels, settings.exif_transpose, settings.max_side or None,
                         settings.quality or DEFAULT_QUALITY)
    decodes = verify or kind is PayloadKind.RAW
    return read_images(entries, ReadOptions(source, image, settings.label_kind == "multi", fields),
                       workers or (usable_cpus() if decodes else 1))


def read_images(entries: Sequence[SourceEntry], options: ReadOptions,
                 workers: int) -> Iterator[ReadOutcome]:
    """Read and encode ``entries`` in order, with up to ``workers`` processes
    (:mod:`datakit.conversion.reader_pool`)."""
    read_chunk = functools.partial(_read_chunk, entries, options)
    starts = range(0, len(entries), CHUNK)
    chunks = (list(range(start, min(len(entries), start + CHUNK))) for start in starts)
    if workers == 1 or len(entries) <= CHUNK:
        try:
            for chunk in chunks:
                yield from read_chunk(chunk)
        finally:
            options.source.close()  # what this process opened to read
            if options.fields is not None:
                options.fields.source.close()
        return
    for outcomes in ReaderPool(read_chunk, workers).map(chunks):
        yield from outcomes


def _read_chunk(entries: Sequence[SourceEntry], options: ReadOptions,
                indices: list[int]) -> list[ReadOutcome]:
    """Read the files at ``indices`` of ``entries`` (in a reader process, or in this one)."""
    chunk = [entries[index] for index in indices]
    options.source.prefetch(chunk)
    with _pillow_pixel_limit(options.image.max_pixels), pixel_limit_for_reads(options.image.max_pixels):
        return [_read_one(entry, options) for entry in chunk]


@contextlib.contextmanager
def _pillow_pixel_limit(max_pixels: int) -> Iterator[None]:
    """Pillow's own decompression-bomb limit set to ``max_pixels`` while reading.

    Pillow refuses to open an image over ``Image.MAX_IMAGE_PIXELS`` (its
    default is datakit's), whatever :func:`read_source_image` was told, so a
    raised ``max_pixels`` must raise Pillow's limit too. Restored afterwards:
    with one reader the calling process is the user's.
    """
    from PIL import Image

    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = previous


def _read_one(entry: SourceEntry, options: ReadOptions) -> ReadOutcome:
    try:
        framed = options.source.read(entry)
        if isinstance(framed, FramedPixels):
            image = pixel_image(framed, options.image)
        else:
            image = check_source_image(framed, options.image)
    except BadImage as exc:
        return ReadOutcome(entry, error=str(exc))
    stats = document = None
    if options.fields is not None:
        try:
            sealed = seal_with_fields(image, entry, entry.label, options.fields, options.image)
        except BadImage as exc:
            return ReadOutcome(entry, error=str(exc))
        record, stats, document = sealed.record, sealed.stats, sealed.document
    else:
        record = seal_record(image.framed, kind=image.kind, label=entry.label,
                             multi_label=options.multi_label, width=image.width, height=image.height,
                             channels=image.channels)
    return ReadOutcome(entry, record, image.image_format, image.width, image.height,
                       len(image.payload), orientation=image.orientation, high_bit_depth=image.high_bit_depth,
                       downscaled=image.downscaled, field_stats=stats, document=document)
