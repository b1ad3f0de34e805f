"""``datakit.convert``: the conversion as the list of its stages, each a module of this package.

::

    scan the source    sources/scan.py tells the kind: sources/folder.py (ImageFolder's files and
                       order), sources/labelfile.py (a label file's), sources/fieldfile.py (a field
                       file's), sources/huggingface.py (a datasets dataset on disk; hf_images.py: its
                       rows' images, read inside the image root only; hf_fields.py: its other columns),
                       sources/webdataset/ (tar shards, every member a field), sources/foreign/ (other
                       tools' stores), sources/coco/ (an images folder and COCO annotation files); all
                       yield the same entries (sources/entries.py), whose bytes (sources/files.py for
                       files) and fields (fields.py) the readers get
    check destination  destination.py: resolved, outside the source, then created, replaced
                       (overwrite), resumed (resumption.py checks it) or grown (appending.py)
    what this run adds run.py: the entries the store does not hold yet, the labels it holds
    read + verify      reading.py, in the reader processes of reader_pool.py: each file read (regular
                       files only, bounded: file_reads.py), checked (images/: checks.py, exif.py,
                       pixels.py, downscale.py) and sealed as a record
    number, batch      numbering.py: consecutive indices, skipped files into the report (report.py)
    write              the backend's writer commits each batch atomically, with the running totals
    manifest           labels + manifest, written last: the store becomes complete; a run that
                       stored no record fails instead (SourceError), its empty store removed

A bad file, or a folder that cannot be read, is skipped and reported by
name, never fatal; the names are kept in the manifest. Every commit is
atomic and carries the running totals, so a conversion killed at any moment
leaves a store that readers refuse as incomplete and that ``resume=True``
completes with every image exactly once.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Literal

from datakit.conversion.destination import check_outside_source, resolve_destination
from datakit.conversion.fields import BOX_POLICIES, refuse_moving_images
from datakit.conversion.images.checks import DEFAULT_MAX_PIXELS
from datakit.conversion.images.downscale import DEFAULT_QUALITY
from datakit.conversion.numbering import COMMIT_RECORDS, ProgressCallback, batches, number, reporting
from datakit.conversion.reading import read_pending, too_many_readers
from datakit.conversion.report import ConversionReport, checked, nothing_stored, scanned_report
from datakit.conversion.run import Run, start_run
from datakit.conversion.sources.choice import SourceChoice
from datakit.conversion.sources.datakit_store import StoreFolder, check_not_the_source, kept_settings
from datakit.conversion.sources.entries import SourceFolder
from datakit.conversion.sources.foreign.layouts import StoreChoice
from datakit.conversion.sources.labelfile import LabelledFolder
from datakit.conversion.sources.scan import scan_source
from datakit.errors import DatakitWarning, SourceError
from datakit.format.fields.schema import Schema
from datakit.stores import given_options, is_mongodb_uri
from datakit.stores.contract import StoreSpec, StoreWriter
from datakit.stores.conversion_state import ConversionSettings, PendingRecord

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
    discard_unfinished: bool = False,
    progress: ProgressCallback | None = None,
    commit_every: int = COMMIT_RECORDS,
    boxes: str = "keep",
    source_kind: str | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    class_name: str | None = None,
    index: str | os.PathLike[str] | None = None,
    source_collection: str | None = None,
    image_root: str | os.PathLike[str] | None = None,
    split: str | Sequence[str] | None = None,
    coco: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    fields: str | os.PathLike[str] | None = None,
    columns: Sequence[str] | None = None,
    optional: Sequence[str] = (),
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
        resume: continue an interrupted conversion of ``src`` into ``dest``.
            With nothing at ``dest`` (a conversion killed before it wrote
            anything, or a mistyped ``dest``) a new one is converted, and the
            report's ``resumed_nothing`` says so.
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
            Crash-safe: ``append`` (or ``resume``) again from the same source
            finishes an interrupted append (:mod:`datakit.conversion.appending`);
            an append from another source is refused until it is finished or
            discarded (``discard_unfinished``). Each record's source path is
            under the source it came from (``dataset.source_path``).
        discard_unfinished: with ``append``, first roll back an unfinished
            append into ``dest`` (whatever its source): its records after the
            manifest's are deleted, which readers never saw.
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
            ``"folder"``, ``"huggingface"``, ``"webdataset"``, ``"datakit"``,
            ``"recipe_lmdb"``, ``"image_lmdb"`` or ``"recipe_mongo"``; detected by default.
        image_column: a Hugging Face dataset's ``Image`` column (default ``"image"``).
        label_column: a Hugging Face dataset's label column, or the key of a
            WebDataset sample's ``.json`` label (default ``"label"``; a
            ``.cls`` member comes first). Not with ``labels``.
        class_name: the class of every image of an LMDB of encoded images, or
            of the pickle recipe's LMDB of bare pixel arrays, which is
            otherwise an unlabelled store (every label -1); not with
            ``labels``, which then names the LMDB's keys.
        index: the pickle recipe's JSON index (``path_list``, ``label_list``)
            of the MongoDB collection ``source_collection``, when ``src`` is
            that server's ``mongodb://`` URI (naming the database).
        source_collection: the collection of the datakit store to copy, when ``src`` is its
            server's ``mongodb://`` URI (naming the database); with ``index``, the recipe's
            collection of ``{img_name, bson_img}`` documents.
        image_root: the folder a Hugging Face dataset's image paths (rows holding
            a path, not bytes) are read in: relative paths are joined to it, and
            nothing outside it is read (:mod:`datakit.conversion.sources.hf_images`). By
            default the dataset's own folder (a ``.parquet``/``.arrow`` file's folder).
        split: the split, or splits, of a Hugging Face ``DatasetDict`` to convert
            (kept in the dataset's order); by default every split, into this one
            store, which the report (``splits``) and the manifest record.
        coco: a COCO annotation file, or several of the same images (instances,
            person keypoints, captions: merged), naming the images of the folder
            ``src`` (their ``file_name``). The store holds, for each image listed,
            sorted by id as ``CocoDetection`` has them, the image, its
            ``image_id`` and the boxes, masks, keypoints and captions the files
            give, and no class label; ``target_format="torchvision-detection"``
            reads it as torchvision's COCO wrapper does
            (:mod:`datakit.conversion.sources.coco`). Not with ``labels``.
        fields: a field file (CSV or JSON Lines of ``path`` and any columns) naming the images
            under ``src`` and their fields, a column each; a ``label`` column is their class
            (:mod:`datakit.conversion.sources.fieldfile`). Not with ``labels``.
        columns: the columns of a Hugging Face dataset kept as fields besides its image and label
            (by default every column a field holds: :mod:`datakit.conversion.sources.hf_fields`).
        optional: fields a sample may lack (a WebDataset member some samples do not have).

    The pickle recipe's LMDB stores (a folder or a single file) and LMDBs of
    encoded images are imported too, and its values unpickled through an
    allow-list only, never run (:mod:`datakit.conversion.sources.foreign.layouts`); pixel
    arrays are stored as raw records whatever ``format`` says. A datakit store
    is copied (:mod:`datakit.conversion.sources.datakit_store`): every record checked, its
    class, label and source path kept; raw records stay raw.

    Returns:
        A :class:`ConversionReport`.

    Warns:
        DatakitWarning: a class folder is hidden (``.ipynb_checkpoints``: a
            class, as in ``ImageFolder``), or ``workers`` exceeds the usable
            CPUs. Warnings name the caller's line.

    Raises:
        SourceError: ``src`` is missing or holds no image; its kind is
            ambiguous; a column or a sample's label is missing or of the wrong
            kind; an option does not apply to its kind; a label file names
            nothing in it; a split is not in it; or no image could be stored
            (every one was skipped: raised before the store is created where the
            scan knows, else the empty store is removed).
        LabelFileError: the label file is unreadable or malformed (the message
            names its line).
        InvalidLocationError: ``dest`` is inside ``src``, a URI of a scheme
            datakit does not support, or one missing its colon (``mongodb//host``).
        StoreNotFoundError: ``append`` without a store at ``dest``.
        ValueError: contradictory options (``resume`` or ``append`` with
            ``overwrite``, ``discard_unfinished`` without ``append``), or a count out of range.
        DestinationExistsError: ``dest`` exists and neither ``resume`` nor
            ``overwrite`` was given.
        ConversionError: with ``strict``, when files or folders were skipped;
            when a resumed store was converted with other settings; when an
            append's labels come from elsewhere than the store's; or when an
            unfinished append into it came from another source.
    """
    modes = {"resume": resume, "overwrite": overwrite, "append": append,
             "discard_unfinished": discard_unfinished}
    _check_arguments(modes, format=format, commit_every=commit_every, workers=workers, max_pixels=max_pixels,
                     max_side=max_side, quality=quality)
    if boxes not in BOX_POLICIES:
        raise ValueError(f"boxes must be one of {', '.join(map(repr, BOX_POLICIES))}, not {boxes!r}")
    started = time.perf_counter()
    root = _source_root(src)
    spec = resolve_destination(root, dest, given_options(collection=collection, database=database))
    _check_outside_source(root, spec)
    # scan the source, then check the destination and see what this run adds: fresh, resume or append
    store = StoreChoice(class_name, None if index is None else os.fspath(index), source_collection)
    choice = SourceChoice.given(source_kind, image_column, label_column, store, image_root=image_root,
                                split=split, coco=coco, optional=optional, columns=columns, fields=fields)
    folder, rules = scan_source(root, labels, extensions, choice)
    refuse_moving_images(folder, max_side, exif_transpose)
    check_not_the_source(folder.root, spec)  # a collection into itself, named once scanned
    _warn_caller([*(_hidden_class_warning(folder, name) for name in folder.hidden_classes()), *folder.notes])
    wanted = _wanted_settings(folder, rules, format, exif_transpose, max_side, quality, boxes)
    report = scanned_report(folder, spec.describe(), wanted.exif_transpose, wanted.max_side)
    _check_not_empty(folder, report, resume or append)
    with spec.open_writer() as writer:
        run = start_run(writer, folder, wanted, report, **modes)
        if run is None:  # a resumed store complete already, or an append with nothing new
            return _finished(report, started)
        # read + verify in the reader pool, number, write in batches, and the manifest last
        _warn_caller([too_many_readers(workers or 1, len(run.entries))])
        outcomes = read_pending(run.entries, run.source, run.settings, verify, max_pixels, workers,
                                run.fields)
        outcomes = outcomes if progress is None else reporting(outcomes, progress, len(run.entries))
        stored = _commit_all(writer, run, number(outcomes, run.state.stats, run.labels, report), report,
                             commit_every)
    if not stored:  # every image skipped: a store of nothing would only mislead
        raise _discarded(spec, report)
    report.total, report.complete = run.state.stats.length, True
    return checked(_finished(report, started), strict)


