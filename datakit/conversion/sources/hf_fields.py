"""A Hugging Face dataset's other columns as fields: typed from its ``Features``, read in the readers.

Besides its image and its label, every column of a dataset is a field of the
store under the column's name (``columns``, ``--columns a,b``, chooses which),
typed from the dataset's ``Features``:

- ``Image``: an ``image`` field (its bytes, or the file its path names inside
  the image root, as the image column's: :mod:`datakit.conversion.sources.hf_images`);
- ``ClassLabel`` (other than the label column): an ``int`` field, the class's index;
- ``Value`` of ``bool`` and integers: ``int``; of floats: ``float``; of strings: ``str``;
- a ``Sequence``/``List`` of numbers (nested or not), or an ``Array2D``..``Array5D``:
  an ``ndarray`` field of its dtype, each declared length a size of its shape
  (``null`` where lengths vary);
- any other nested value (a ``dict`` of features, a list of strings, ``Json``): ``json``.

A column of nulls in some rows (``None``, or ``-1`` in a ``ClassLabel``) is an
optional field. Columns of other kinds (binary, timestamps, dates, audio,
video, ...) hold nothing a field holds: left out, with a warning naming them,
unless ``columns`` names them, which is refused. Values are read in the
reader processes by (Arrow file, row) (:class:`ArrowFields`), each process
opening the files it reads once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from datakit.conversion.sources.entries import SourceEntry
from datakit.conversion.sources.hf_images import ArrowBytes
from datakit.errors import SourceError
from datakit.format.fields.arrays import DTYPES, MAX_RANK
from datakit.format.fields.base import FieldSpec
from datakit.format.records import HEADER_SIZE

__all__ = ["column_fields", "ArrowFields"]

_INTEGERS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("float16", "float32", "float64")
_STRINGS = ("string", "large_string")
_LISTS = ("List", "Sequence", "LargeList")
_ARRAYS = ("Array2D", "Array3D", "Array4D", "Array5D")
_JSONS = ("Json", "Translation", "TranslationVariableLanguages")
_SAMPLE_NAMES = ("image", "label")
"""The fields every sample has, whatever columns they come from."""


def column_fields(tables: Sequence[Any], taken: Sequence[str], columns: Sequence[str] | None,
                  where: str) -> tuple[list[FieldSpec], list[str]]:
    """The fields of the columns of ``tables`` (their ``datasets.Dataset``\\ s), and why others are left out.

    Args:
        taken: the image and label columns, which are not fields here (a column named ``image`` or
            ``label`` that is neither is left out: those names are the sample's image and label).
        columns: the columns to keep (``None``: every one a field can hold).
        where: the dataset, for messages.

    Raises:
        SourceError: ``columns`` names a column the dataset lacks or a field cannot hold, or the
            tables type a column differently.
    """
    features = tables[0].features
    for name in columns or ():
        if name not in features:
            raise SourceError(f"{where} has no column {name!r} (its columns: {', '.join(features)}); name "
                              "the columns to keep with --columns (columns= in Python)")
    chosen = [name for name in features if name not in taken and (columns is None or name in columns)]
    for table in tables[1:]:
        differs = next((name for name in chosen if table.features.get(name) != features[name]), None)
        if differs is not None:
            raise SourceError(f"{where}: the column {differs!r} is {features[differs]} in one split or file "
                              f"and {table.features.get(differs, 'missing')} in another; leave it out with "
                              "--columns, or convert them into separate stores")
    specs, left_out = [], []
    for name in chosen:
        spec = field_of(name, features[name]) if name not in _SAMPLE_NAMES else \
            f"named as the sample's own {name}, which the column {name!r} is not"
        if isinstance(spec, str):
            if columns is not None:
                raise SourceError(f"{where}: the column {name!r} is {spec}, which no field holds; leave it "
                                  "out of --columns")
            left_out.append(f"{name!r} ({spec})")
            continue
        optional = any(_has_nulls(table, name, features[name]) for table in tables)
        specs.append(FieldSpec(spec.name, spec.type, optional, spec.options))
    notes = [f"{where}: the column(s) {', '.join(left_out)} are left out: no field holds them (choose "
             "the columns to keep with --columns, columns= in Python)"] if left_out else []
    return specs, notes


def field_of(name: str, feature: Any) -> FieldSpec | str:
    """The field of a column of ``feature``, or what the column is when no field holds it."""
    import datasets

    if isinstance(feature, datasets.Image):
        return FieldSpec(name, "image")
    if isinstance(feature, datasets.ClassLabel):
        return FieldSpec(name, "int")
    if isinstance(feature, datasets.Value):
        kind = "int" if feature.dtype in _INTEGERS else "float" if feature.dtype in _FLOATS else \
            "str" if feature.dtype in _STRINGS else None
        return FieldSpec(name, kind) if kind is not None else f"a Value({feature.dtype!r}) column"
    kind_name = type(feature).__name__
    if kind_name in _ARRAYS:
        if feature.dtype in (*_INTEGERS, *_FLOATS):
            return FieldSpec(name, "ndarray", options={"dtype": feature.dtype, "shape": list(feature.shape)})
        return FieldSpec(name, "json")
    if kind_name in _LISTS:
        return _list_field(name, feature)
    if isinstance(feature, dict) or kind_name in _JSONS:
        return FieldSpec(name, "json")
    return f"a column of {kind_name}"


def _list_field(name: str, feature: Any) -> FieldSpec:
    """An ``ndarray`` field for (nested) lists of numbers, a ``json`` field for other lists."""
    import datasets

    shape: list[int | None] = []
    inner = feature
    while type(inner).__name__ in _LISTS and len(shape) <= MAX_RANK:
        length = getattr(inner, "length", -1)
        shape.append(length if isinstance(length, int) and length >= 0 else None)
        inner = inner.feature
    if isinstance(inner, datasets.Value) and inner.dtype in DTYPES and len(shape) <= MAX_RANK:
        return FieldSpec(name, "ndarray", options={"dtype": inner.dtype, "shape": shape})
    return FieldSpec(name, "json")


def _has_nulls(table: Any, name: str, feature: Any) -> bool:
    """Whether some row of ``table`` has no value in ``name`` (null; ``-1`` in a ``ClassLabel``)."""
    import datasets
    import pyarrow.compute

    column = table.data.column(name)
    if column.null_count:
        return True
    return isinstance(feature, datasets.ClassLabel) and bool(pyarrow.compute.any(
        pyarrow.compute.less(column, 0)).as_py())


class ArrowFields:
    """The field values of rows of Arrow files; each process opens the files it reads once.

    Args:
        files: the Arrow files; an entry's location is ``(file index, row)``.
        specs: the fields, each a column of the same name.
        image_root: the folder that image paths are resolved in, and may not leave.
        class_columns: the ``ClassLabel`` columns, whose ``-1`` is no value.
    """

    def __init__(self, files: Sequence[str], specs: Sequence[FieldSpec], image_root: str,
                 class_columns: Sequence[str] = ()) -> None:
        self.files, self.specs, self.image_root = tuple(files), tuple(specs), image_root
        self.class_columns = tuple(class_columns)
        self._images = {spec.name: ArrowBytes(self.files, spec.name, image_root)
                        for spec in self.specs if spec.type == "image"}
        self._opened: dict[int, Any] = {}
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:  # nothing opened
        return {"files": self.files, "specs": self.specs, "image_root": self.image_root,
                "class_columns": self.class_columns}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        index, row = entry.location
        found = self._row(index, row, [spec.name for spec in self.specs])
        values: dict[str, Any] = {}
        for spec in self.specs:
            value = found[spec.name]
            if value is None or (spec.name in self.class_columns and value < 0):
                continue  # no value: the field is optional (the scan saw the nulls)
            if spec.type == "image":
                value = self._images[spec.name].read(entry)[HEADER_SIZE:]
            values[spec.name] = int(value) if isinstance(value, bool) else value
        return values

    def close(self) -> None:
        self._opened.clear()
        for images in self._images.values():
            images.close()

    def _row(self, index: int, row: int, names: list[str]) -> dict[str, Any]:
        """The values of ``names`` in ``row`` of the ``index``-th file, as Arrow gives them."""
        if self._pid != os.getpid():  # forked: open our own
            self._opened, self._pid = {}, os.getpid()
        table = self._opened.get(index)
        if table is None:
            import datasets

            table = datasets.Dataset.from_file(self.files[index]).data.table.select(names)
            self._opened[index] = table
        values: dict[str, Any] = table.slice(row, 1).to_pylist()[0]
        return values
