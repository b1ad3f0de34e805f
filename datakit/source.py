"""Scanning an image folder laid out like torchvision's ``ImageFolder``.

``root/<class>/**/<image>``: every sub-directory of ``root`` is a class, in
sorted order, and its label is its position in that order; images are found
recursively below each class directory and sorted by relative path, so a scan
of the same folder always yields the same entries in the same order. That
determinism is what lets ``--resume`` continue a conversion.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from datakit.errors import SourceError

__all__ = ["IMAGE_EXTENSIONS", "SourceEntry", "SourceFolder", "scan_folder"]

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)


@dataclass(frozen=True)
class SourceEntry:
    """One image file: its path relative to the root (``/``-separated) and its label."""

    path: str
    label: int


@dataclass
class SourceFolder:
    """The result of a scan.

    Attributes:
        root: absolute path of the folder.
        classes: class names, sorted.
        entries: image files, grouped by class and sorted within each.
        ignored: files that are not images by extension, or lie outside any
            class directory; reported, never converted.
    """

    root: str
    classes: list[str]
    entries: list[SourceEntry]
    ignored: list[str] = field(default_factory=list)

    def empty_classes(self) -> list[str]:
        """Classes with no image at all (kept, so labels match ``ImageFolder``)."""
        used = {entry.label for entry in self.entries}
        return [name for label, name in enumerate(self.classes) if label not in used]


def is_image_name(name: str) -> bool:
    """Whether a file name has one of the supported image extensions, in any case."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def scan_folder(root: str | os.PathLike[str]) -> SourceFolder:
    """Scan ``root`` into classes and image entries.

    Raises:
        SourceError: ``root`` is not a readable directory, or holds no image.
    """
    root = os.path.abspath(os.fspath(root))
    if not os.path.isdir(root):
        raise SourceError(f"{root} is not a directory")
    try:
        top = sorted(os.scandir(root), key=lambda item: item.name)
    except OSError as exc:
        raise SourceError(f"cannot list {root}: {exc.strerror}") from None
    classes = [item.name for item in top if item.is_dir()]
    ignored = [item.name for item in top if not item.is_dir()]
    entries = []
    for label, name in enumerate(classes):
        for relative in _walk_files(root, name):
            if is_image_name(relative):
                entries.append(SourceEntry(relative, label))
            else:
                ignored.append(relative)
    if not entries:
        raise SourceError(
            f"no images found in {root}: expected class folders like {root}/<class>/<image> "
            f"with extensions {', '.join(sorted(IMAGE_EXTENSIONS))}"
        )
    return SourceFolder(root, classes, entries, ignored)


def _walk_files(root: str, class_name: str) -> Iterator[str]:
    """Relative paths of every file under ``root/class_name``, sorted, following
    directory symlinks once (a link back up the tree would otherwise loop)."""
    found: list[str] = []
    seen_dirs: set[str] = set()
    for directory, subdirs, files in os.walk(os.path.join(root, class_name), followlinks=True):
        real = os.path.realpath(directory)
        if real in seen_dirs:
            subdirs[:] = []
            continue
        seen_dirs.add(real)
        relative_dir = os.path.relpath(directory, root)
        found.extend(os.path.join(relative_dir, name).replace(os.sep, "/") for name in files)
    found.sort()
    return iter(found)
