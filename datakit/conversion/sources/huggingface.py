"""A Hugging Face ``datasets`` dataset on disk as a conversion source.

``datakit convert hf_dir DEST --image-column image --label-column label``
takes a dataset that ``save_to_disk`` wrote (a ``Dataset``, or a
``DatasetDict`` whose splits come in its order), or ``.parquet`` / ``.arrow``
files (a file, or a folder of them, in name order). The images are the
``Image`` column's stored bytes, untouched (``Image(decode=False)``: the file
as it was given to ``datasets``); every one is checked like an image file.

Each row is an entry named ``<split or file>/<row>``, the row zero-padded to
:data:`ROW_DIGITS` digits (``train/00000012``), the name ``--resume`` and
``--append`` match rows by. Its bytes are found by (Arrow file, row), and read
in the reader processes through ``Dataset.from_file``, which memory-maps the
file: each process opens it once, lazily, and nothing big is pickled. Parquet
files are first turned into Arrow files in ``datasets``'s own cache (as
``datasets.load_dataset`` does; ``HF_DATASETS_CACHE`` says where).

``split`` (``--split NAME``, repeatable) converts only the splits named of a
``DatasetDict``, in its order; without it every split goes into the one store,
and the report and ``datakit inspect`` count the rows of each (the manifest
records the splits, :attr:`~datakit.format.manifest.Manifest.splits`). A row whose
image is a path, not bytes, is read from the file it names inside the image
root only (:mod:`datakit.conversion.sources.hf_images`).

The classes are a ``ClassLabel`` column's names, in their order (not sorted);
any other label column is read as a label file would be: integers sorted as
numbers, text as text, each label in a label file's bounds (a class name of at
most 1024 characters, an integer within int64:
:func:`~datakit.conversion.sources.class_names.label_problem`; a row out of them is
refused, naming it). A row whose label is missing (``None``, or ``-1``, the
``ClassLabel`` convention for unlabelled rows) is skipped and listed. A
dataset without labels takes them from a label file (``--labels``) naming rows
by their names. The store's progress records the data files' names, sizes and
times (:func:`~datakit.conversion.sources.files.files_digest`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from datakit.conversion.sources.class_names import class_order, label_problem, sorted_classes
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.files import files_digest
from datakit.conversion.sources.hf_fields import ArrowFields, column_fields
from datakit.conversion.sources.hf_images import ArrowBytes, check_path_images
from datakit.errors import SourceError, Spelling
from datakit.format.fields.base import FieldError
from datakit.format.fields.schema import Schema
from datakit.format.manifest import NO_LABEL

__all__ = ["SAVED_MARKERS", "TABLE_SUFFIXES", "ROW_DIGITS", "ArrowBytes", "scan_huggingface"]

SAVED_MARKERS = ("dataset_dict.json", "dataset_info.json", "state.json")
"""Files that ``save_to_disk`` writes into a dataset's folder."""

TABLE_SUFFIXES = (".parquet", ".arrow")
"""Data files read as Hugging Face tables."""

ROW_DIGITS = 8
"""Row numbers in entry names are zero-padded to this many digits (more when needed)."""


@dataclass(frozen=True)
class _Table:
    """One split or file: its name, its dataset, and the Arrow files its rows are in, in order."""

    name: str
    where: str
    dataset: Any
    arrow_files: list[str]
    split: bool = False
    """The table is a split of the dataset (of a DatasetDict, or a Dataset saved with its split)."""