def _check_arguments(modes: dict[str, bool], *, format: str, commit_every: int, workers: int | None,
                     max_pixels: int, max_side: int | None, quality: int) -> None:
    """Refuse arguments :func:`convert` cannot work with, naming them (``ValueError``);
    ``modes`` are the flags that say what to do with the destination (``resume=``, ...)."""
    if modes["resume"] and modes["overwrite"]:
        raise ValueError("resume and overwrite exclude each other: choose one")
    if modes["append"] and modes["overwrite"]:
        raise ValueError("append and overwrite exclude each other: choose one")
    if modes["discard_unfinished"] and not modes["append"]:
        raise ValueError("discard_unfinished=True applies to an append: pass append=True with it")
    if format not in ("encoded", "raw"):
        raise ValueError(f"format must be 'encoded' or 'raw', not {format!r}")
    counts = {"commit_every": commit_every, "workers": workers, "max_pixels": max_pixels,
              "max_side": max_side}
    for name, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be between 1 and 100, not {quality}")


def _check_outside_source(root: str, spec: StoreSpec) -> None:
    """Refuse a destination in the source folder, or a store copied into itself (saying so)."""
    if not is_mongodb_uri(root):
        check_not_the_source(root, spec)
        check_outside_source(root, spec)


def _source_root(src: str | os.PathLike[str]) -> str:
    """``src`` as an absolute path (``~`` expanded), or a ``mongodb://`` URI as it is."""
    given = os.fspath(src)
    return given if is_mongodb_uri(given) else os.path.abspath(os.path.expanduser(given))


