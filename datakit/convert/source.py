"""Scanning an image folder exactly as torchvision's ``ImageFolder`` does.

``root/<class>/**/<image>``: the classes are
``sorted(entry.name for entry in os.scandir(root) if entry.is_dir())`` and a
label is a class's position in that list. Below each class folder the files
come in the order of ``sorted(os.walk(class_dir, followlinks=True))``, each
folder's files sorted by name (torchvision's ``make_dataset``): folders in the
string order of their paths, so the same index means the same image in a
datakit store and in ``ImageFolder``. The file set is ``ImageFolder``'s too:
names ending, in any case, in one of :data:`IMG_EXTENSIONS`, plus any
extensions the caller adds.

Two deliberate differences, both where ``ImageFolder`` would go wrong: a
symlink to a folder that contains it (its own folder, the root, or above) is
not followed but listed in :attr:`SourceFolder.loops` (``ImageFolder`` walks
``cat/loop -> ..`` into every other class, storing their images again under
``cat``, and recurses until the OS refuses the path); and a folder that
cannot be read is reported in :attr:`SourceFolder.unreadable` instead of
being left out without a word. A hidden class folder (``.ipynb_checkpoints``)
is a class, as in ``ImageFolder``; :meth:`SourceFolder.hidden_classes` names
them, so that the conversion can warn.

The scan is deterministic, which is what lets ``--resume`` continue a
conversion; :data:`SCAN_RULES` names these rules in a resumable store, and
:func:`legacy_order_matches` tells whether a store started under the rules
before them (sorted relative paths, GIFs included) can be continued.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from datakit.errors import SourceError

__all__ = [
    "IMG_EXTENSIONS",
    "SCAN_RULES",
    "SourceEntry",
    "EntryBytes",
    "UnreadableFolder",
    "SymlinkLoop",
    "SourceFolder",
    "normalise_extensions",
    "scan_rules",
    "scan_folder",
    "legacy_order_matches",
]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's ``IMG_EXTENSIONS``, matched case-insensitively at the end of a name."""

SCAN_RULES = "imagefolder"
"""The name of these scan rules, recorded in a store's conversion progress."""

_LEGACY_EXTENSIONS = frozenset(IMG_EXTENSIONS) | {".gif"}


@dataclass(frozen=True)
class SourceEntry:
    """One image of a source: its name (a path relative to the root, ``/``-separated), its label,
    and where its bytes are.

    In a multi-label conversion ``classes`` holds every class of the image,
    ascending, and ``label`` is the first of them; otherwise it is empty.
    ``location`` is empty for a file (``path`` says where it is); for an image
    inside a larger file it is what the source's
    :class:`~datakit.convert.entry_bytes.EntryBytes` needs to find it: a few
    integers, so that the entries of ten million images stay small in every reader.
    """

    path: str
    label: int
    classes: tuple[int, ...] = ()
    location: tuple[int, ...] = ()


class EntryBytes(Protocol):
    """Reads an entry's bytes in a reader process (:mod:`datakit.convert.entry_bytes`): a small
    picklable description of the source, that opens what it reads in the process that reads."""

    def read(self, entry: SourceEntry) -> bytearray:
        """The entry's bytes after :data:`~datakit.records.HEADER_SIZE` bytes of room.

        Raises:
            BadImage: the bytes cannot be read (the message says why).
        """
        ...

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """A hint that ``entries`` are read next, in this order: a source that fetches over a network
        (:class:`~datakit.convert.recipe_mongo.MongoImages`) fetches them in one query."""
        ...

    def close(self) -> None:
        """Release what this process opened (the next :meth:`read` opens it again)."""
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
            are all integers, :mod:`datakit.convert.labelfile`).
        kind: what the source is: ``"folder"`` (image files), ``"huggingface"``
            (a ``datasets`` dataset on disk), ``"webdataset"`` (tar shards), or an
            existing store: ``"recipe_lmdb"``, ``"image_lmdb"``, ``"recipe_mongo"``.
        reader: how a reader process gets an entry's bytes; ``None`` for image
            files under ``root`` (:func:`datakit.convert.entry_bytes.entry_bytes`).
        rejected: ``(name, reason)`` of each image the scan found but cannot
            convert (a dataset row without a label, a tar shard that ends
            early); reported as skipped.
        payload_kind: ``"raw"`` when the source's images are pixel arrays,
            which are stored as raw records whatever format was asked for;
            ``""`` to store them as asked (the pickle recipe's stores,
            :mod:`datakit.convert.recipe_lmdb`).
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