def scan_huggingface(root: str, image_column: str, label_column: str | None, *, image_root: str | None = None,
                     splits: Sequence[str] = (), label_required: bool = True,
                     columns: Sequence[str] | None = None,
                     optional: Sequence[str] = ()) -> tuple[SourceFolder, str]:
    """The entries of the dataset at ``root`` (every row, with its label from ``label_column``;
    ``None``: the caller takes labels from a label file, and every label is 0 here) and the
    scan rules that name them in a store's progress.

    Args:
        root: the dataset (see the module's docstring).
        image_column, label_column: the columns.
        image_root: the folder image paths are read in (:mod:`datakit.conversion.sources.hf_images`);
            by default the dataset's own.
        splits: the splits of a ``DatasetDict`` to convert, kept in its order; all when empty.
        label_required: refuse a dataset without ``label_column`` (else it makes an unlabelled store).
        columns: the other columns kept as fields (:mod:`datakit.conversion.sources.hf_fields`);
            all when ``None``.
        optional: fields a row may lack a value of.

    Raises:
        SourceError: ``datasets`` is not installed, ``root`` holds no dataset,
            a column is missing or of the wrong kind (the message names the
            file or split and the column, and lists the columns there), a
            split is not in it, or no row's image can be read.
    """
    _require_datasets(root)
    with _quiet_datasets():
        tables = _chosen(_tables(root, [image_column, label_column if label_required else None]), splits,
                         root)
    unlabelled = label_column is not None and not label_required and not any(
        label_column in table.dataset.features for table in tables)
    label = None if unlabelled else label_column
    for table in tables:
        _check_columns(table, image_column, label)
    folder_of_images = image_root if image_root is not None else _folder(root)
    check_path_images(root, [table.dataset for table in tables], image_column, folder_of_images)
    classes, labels, order = ([], [[""] * len(table.dataset) for table in tables], "text") if unlabelled \
        else _labels(tables, label)
    entries, rejected = _entries(tables, labels, classes)
    if not entries and not rejected:
        raise SourceError(f"{root} holds no rows")
    files = [path for table in tables for path in table.arrow_files]
    schema, fields, notes = _fields(root, tables, [image_column, label_column or "label"], columns, optional,
                                    not unlabelled, (files, folder_of_images))
    chosen = f" splits={','.join(table.name for table in tables)}" if splits else ""
    named = label_column if label_column is not None else "(label file)"
    rules = f"huggingface image={image_column} label={'(none)' if unlabelled else named}{chosen} files " \
            f"sha256:{files_digest(_data_files(root), root)}"
    rows = {table.name: len(table.dataset) for table in tables if table.split}
    return SourceFolder(root, classes, entries, class_order=order, kind="huggingface",
                        reader=ArrowBytes(files, image_column, folder_of_images), rejected=rejected,
                        splits=rows, unlabelled=unlabelled, schema=schema, fields=fields, notes=notes), rules


def _fields(root: str, tables: list[_Table], taken: list[str], columns: Sequence[str] | None,
            optional: Sequence[str], labelled: bool,
            read: tuple[list[str], str]) -> tuple[Schema, ArrowFields | None, list[str]]:
    """The schema of the image, the label and the other columns' fields; how the readers read them."""
    import datasets

    datasets_ = [table.dataset for table in tables]
    specs, notes = column_fields(datasets_, taken, columns, root)
    try:
        schema = Schema.of([*Schema.classification(labelled).fields, *specs]).with_optional(optional)
    except FieldError as exc:
        raise SourceError(f"{root}: {exc}") from None
    features = datasets_[0].features
    classes = [spec.name for spec in specs if isinstance(features[spec.name], datasets.ClassLabel)]
    files, image_root = read
    fields = ArrowFields(files, schema.stored[1:], image_root, classes) if specs else None
    return schema, fields, notes


def _chosen(tables: list[_Table], splits: Sequence[str], root: str) -> list[_Table]:
    """The tables of the ``splits`` asked for, in the dataset's order (all when none are)."""
    if not splits:
        return tables
    names = [table.name for table in tables if table.split]
    if not names:
        raise SourceError.advising(
            "{split} chooses among the splits of a DatasetDict saved with save_to_disk; {root} holds "
            ".parquet/.arrow files, not splits: give the files of one split as SRC (a file, or a folder of "
            "them)", split=Spelling("split=", "--split"), root=root)
    for name in splits:
        if name not in names:
            raise SourceError(f"{root} has no split {name!r} (its splits: {', '.join(names)})")
    return [table for table in tables if table.name in splits]