def _check_not_empty(folder: SourceFolder, report: ConversionReport, continues: bool) -> None:
    """Refuse, before a store is created, a conversion whose scan found nothing to store (every
    entry rejected); a resume or an append with nothing new is no error (the store holds records)."""
    if not folder.entries and not continues:
        raise nothing_stored(report)


def _commit_all(writer: StoreWriter, run: Run, records: Iterable[PendingRecord], report: ConversionReport,
                commit_every: int) -> int:
    """Commit ``records`` in batches, each with the totals of the records so far, then the manifest
    that completes the store; the records the store holds (none: no manifest, the store is discarded)."""
    for batch in batches(records, commit_every):
        writer.commit(batch, run.state.stats)
    if run.state.stats.length:
        writer.finish(run.manifest(report), run.label_table())
    return run.state.stats.length


def _discarded(spec: StoreSpec, report: ConversionReport) -> SourceError:
    """Delete the incomplete store of a conversion that stored nothing, and the folder it was in if
    that is empty now; the error that says why. Its writer is closed by now: a writer cannot look at
    the store its own environment holds open."""
    with spec.open_writer() as writer:
        writer.lock()
        if writer.is_store() and not writer.is_complete():
            writer.remove()
    local = spec.local_path()
    if local is not None:
        with contextlib.suppress(OSError):  # it holds files of the user's: keep them
            os.rmdir(local)
    return nothing_stored(report)


def _wanted_settings(folder: SourceFolder, rules: str, format: str, exif_transpose: bool,
                     max_side: int | None, quality: int, boxes: str) -> ConversionSettings:
    """The settings this conversion asks for (a resumed store must have been started with them);
    a copied store's own image settings where none are asked for."""
    exif_transpose, max_side, quality = kept_settings(folder, exif_transpose, max_side, quality)
    multi = isinstance(folder, (LabelledFolder, StoreFolder)) and folder.multi_label
    payload = folder.payload_kind or format
    labelled = not folder.unlabelled if folder.schema is None else folder.schema.label is not None
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