def normalise_extensions(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """``IMG_EXTENSIONS`` followed by ``extra``, each lower-cased and starting with a dot.

    Raises:
        ValueError: an extension is empty.
    """
    found = list(IMG_EXTENSIONS)
    for extension in extra:
        cleaned = extension.strip().lower()
        if cleaned.strip(".") == "":
            raise ValueError(f"{extension!r} is not a file extension; write them like .gif,.jfif")
        cleaned = cleaned if cleaned.startswith(".") else "." + cleaned
        if cleaned not in found:
            found.append(cleaned)
    return tuple(found)


def scan_rules(extensions: tuple[str, ...]) -> str:
    """How a scan with ``extensions`` is named in a store's progress: the rules and the
    extensions beyond ``ImageFolder``'s, since both decide the order of the records."""
    extra = sorted(set(extensions) - set(IMG_EXTENSIONS))
    return SCAN_RULES + (" +" + ",".join(extra) if extra else "")


def scan_folder(root: str | os.PathLike[str], extensions: Iterable[str] = ()) -> SourceFolder:
    """Scan ``root`` into classes and image entries.

    Args:
        root: the image folder (``~`` is expanded).
        extensions: file extensions to take besides :data:`IMG_EXTENSIONS`.

    Raises:
        SourceError: ``root`` is not a readable directory, or holds no image.
        ValueError: an extension is empty.
    """
    taken = normalise_extensions(extensions)
    root = os.path.abspath(os.path.expanduser(os.fspath(root)))
    if not os.path.isdir(root):
        raise SourceError(f"{root} is not a directory")
    try:
        with os.scandir(root) as listing:
            top = sorted(listing, key=lambda item: item.name)
    except OSError as exc:
        raise SourceError(f"cannot list {root}: {exc.strerror}") from None
    classes = [item.name for item in top if item.is_dir()]
    ignored = [item.name for item in top if not item.is_dir()]
    entries: list[SourceEntry] = []
    unreadable: list[UnreadableFolder] = []
    loops: list[SymlinkLoop] = []
    for label, name in enumerate(classes):
        for relative in _walk_files(root, name, unreadable, loops):
            if relative.lower().endswith(taken):
                entries.append(SourceEntry(relative, label))
            else:
                ignored.append(relative)
    if not entries:
        problem = "".join(f"; cannot read {root}/{item.path}: {item.reason}" for item in unreadable[:3])
        raise SourceError(
            f"no images found in {root}: expected class folders like {root}/<class>/<image> "
            f"with extensions {', '.join(taken)}{problem}"
        )
    return SourceFolder(root, classes, entries, ignored, unreadable, taken,
                        sorted(loops, key=lambda loop: loop.path))


def _walk_files(root: str, class_name: str, unreadable: list[UnreadableFolder],
                loops: list[SymlinkLoop]) -> Iterator[str]:
    """Relative paths of every file under ``root/class_name``, in ``ImageFolder``'s order.

    That is ``sorted(os.walk(..., followlinks=True))`` with each folder's files
    sorted, except that a symlink to a folder containing it (one on the walk from
    the root down to it, or above the root) is not entered but added to ``loops``.
    A folder that cannot be listed is added to ``unreadable``.
    """
    top = os.path.join(root, class_name)
    real_root = os.path.realpath(root)
    chains: dict[str, tuple[str, ...]] = {}  # folder -> real paths of the folders above it, root first
    found: list[tuple[str, list[str]]] = []

    def failed(exc: OSError) -> None:
        where = exc.filename if isinstance(exc.filename, str) else top
        unreadable.append(UnreadableFolder(_relative(where, root), exc.strerror or str(exc)))

    for directory, subdirs, files in os.walk(top, onerror=failed, followlinks=True):
        chain = (*chains.pop(directory, (real_root,)), os.path.realpath(directory))
        kept = []
        for name in subdirs:
            path = os.path.join(directory, name)
            target = os.path.realpath(path)
            if any(_contains(target, walked) for walked in chain):  # walking it again would never end
                inside = _contains(real_root, target)
                loops.append(SymlinkLoop(_relative(path, root),
                                         _relative(target, real_root) if inside else target))
                continue
            chains[path] = chain
            kept.append(name)
        subdirs[:] = kept
        found.append((directory, sorted(files)))
    found.sort()
    listed: list[str] = []
    for directory, files in found:  # one relpath per folder, not per file: it is the scan's main cost
        prefix = _relative(directory, root)
        prefix = "" if prefix == "." else prefix + "/"
        listed.extend(prefix + name for name in files)
    return iter(listed)


def _contains(folder: str, path: str) -> bool:
    """Whether the real path ``path`` is ``folder`` or lies below it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def legacy_order_matches(folder: SourceFolder) -> bool:
    """Whether the scan before ``ImageFolder``'s rules found the same files in the same order.

    Those rules sorted each class's relative paths and took ``.gif`` files as
    well; a store they started can be resumed under the new rules only when
    both give the same list (flat class folders without GIFs, for instance).
    """
    if folder.extensions != IMG_EXTENSIONS:
        return False
    def legacy_image(path: str) -> bool:
        return os.path.splitext(path)[1].lower() in _LEGACY_EXTENSIONS

    current = [(entry.label, entry.path) for entry in folder.entries]
    return (sorted(current) == current and all(legacy_image(path) for _, path in current)
            and not any("/" in path and legacy_image(path) for path in folder.ignored))