def _require_datasets(root: str) -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise SourceError(f"{root} is a Hugging Face dataset, and reading one needs the datasets library: "
                          "pip install 'datakit[hf]' (or pip install datasets)") from None


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """``datasets``'s own progress bars off while it loads (the conversion shows its own)."""
    import datasets

    shown = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if shown:
            datasets.enable_progress_bars()


def _data_files(root: str) -> list[str]:
    """The files a dataset's rows are read from: ``save_to_disk``'s Arrow files, or the tables."""
    if os.path.isfile(root):
        return [root]
    names = sorted(os.listdir(root))
    if any(name in SAVED_MARKERS for name in names):
        return sorted(os.path.join(folder, name) for folder, _, found in os.walk(root) for name in found
                      if name.endswith(".arrow"))
    return [os.path.join(root, name) for name in names if name.lower().endswith(TABLE_SUFFIXES)]


def _tables(root: str, columns: list[str | None]) -> list[_Table]:
    """The dataset's splits or files, in order, each with the Arrow files its rows are in.

    A Parquet file is checked for ``columns`` before ``datasets`` copies it into its cache.
    """
    import datasets

    if os.path.isdir(root) and any(os.path.exists(os.path.join(root, name)) for name in SAVED_MARKERS):
        try:
            loaded = datasets.load_from_disk(root)
        except Exception as exc:  # datasets raises many types for a damaged folder
            raise SourceError(f"{root} cannot be read as a dataset saved with save_to_disk: {exc}") from None
        if isinstance(loaded, datasets.DatasetDict):
            return [_table(str(split), os.path.join(root, str(split)), loaded[split], split=True)
                    for split in loaded]
        return [_table(str(loaded.split or "data"), root, loaded, split=loaded.split is not None)]
    files = _data_files(root)
    for path in files:
        if path.lower().endswith(".parquet"):
            _check_parquet_columns(path, columns)
    return [_file_table(path) for path in files]


def _check_parquet_columns(path: str, columns: list[str | None]) -> None:
    """Refuse a Parquet file without one of ``columns`` (image, then label), from its schema alone."""
    import pyarrow.parquet

    try:
        names = pyarrow.parquet.read_schema(path).names
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise SourceError(f"{path} cannot be read as a .parquet table: {exc}") from None
    image, label = columns
    if image not in names:
        raise _no_image_column(path, str(image), names)
    if label is not None and label not in names:
        raise _no_label_column(path, label, names)


def _no_image_column(where: str, column: str, names: Sequence[str]) -> SourceError:
    return SourceError(f"{where} has no column {column!r} (its columns: {', '.join(names)}); name the image "
                       "column with --image-column (image_column= in Python)")


def _no_label_column(where: str, column: str, names: Sequence[str]) -> SourceError:
    return SourceError(f"{where} has no label column {column!r} (its columns: {', '.join(names)}); name it "
                       "with --label-column, or give the labels in a file with --labels FILE naming each "
                       "row as <split>/<row>")


def _file_table(path: str) -> _Table:
    """A ``.parquet`` or ``.arrow`` file as a table named by its file name."""
    import datasets

    name = os.path.splitext(os.path.basename(path))[0]
    try:
        if path.lower().endswith(".parquet"):
            dataset = datasets.Dataset.from_parquet(path)
        else:
            dataset = datasets.Dataset.from_file(path)
    except Exception as exc:  # pyarrow and datasets raise many types for a damaged file
        raise SourceError(f"{path} cannot be read as a {os.path.splitext(path)[1]} table: {exc}") from None
    return _table(name, path, dataset)


def _table(name: str, where: str, dataset: Any, split: bool = False) -> _Table:
    files = [item["filename"] for item in dataset.cache_files]
    if not files:  # kept in memory: no file for a reader process to open
        raise SourceError(f"{where}: the dataset is held in memory, not in Arrow files; save it with "
                          "save_to_disk and convert that folder")
    return _Table(name, where, dataset, files, split)


