"""Path lookup: ``dataset.samples`` as ``ImageFolder`` has it, read lazily from the store, and back.

torchvision's ``ImageFolder`` holds ``samples``, a list of ``(path, class
index)`` for every image, and code written for it reaches for that list (to
find a file's sample, to split by folder, to log what was read). A list of
ten million paths is gigabytes, and each ``fork``-ed worker would copy it
page by page as reference counts change. :class:`SamplePaths` is the same
sequence without the list: it reads paths from the store (which keeps every
record's relative path) when asked, a slice or a window at a time, and holds
nothing but a reader function, the source root and the label array the
dataset already has.

:class:`PathIndex` answers "which sample is this file?" for
``dataset.index_of``: built on first use by reading every path once, it keeps
one 64-bit hash and one position per sample (16 bytes; 160 MB for ten
million samples), sorted by hash, and confirms a match by reading the
candidate's path back, so a hash collision costs a read, never a wrong answer.

:class:`PathLookup` is the two together, as a dataset uses them: built in the
process that asks, never pickled.
"""

from __future__ import annotations

import bisect
import operator
import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import overload

import numpy as np

from datakit.errors import ReadOnlyAttributeError

__all__ = ["ReadPaths", "SamplePaths", "PathIndex", "PathLookup", "read_only"]

ReadPaths = Callable[[int, int], list[str]]
"""``read(start, stop)``: the relative, ``/``-separated source paths of samples ``start .. stop - 1``."""

_WINDOW = 4096  # paths read at a time while iterating or building the index


class SamplePaths(Sequence[tuple[str, int]]):
    """A read-only sequence of ``(path, label)``, one per sample, as ``ImageFolder.samples``.

    ``path`` is the original file's path: the store's relative path joined to
    the folder the sample was converted from (the manifest's ``source``, or
    the ``source`` of the append that added it); the file need not exist any
    more. Indexing (negative indices too) reads one path, a slice reads its
    range and gives a list, iteration reads windows of :data:`_WINDOW` paths.

    Args:
        read: reads a range of relative paths from the store.
        roots: ``(first index, source folder)`` of each run that added samples, in
            index order (:func:`datakit.format.manifest.source_spans`).
        labels: every sample's label.
    """

    def __init__(self, read: ReadPaths, roots: Sequence[tuple[int, str]], labels: np.ndarray) -> None:
        self._read = read
        self._starts = [start for start, _ in roots]
        self._roots = [root for _, root in roots]
        self._labels = labels

    def root(self, position: int) -> str:
        """The source folder sample ``position`` (0 to ``len(self) - 1``) was converted from."""
        return self._roots[bisect.bisect_right(self._starts, position) - 1]

    def __len__(self) -> int:
        return len(self._labels)

    @overload
    def __getitem__(self, index: int) -> tuple[str, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[str, int] | list[tuple[str, int]]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            positions = range(start, stop, step)
            if not positions:
                return []
            low, high = min(positions), max(positions) + 1
            if step in (1, -1) or high - low <= 2 * len(positions):
                paths = self._read(low, high)  # one range read, thinned here
                return [self._pair(position, paths[position - low]) for position in positions]
            return [self[position] for position in positions]
        length = len(self)
        position = operator.index(index)  # a TypeError for anything but an integer or a slice
        if position < 0:
            position += length
        if not 0 <= position < length:
            raise IndexError(f"sample index {index} is out of range for {length} samples")
        return self._pair(position, self._read(position, position + 1)[0])

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for start in range(0, len(self), _WINDOW):
            yield from self[start:start + _WINDOW]

    def _pair(self, position: int, relative: str) -> tuple[str, int]:
        label = self._labels[position]  # a multi-hot row in a multi-label store
        path = os.path.join(self.root(position), *relative.split("/"))
        return path, int(label) if label.ndim == 0 else label.copy()

    def __repr__(self) -> str:
        under = self._roots[0] if len(set(self._roots)) == 1 else f"{len(set(self._roots))} folders"
        return f"<{len(self)} (path, label) samples under {under}, read from the store on access>"


class PathIndex:
    """Sample positions by relative path, for ``dataset.index_of``.

    Hashes are Python's ``hash()`` of the path, which differs between
    interpreters: an index is used by the process that built it (and its
    forked children, which share the hash seed) and is never pickled.
    """

    def __init__(self, hashes: np.ndarray, positions: np.ndarray) -> None:
        self._hashes = hashes
        self._positions = positions

    @classmethod
    def build(cls, read: ReadPaths, length: int) -> PathIndex:
        """Read every path once, a window at a time, and sort their hashes."""
        hashes = np.empty(length, dtype=np.int64)
        for start in range(0, length, _WINDOW):
            paths = read(start, min(length, start + _WINDOW))
            hashes[start:start + len(paths)] = np.fromiter((hash(path) for path in paths),
                                                           dtype=np.int64, count=len(paths))
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], order.astype(np.int64))

    def candidates(self, relative: str) -> Sequence[int]:
        """The positions whose path may be ``relative`` (equal hashes), in index order."""
        key = np.int64(hash(relative))
        low = int(np.searchsorted(self._hashes, key, side="left"))
        high = int(np.searchsorted(self._hashes, key, side="right"))
        return [int(position) for position in self._positions[low:high]]


