"""How the caller chose to read a conversion's source: :class:`SourceChoice`, its arguments checked.

``convert()``'s source arguments (a kind, columns, a store's options, an image
root, splits, COCO annotation files, a field file, optional fields) arrive as
the caller spelled them: a path or a list of them, a name or a list of names.
:meth:`SourceChoice.given` makes them one frozen value with every path
absolute and every list a tuple, refusing what is neither, before the scan
(:mod:`datakit.conversion.sources.scan`) reads a byte.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from datakit.conversion.sources.foreign.layouts import StoreChoice

__all__ = ["SourceChoice", "annotation_files"]

Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class SourceChoice:
    """How to read SRC, as the caller chose (``None``: not given).

    Attributes:
        kind: one of :data:`SOURCE_KINDS`; detected from SRC when ``None``.
        image_column: a Hugging Face dataset's ``Image`` column (``"image"``).
        label_column: a Hugging Face dataset's label column, or the key of a
            WebDataset sample's ``.json`` label (``"label"``).
        store: the options of an existing store's import
            (:mod:`datakit.conversion.sources.foreign.layouts`).
        image_root: the folder a Hugging Face dataset's image paths are read in
            (:mod:`datakit.conversion.sources.hf_images`); the dataset's own by default.
        splits: the splits of a Hugging Face ``DatasetDict`` to convert; all when empty.
        coco: COCO annotation files naming the images of the folder SRC (instances,
            keypoints, captions), merged; none for other sources.
        optional: the fields a sample may lack (:meth:`~datakit.format.fields.schema.Schema.with_optional`).
        columns: the columns of a Hugging Face dataset kept as fields besides its image and label
            (``None``: every one; :mod:`datakit.conversion.sources.hf_fields`).
        field_file: a field file (:mod:`datakit.conversion.sources.fieldfile`) naming an image
            folder's files and their fields.
    """

    kind: str | None = None
    image_column: str | None = None
    label_column: str | None = None
    store: StoreChoice = StoreChoice()
    image_root: str | None = None
    splits: tuple[str, ...] = ()
    coco: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    field_file: str | None = None

    @classmethod
    def given(cls, kind: str | None, image_column: str | None, label_column: str | None,
              store: StoreChoice, *, image_root: str | os.PathLike[str] | None,
              split: str | Sequence[str] | None, coco: Paths | None, optional: Sequence[str],
              columns: Sequence[str] | None, fields: str | os.PathLike[str] | None) -> SourceChoice:
        """The choice ``convert()``'s arguments make.

        Raises:
            ValueError: a split, column or field name list, or COCO file list, that is none.
        """
        return cls(kind, image_column, label_column, store, _folder_path(image_root), _splits(split),
                   annotation_files(coco), _names("optional", optional) or (), _names("columns", columns),
                   _folder_path(fields))


def annotation_files(coco: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
                     ) -> tuple[str, ...]:
    """``coco=`` as a tuple of paths: one file, or several (a list).

    Raises:
        ValueError: neither.
    """
    if coco is None:
        return ()
    given = [coco] if isinstance(coco, (str, os.PathLike)) else list(coco)
    if not given or not all(isinstance(path, (str, os.PathLike)) for path in given):
        raise ValueError(f"coco must be an annotation file's path or a list of them, not {coco!r}")
    return tuple(os.fspath(path) for path in given)


def _folder_path(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else os.path.abspath(os.path.expanduser(os.fspath(path)))


def _names(argument: str, names: Sequence[str] | None) -> tuple[str, ...] | None:
    """A list of field or column names as a tuple (``None`` stays ``None``)."""
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"{argument} must be a list of names, not {names!r}")
    return tuple(names)


def _splits(split: str | Sequence[str] | None) -> tuple[str, ...]:
    """``split=`` as a tuple of names: one name, or several (a list)."""
    if split is None:
        return ()
    names = (split,) if isinstance(split, str) else tuple(split)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"split must be a split's name or a list of them, not {split!r}")
    return names