def _check_columns(table: _Table, image_column: str, label_column: str | None) -> None:
    import datasets

    features = table.dataset.features
    if image_column not in features:
        raise _no_image_column(table.where, image_column, list(features))
    if not isinstance(features[image_column], datasets.Image):
        raise SourceError(f"{table.where}: the column {image_column!r} is {features[image_column]}, not an "
                          "Image column; name the image column with --image-column (its columns: "
                          f"{', '.join(features)})")
    if label_column is not None and label_column not in features:
        raise _no_label_column(table.where, label_column, list(features))


def _labels(tables: list[_Table], column: str | None) -> tuple[list[str], list[list[str | None]], str]:
    """The classes, each table's label per row (a class name, or ``None`` for none), and the order.

    Without a label column every row is of the one class ``""``, which a label file replaces.
    """
    import datasets

    if column is None:
        return [""], [[""] * len(table.dataset) for table in tables], "text"
    features = [table.dataset.features[column] for table in tables]
    if all(isinstance(feature, datasets.ClassLabel) for feature in features):
        names = list(features[0].names)
        for table, feature in zip(tables, features, strict=True):
            if list(feature.names) != names:
                raise SourceError(f"{table.where}: the ClassLabel names of {column!r} differ from those of "
                                  f"{tables[0].where}; convert the splits into separate stores")
        return names, [_class_names(table, column, names) for table in tables], "text"
    values = [_label_texts(table, column) for table in tables]
    classes = sorted_classes({name for rows in values for name in rows if name is not None})
    return classes, values, class_order(classes)


def _class_names(table: _Table, column: str, names: list[str]) -> list[str | None]:
    values = table.dataset.data.column(column).to_pylist()
    return [names[value] if value is not None and 0 <= value < len(names) else None for value in values]


def _label_texts(table: _Table, column: str) -> list[str | None]:
    """A label column's values as class names: integers and text; ``None`` where there is none."""
    values = table.dataset.data.column(column).to_pylist()
    texts: list[str | None] = []
    for row, value in enumerate(values):
        if not (value is None or isinstance(value, str) or (type(value) is int)):
            raise SourceError(f"{table.where}: the label column {column!r} holds {type(value).__name__} "
                              f"values ({table.dataset.features[column]}); a label is a class name or an "
                              "integer (give other labels in a file with --labels)")
        text = None if value is None else str(value).strip() or None
        problem = None if text is None else label_problem(text)
        if problem is not None:
            raise SourceError(f"{table.where}: the label column {column!r}, row "
                              f"{_row_name(table.name, row, len(values))}: {problem}")
        texts.append(text)
    return texts


def _row_name(table: str, row: int, rows: int) -> str:
    """A row's entry name, ``<split or file>/<row>``, the row zero-padded (:data:`ROW_DIGITS`)."""
    digits = max(ROW_DIGITS, len(str(max(rows - 1, 0))))
    return f"{table}/{row:0{digits}d}"


def _entries(tables: list[_Table], labels: list[list[str | None]],
             classes: list[str]) -> tuple[list[SourceEntry], list[tuple[str, str]]]:
    """One entry per labelled row, located by (Arrow file, row); the rows without a label."""
    import datasets

    position = {name: index for index, name in enumerate(classes)}
    entries: list[SourceEntry] = []
    rejected: list[tuple[str, str]] = []
    file_index = 0
    for table, rows in zip(tables, labels, strict=True):
        places: list[tuple[int, int]] = []
        for path in table.arrow_files:
            count = datasets.Dataset.from_file(path).num_rows
            places.extend((file_index, row) for row in range(count))
            file_index += 1
        if len(places) != len(rows):
            raise SourceError(f"{table.where}: its Arrow files hold {len(places)} rows, the dataset "
                              f"{len(rows)}; save it again with save_to_disk and convert that folder")
        for row, (name, place) in enumerate(zip(rows, places, strict=True)):
            entry_name = _row_name(table.name, row, len(rows))
            if name is None:
                rejected.append((entry_name, "no label (None, or -1 in a ClassLabel column)"))
            else:  # an unlabelled dataset's rows are all of no class
                entries.append(SourceEntry(entry_name, position.get(name, NO_LABEL), location=place))
    return entries, rejected


def _folder(root: str) -> str:
    return root if os.path.isdir(root) else os.path.dirname(root)