class PathLookup:
    """A dataset's samples by path and back: ``samples``, ``source_path`` and ``index_of``.

    Args:
        read: reads a range of relative paths from the store.
        roots: ``(first index, source folder)`` of the conversion and of each
            append (:func:`datakit.format.manifest.source_spans`).
        labels: every sample's label.
        where: the store, as messages name it.
    """

    def __init__(self, read: ReadPaths, roots: Sequence[tuple[int, str]], labels: np.ndarray,
                 where: str) -> None:
        self.samples = SamplePaths(read, roots, labels)
        self._read = read
        self._roots = list(dict.fromkeys(root for _, root in roots))
        self._where = where
        self._index: PathIndex | None = None

    def index_of(self, path: str | os.PathLike[str]) -> int:
        """The index of the sample converted from ``path`` (relative to its source folder,
        with ``/`` or the system's separator, or absolute under it); the index is built
        on the first call.

        Raises:
            KeyError: no sample was converted from ``path``; the message names it.
        """
        wanted = self._relative_paths(path)
        if self._index is None:
            self._index = PathIndex.build(self._read, len(self.samples))
        for relative, root in wanted:
            for position in self._index.candidates(relative):
                if root not in (None, self.samples.root(position)):
                    continue  # that name, but stored from another folder
                if self._read(position, position + 1)[0] == relative:
                    return position
        raise KeyError(f"{os.fspath(path)!r} is not a sample of {self._where} (paths are relative to "
                       f"{' or '.join(self._roots)}, '/'-separated)")

    def _relative_paths(self, path: str | os.PathLike[str]) -> list[tuple[str, str | None]]:
        """``(relative path, source folder)`` for each folder of the store that an absolute ``path``
        lies under (the folder ``None`` for a relative ``path``: any will do)."""
        text = os.fspath(path)
        if not os.path.isabs(text):
            return [(posixpath.normpath(text.replace(os.sep, "/")), None)]
        found: list[tuple[str, str | None]] = []
        for root in self._roots:
            relative = os.path.relpath(text, root)
            if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
                found.append((posixpath.normpath(relative.replace(os.sep, "/")), root))
        if not found:
            raise KeyError(f"{text!r} is not under {' or '.join(self._roots)}, the folder(s) "
                           f"{self._where} was converted from")
        return found


def read_only(owner: str, name: str, store: str) -> ReadOnlyAttributeError:
    """The error for assigning ``samples`` or ``imgs``: views of the store, there is no list to assign to."""
    return ReadOnlyAttributeError(
        f"{owner}.{name} is read-only: it is read from the store "
        f"({store}) on access, not held as a list that could be replaced. "
        "For fewer or reordered samples use torch.utils.data.Subset(dataset, indices); "
        "for other files, convert them into a store of their own")
