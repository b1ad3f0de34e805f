"""What every conversion source yields: entries, the folder a scan makes of them, how their bytes are read.

Each source (:mod:`datakit.conversion.sources`) scans its input into a
:class:`SourceFolder` of :class:`SourceEntry` items, in the order the store
keeps them; everything after the scan (resume, append, the reading stage,
the report) works on these alone, so every source gets the manifest,
checksums, ``--resume``, ``--append``, progress and the list of skipped files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from datakit.format.fields.schema import Schema

__all__ = ["IMG_EXTENSIONS", "SourceEntry", "EntryBytes", "EntryFields", "UnreadableFolder", "SymlinkLoop",
           "SourceFolder"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's ``IMG_EXTENSIONS``, matched case-insensitively at the end of a name."""


@dataclass(frozen=True)
class SourceEntry:
    """One image of a source: its name (a path relative to the root, ``/``-separated), its label,
    and where its bytes are.

    In a multi-label conversion ``classes`` holds every class of the image,
    ascending, and ``label`` is the first of them; otherwise it is empty.
    ``location`` is empty for a file (``path`` says where it is); for an image
    inside a larger file it is what the source's
    :class:`~datakit.conversion.sources.files.EntryBytes` needs to find it: a few
    integers, so that the entries of ten million images stay small in every reader.
    """

    path: str
    label: int
    classes: tuple[int, ...] = ()
    location: tuple[int, ...] = ()


class EntryBytes(Protocol):
    """Reads an entry's bytes in a reader process (:mod:`datakit.conversion.sources.files`): a small
    picklable description of the source, that opens what it reads in the process that reads."""

    def read(self, entry: SourceEntry) -> bytearray:
        """The entry's bytes after :data:`~datakit.format.records.HEADER_SIZE` bytes of room.

        Raises:
            BadImage: the bytes cannot be read (the message says why).
        """
        ...

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """A hint that ``entries`` are read next, in this order: a source that fetches over a network
        (:class:`~datakit.conversion.sources.foreign.recipe_mongo.MongoImages`) fetches them in one query."""
        ...

    def close(self) -> None:
        """Release what this process opened (the next :meth:`read` opens it again)."""
        ...


class EntryFields(Protocol):
    """The field values of a source's entries beyond their image and label, read in the reader
    processes (:mod:`datakit.conversion.fields` encodes them): a small picklable description that
    opens what it reads in the process that reads, like :class:`EntryBytes`."""

    def values(self, entry: SourceEntry) -> Mapping[str, Any]:
        """The entry's values by field name: plain Python values, numpy arrays, boxes or masks values
        of :mod:`datakit.format.fields`, a value that needs its image's size
        (:class:`~datakit.conversion.fields.OnCanvas`), or an extra image's file bytes. A field it
        leaves out has no value.

        Raises:
            BadImage: the values cannot be read (the message says why).
        """
        ...

    def close(self) -> None:
        """Release what this process opened."""
        ...


@dataclass(frozen=True)
class UnreadableFolder:
    """A folder below the root whose listing failed: its images were not found.

    Attributes:
        path: relative to the root, ``/``-separated.
        reason: the operating system's words (``Permission denied``).
    """

    path: str
    reason: str


@dataclass(frozen=True)
class SymlinkLoop:
    """A symlinked folder not followed, since it leads to a folder that contains it: walking it
    would find the same images again (under another class) and never end.

    Attributes:
        path: the link, relative to the root, ``/``-separated.
        target: the folder it leads to: relative to the root (``.`` for the
            root itself) when inside it, else absolute.
    """

    path: str
    target: str


@dataclass
class SourceFolder:
    """The result of a scan.

    Attributes:
        root: absolute path of the folder.
        classes: class names, sorted.
        entries: image files, in ``ImageFolder``'s order.
        ignored: files that are not images by extension, or lie outside any
            class directory; reported, never converted.
        unreadable: folders that could not be listed; reported as skipped.
        extensions: the extensions taken, ``IMG_EXTENSIONS`` first.
        loops: symlinked folders not followed (:class:`SymlinkLoop`), by path;
            reported as skipped.
        class_order: how ``classes`` are sorted: ``"text"`` (``ImageFolder``'s
            sort of folder names), or ``"numeric"`` (a label file whose labels
            are all integers, :mod:`datakit.conversion.sources.labelfile`).
        kind: what the source is: ``"folder"`` (image files), ``"huggingface"``
            (a ``datasets`` dataset on disk), ``"webdataset"`` (tar shards), or an
            existing store: ``"recipe_lmdb"``, ``"image_lmdb"``, ``"recipe_mongo"``.
        reader: how a reader process gets an entry's bytes; ``None`` for image
            files under ``root`` (:func:`datakit.conversion.sources.files.entry_bytes`).
        rejected: ``(name, reason)`` of each image the scan found but cannot
            convert (a dataset row without a label, a tar shard that ends
            early); reported as skipped.
        schema: the samples' fields when they are more than an image and its
            label (:mod:`datakit.format.fields`); ``None`` for a classification source.
        fields: how a reader process gets each entry's other field values.
        notes: what the scan left out that the caller should hear of (a
            dataset's columns no field can hold); :func:`datakit.convert` warns
            with each.
        payload_kind: ``"raw"`` when the source's images are pixel arrays,
            which are stored as raw records whatever format was asked for;
            ``""`` to store them as asked (the pickle recipe's stores,
            :mod:`datakit.conversion.sources.foreign.recipe_lmdb`).
        unlabelled: the images carry no label (the pickle recipe's bare pixel
            arrays): no classes, every entry's label -1, an unlabelled store.
        standalone_names: entries are named ``<store name>/<key>`` (an existing
            store's samples), not by paths under ``root``: shown as they are.
        splits: the rows of each split converted, in order, for a source made of
            splits (a Hugging Face ``DatasetDict``); empty for other sources.
    """

    root: str
    classes: list[str]
    entries: list[SourceEntry]
    ignored: list[str] = field(default_factory=list)
    unreadable: list[UnreadableFolder] = field(default_factory=list)
    extensions: tuple[str, ...] = IMG_EXTENSIONS
    loops: list[SymlinkLoop] = field(default_factory=list)
    class_order: str = "text"
    kind: str = "folder"
    reader: EntryBytes | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)
    payload_kind: str = ""
    unlabelled: bool = False
    standalone_names: bool = False
    splits: dict[str, int] = field(default_factory=dict)
    schema: Schema | None = None
    fields: EntryFields | None = None
    notes: list[str] = field(default_factory=list)

    def hidden_classes(self) -> list[str]:
        """Class folders whose name starts with a dot (``.ipynb_checkpoints``): classes to
        ``ImageFolder`` too, though they are rarely meant as one; none for other sources."""
        return [name for name in self.classes if name.startswith(".")] if self.kind == "folder" else []

    def empty_classes(self) -> list[str]:
        """Classes with no image at all (kept, so labels match ``ImageFolder``), leaving
        out class folders that could not be read: they are reported as unreadable."""
        used = {entry.label for entry in self.entries}
        locked = {item.path for item in self.unreadable}
        return [name for label, name in enumerate(self.classes) if label not in used and name not in locked]
