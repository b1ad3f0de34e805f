"""``datakit.convert``: the conversion as the list of its stages, each a module of this package.

::

    scan the source    sources/scan.py tells the kind: sources/folder.py (ImageFolder's files and
                       order), sources/labelfile.py (a label file's), sources/huggingface.py (a
                       datasets dataset on disk), sources/webdataset.py (tar shards), sources/foreign/
                       (other tools' stores); all yield the same entries (sources/entries.py), whose
                       bytes their readers get (sources/files.py for files)
    check destination  destination.py: resolved, outside the source, then created, replaced
                       (overwrite), resumed (resumption.py checks it) or grown (appending.py)
    what this run adds run.py: the entries the store does not hold yet, the labels it holds
    read + verify      reading.py, in the reader processes of reader_pool.py: each file checked
                       (images/: checks.py, exif.py, pixels.py, downscale.py) and sealed as a record
    number, batch      numbering.py: consecutive indices, skipped files into the report (report.py)
    write              the backend's writer commits each batch atomically, with the running totals
    manifest           labels + manifest, written last: the store becomes complete

A bad file, or a folder that cannot be read, is skipped and reported by
name, never fatal; the names are kept in the manifest. Every commit is
atomic and carries the running totals, so a conversion killed at any moment
leaves a store that readers refuse as incomplete and that ``resume=True``
completes with every image exactly once.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from typing import Literal

from datakit.conversion.destination import check_outside_source, resolve_destination
from datakit.conversion.fields import BOX_POLICIES
from datakit.conversion.images.checks import DEFAULT_MAX_PIXELS
from datakit.conversion.images.downscale import DEFAULT_QUALITY
from datakit.conversion.numbering import COMMIT_RECORDS, ProgressCallback, batches, number, reporting
from datakit.conversion.reading import read_pending, too_many_readers
from datakit.conversion.report import ConversionReport, checked, scanned_report
from datakit.conversion.run import start_run
from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.foreign.layouts import StoreChoice
from datakit.conversion.sources.labelfile import LabelledFolder
from datakit.conversion.sources.scan import SourceChoice, scan_source
from datakit.errors import DatakitWarning
from datakit.format.fields.schema import Schema
from datakit.stores import given_options, is_mongodb_uri
from datakit.stores.contract import StoreSpec
from datakit.stores.conversion_state import ConversionSettings

__all__ = ["convert", "ProgressCallback"]


def convert(
    src: str | os.PathLike[str],
    dest: StoreSpec | str | os.PathLike[str],
    *,
    collection: str | None = None,
    database: str | None = None,
    workers: int | None = None,
    verify: bool = True,
    format: Literal["encoded", "raw"] = "encoded",
    resume: bool = False,
    overwrite: bool = False,
    strict: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    extensions: Sequence[str] = (),
    exif_transpose: bool = False,
    max_side: int | None = None,
    quality: int = DEFAULT_QUALITY,
    labels: str | os.PathLike[str] | None = None,
    append: bool = False,
    progress: ProgressCallback | None = None,
    commit_every: int = COMMIT_RECORDS,
    boxes: str = "keep",
    source_kind: str | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    class_name: str | None = None,
    index: str | os.PathLike[str] | None = None,
    source_collection: str | None = None,
) -> ConversionReport:
    """Pack the image folder (or Hugging Face dataset, or WebDataset shards) ``src`` into the store ``dest``.

    The images are ``ImageFolder``'s, in its order (see :mod:`datakit.conversion.sources.folder`),
    so index ``i`` of the store is sample ``i`` of
    ``torchvision.datasets.ImageFolder(src)``, minus the files skipped as broken.
    A Hugging Face dataset's rows, or WebDataset shards' samples, come in
    their order (:mod:`datakit.conversion.sources.scan`).

    Args:
        src: a folder laid out as ``src/<class>/**/<image>`` (``~`` is expanded);
            or a folder ``save_to_disk`` wrote, ``.parquet``/``.arrow`` files or
            a folder of them (Hugging Face); or ``.tar`` shards or a folder of
            them (WebDataset).
        dest: a filesystem path (LMDB) outside ``src``, a ``mongodb://`` URI, or
            a store spec (see :func:`resolve_destination`; ``collection`` and
            ``database`` then do not apply).
        collection: the MongoDB collection (default: the name of ``src``).
        database: the MongoDB database, when the URI names none.
        workers: reader processes; 1 reads in-process. By default the CPU
            count when images are decoded (``verify`` or ``format="raw"``),
            else 1: reading a file and its header is cheaper than sending
            its bytes between processes.
        verify: decode every image fully, not only its header (JPEGs cut short are skipped either way).
        format: ``"encoded"`` keeps each file's bytes untouched; ``"raw"``
            stores decoded RGB pixels, which cost more space and no decoding.
        resume: continue an interrupted conversion of ``src`` into ``dest``
            (starts a new one when ``dest`` does not exist).
        overwrite: replace a store already at ``dest``.
        strict: raise :class:`ConversionError` after finishing when any file
            was skipped.
        max_pixels: skip images with more pixels than this (Pillow's limit
            against decompression bombs by default).
        extensions: file extensions to take besides ``ImageFolder``'s
            (``[".gif"]``); matched case-insensitively.
        exif_transpose: store images with an EXIF orientation upright (raw
            pixels turned; encoded files re-encoded in their format, JPEG at
            quality 95), as ``PIL.ImageOps.exif_transpose`` turns them. By
            default files are stored as they are, as ``ImageFolder`` loads
            them; either way the report counts them.
        max_side: store images whose longer side exceeds this resized to it
            (JPEGs re-encoded at ``quality``, other formats as PNG); smaller
            images stay byte for byte (:mod:`datakit.conversion.images.downscale`).
        quality: JPEG quality of the downscaled JPEGs, 1 to 100.
        labels: a label file (CSV with the header ``path,label``, or JSON
            Lines of ``{"path": ..., "label": ...}``) naming the images to
            convert, relative to ``src``, and their classes; the classes are
            its labels, sorted (as numbers when every label is an integer,
            else as text), and the records come in its order. Images
            under ``src`` it does not name are not converted, and counted
            (:mod:`datakit.conversion.sources.labelfile`). For a Hugging Face dataset or
            WebDataset shards its paths are the entries' names
            (``train/00000012``, ``shard-000/0001.jpg``).
        append: add to the complete store ``dest`` the images it does not hold
            yet (by relative path), after its records, which never change; new
            classes go at the end of ``classes``. The store keeps its own
            ``format``, ``exif_transpose``, ``max_side`` and ``quality``, and
            its labels' origin: class folders, or a label file (``labels``).
            Crash-safe: ``append`` (or ``resume``) again finishes an
            interrupted append (:mod:`datakit.conversion.appending`).
        progress: called as ``progress(done, total)`` while converting.
        boxes: what to do with a box that lies outside its image, has no size
            or a NaN coordinate: ``"keep"`` it as given (and count it in the
            manifest: torchvision's ``SanitizeBoundingBoxes`` decides at train
            time), ``"clip"`` it to the image, ``"drop"`` it with its mask and
            keypoints, or ``"refuse"`` the image (skipped and listed, naming the
            annotation).
        commit_every: records per commit (commits are also cut at 8 MiB and
            every 2 seconds). Smaller commits lose less work to a crash and
            cost more syncs.
        source_kind: what ``src`` is, when what it holds is ambiguous:
            ``"folder"``, ``"huggingface"``, ``"webdataset"``, ``"recipe_lmdb"``,
            ``"image_lmdb"`` or ``"recipe_mongo"``; detected by default.
        image_column: a Hugging Face dataset's ``Image`` column (default ``"image"``).
        label_column: a Hugging Face dataset's label column, or the key of a
            WebDataset sample's ``.json`` label (default ``"label"``; a
            ``.cls`` member comes first). Not with ``labels``.
        class_name: the class of every image of an LMDB of encoded images
            (not with ``labels``, which then names the LMDB's keys).
        index: the pickle recipe's JSON index (``path_list``, ``label_list``)
            of the MongoDB collection ``source_collection``, when ``src`` is
            that server's ``mongodb://`` URI (naming the database).
        source_collection: the recipe's collection of ``{img_name, bson_img}`` documents.

    The pickle recipe's LMDB stores (a folder or a single file) and LMDBs of
    encoded images are imported too, and its values unpickled through an
    allow-list only, never run (:mod:`datakit.conversion.sources.foreign.layouts`); pixel
    arrays are stored as raw records whatever ``format`` says.

    Returns:
        A :class:`ConversionReport`.

    Warns:
        DatakitWarning: a class folder is hidden (``.ipynb_checkpoints``: a
            class, as in ``ImageFolder``), or ``workers`` exceeds the usable
            CPUs. Warnings name the caller's line.

    Raises:
        SourceError: ``src`` is missing or holds no image; its kind is
            ambiguous; a column or a sample's label is missing or of the wrong
            kind; an option does not apply to its kind.
        LabelFileError: the label file is unreadable or malformed (the message
            names its line).
        InvalidLocationError: ``dest`` is inside ``src``, a URI of a scheme
            datakit does not support, or one missing its colon (``mongodb//host``).
        StoreNotFoundError: ``append`` without a store at ``dest``.
        DestinationExistsError: ``dest`` exists and neither ``resume`` nor
            ``overwrite`` was given.
        ConversionError: with ``strict``, when files or folders were skipped;
            when a resumed store was converted with other settings; or when an
            append's labels come from elsewhere than the store's.
    """
    _check_arguments(resume=resume, overwrite=overwrite, append=append, format=format,
                     commit_every=commit_every, workers=workers, max_pixels=max_pixels, max_side=max_side,
                     quality=quality)
    if boxes not in BOX_POLICIES:
        raise ValueError(f"boxes must be one of {', '.join(map(repr, BOX_POLICIES))}, not {boxes!r}")
    started = time.perf_counter()
    given = os.fspath(src)
    root = given if is_mongodb_uri(given) else os.path.abspath(os.path.expanduser(given))
    spec = resolve_destination(root, dest, given_options(collection=collection, database=database))
    if not is_mongodb_uri(root):
        check_outside_source(root, spec)
    # scan the source, then check the destination and see what this run adds: fresh, resume or append
    store = StoreChoice(class_name, None if index is None else os.fspath(index), source_collection)
    choice = SourceChoice(source_kind, image_column, label_column, store)
    folder, rules = scan_source(root, labels, extensions, choice)
    _warn_caller([_hidden_class_warning(folder, name) for name in folder.hidden_classes()])
    wanted = _wanted_settings(folder, rules, format, exif_transpose, max_side, quality, boxes)
    report = scanned_report(folder, spec.describe(), exif_transpose, max_side or 0)
    with spec.open_writer() as writer:
        run = start_run(writer, folder, wanted, report, resume=resume, overwrite=overwrite, append=append)
        if run is None:  # a resumed store complete already, or an append with nothing new
            return _finished(report, started)
        # read + verify in the reader pool, number, write in batches, and the manifest last
        _warn_caller([too_many_readers(workers or 1, len(run.entries))])
        outcomes = read_pending(run.entries, run.source, run.settings, verify, max_pixels, workers,
                                run.fields)
        if progress is not None:
            outcomes = reporting(outcomes, progress, len(run.entries))
        records = number(outcomes, run.state.stats, run.labels, report)
        for batch in batches(records, commit_every):  # each batch with the totals of the records so far
            writer.commit(batch, run.state.stats)
        writer.finish(run.manifest(report), run.label_table())
    report.total, report.complete = run.state.stats.length, True
    return checked(_finished(report, started), strict)


def _check_arguments(*, resume: bool, overwrite: bool, append: bool, format: str, commit_every: int,
                     workers: int | None, max_pixels: int, max_side: int | None, quality: int) -> None:
    """Refuse arguments :func:`convert` cannot work with, naming them (``ValueError``)."""
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: choose one")
    if append and overwrite:
        raise ValueError("append and overwrite exclude each other: choose one")
    if format not in ("encoded", "raw"):
        raise ValueError(f"format must be 'encoded' or 'raw', not {format!r}")
    counts = {"commit_every": commit_every, "workers": workers, "max_pixels": max_pixels,
              "max_side": max_side}
    for name, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be between 1 and 100, not {quality}")


def _wanted_settings(folder: SourceFolder, rules: str, format: str, exif_transpose: bool,
                     max_side: int | None, quality: int, boxes: str) -> ConversionSettings:
    """The settings this conversion asks for (a resumed store must have been started with them)."""
    multi = isinstance(folder, LabelledFolder) and folder.multi_label
    payload = folder.payload_kind or format
    labelled = folder.schema is None or folder.schema.label is not None
    schema = (folder.schema or Schema.classification(labelled)).to_json()
    label_kind = "multi" if multi else "single" if labelled else "none"
    return ConversionSettings(folder.root, folder.classes, payload, rules, exif_transpose, max_side or 0,
                              quality if max_side else 0, label_kind, schema, boxes)


def _hidden_class_warning(folder: SourceFolder, name: str) -> str:
    return (f"{folder.root}/{name} is a hidden folder, taken as the class {name!r} as ImageFolder takes it "
            f"(the labels of the classes after it shift by one); if it is not a class (Jupyter's "
            f".ipynb_checkpoints, say), delete it or move it out of {folder.root}")


def _warn_caller(messages: Sequence[str | None]) -> None:
    """Warn about the conversion, naming the line that called :func:`convert` (not a line of datakit's)."""
    for message in messages:
        if message is not None:
            warnings.warn(message, DatakitWarning, stacklevel=3)


def _finished(report: ConversionReport, started: float) -> ConversionReport:
    report.seconds = time.perf_counter() - started
    return report
