"""WebDataset tar shards as a conversion source.

``datakit convert shards/ DEST`` takes uncompressed ``.tar`` shards (one file,
or a folder of them, in name order) laid out as WebDataset writes them: the
members of a sample share a key, the member's path up to the first dot of
its file name (``train/0001.jpg`` and ``train/0001.cls`` are the sample
``train/0001``). A sample's image is its ``.jpg``, ``.jpeg``, ``.png`` or
``.webp`` member (the first of them, in that order, when it has several); its
label is its ``.cls`` member (an integer or a class name, as text) or else
the ``label`` of its ``.json`` member (``--label-key`` names another key).
The classes are the labels, sorted as a label file's are
(:func:`~datakit.conversion.sources.class_names.sorted_classes`: integers as numbers),
and bounded as theirs are (:func:`~datakit.conversion.sources.class_names.label_problem`:
a class name of at most 1024 characters, an integer within int64).

Each sample is an entry named ``<shard>/<key>.<extension>`` (the shard's
name without ``.tar``), the name ``--resume`` and ``--append`` match it by;
its bytes are found by (shard, offset, size) and read in the reader
processes, so no image passes through the converting process. Labels are
read while scanning (they are a few bytes each).

A sample with an image and no label, or a label out of bounds, is refused
before anything is written, naming the shard and the key (give labels with
``--labels`` instead); a broken image is skipped and listed like a broken
file; a shard that is not a tar is listed as skipped. A shard that ends early
(cut inside a member, its header or its data, or without the end-of-archive
blocks after its last member) is listed with the samples it kept: those
before the sample it stops in, or stops just after (which may lack members,
its label among them), which is listed as truncated. Samples without an
image are ignored and listed. The store's progress records the
shards' names, sizes and times (:func:`~datakit.conversion.sources.files.files_digest`).
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.class_names import (
    MAX_CLASS_NAME,
    LongInteger,
    class_order,
    json_integer,
    label_problem,
    sorted_classes,
)
from datakit.conversion.sources.entries import SourceEntry, SourceFolder
from datakit.conversion.sources.files import files_digest
from datakit.errors import SourceError
from datakit.format.records import HEADER_SIZE

__all__ = ["SHARD_SUFFIX", "IMAGE_EXTENSIONS", "TarBytes", "shard_files", "scan_webdataset"]

SHARD_SUFFIX = ".tar"
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
"""A sample's image member extensions, in the order one is chosen when it has several."""

_CLS_BYTES = 4 * MAX_CLASS_NAME + 1024
"""The most bytes of a ``.cls`` member read: a class name of UTF-8 text, and room for blanks."""


@dataclass(frozen=True)
class TarBytes:
    """The bytes of tar members: an entry's location is ``(shard index, offset, size)``."""

    shards: tuple[str, ...]

    def read(self, entry: SourceEntry) -> bytearray:
        if len(entry.location) != 3:
            raise BadImage("not a sample of the shards")
        shard, offset, size = entry.location
        framed = bytearray(HEADER_SIZE + size)
        filled = HEADER_SIZE
        try:
            with open(self.shards[shard], "rb", buffering=0) as stream, memoryview(framed) as view:
                stream.seek(offset)
                while filled < len(framed):
                    count = stream.readinto(view[filled:])
                    if not count:
                        break
                    filled += count
        except OSError as exc:
            raise BadImage(f"unreadable: {exc.strerror or exc}") from None
        if filled < len(framed):
            raise BadImage(f"truncated: the shard ends {len(framed) - filled} bytes before the member does")
        return framed

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Nothing to fetch ahead: reads are local."""

    def close(self) -> None:
        """Nothing to release: each read opens and closes its shard."""


@dataclass
class _Sample:
    """The members of one key, by lower-case extension (the first of each), and the text of its
    label members (``.cls``, ``.json``)."""

    members: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    cut: bool = False
    """The shard ends inside one of its members, or just after it (it may lack members)."""


@dataclass
class _Found:
    """What the scan found so far: named samples with their places and labels, and the rest."""

    names: list[str] = field(default_factory=list)
    places: list[tuple[int, int, int]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)


def shard_files(root: str) -> list[str]:
    """The shards at ``root``: the file itself, or the folder's ``.tar`` files in name order."""
    if os.path.isfile(root):
        return [root]
    return [os.path.join(root, name) for name in sorted(os.listdir(root))
            if name.lower().endswith(SHARD_SUFFIX) and os.path.isfile(os.path.join(root, name))]


def scan_webdataset(root: str, label_key: str | None) -> tuple[SourceFolder, str]:
    """The samples of the shards at ``root`` and the scan rules that name them in a store's progress.

    Args:
        root: a ``.tar`` file, or a folder of them.
        label_key: the key of a ``.json`` member's label (``"label"``); ``None``
            when the labels come from a label file (every label is 0 here).

    Raises:
        SourceError: no shard at ``root``, a sample without a label, or a
            label that is not an integer or a class name (naming shard and key).
    """
    shards = shard_files(root)
    if not shards:
        raise SourceError(f"no .tar shards in {root}")
    found = _Found()
    for index, shard in enumerate(shards):
        _add_shard(found, index, shard, label_key)
    if not found.names and not found.rejected:
        raise SourceError(f"no samples with a .jpg, .jpeg, .png or .webp member in the shards at {root}")
    classes = sorted_classes(set(found.labels))
    position = {name: number for number, name in enumerate(classes)}
    entries = [SourceEntry(name, position[label], location=place)
               for name, place, label in zip(found.names, found.places, found.labels, strict=True)]
    label = label_key if label_key is not None else "(label file)"
    rules = f"webdataset label={label} shards sha256:{files_digest(shards, root)}"
    return SourceFolder(root, classes, entries, ignored=found.ignored, class_order=class_order(classes),
                        kind="webdataset", reader=TarBytes(tuple(shards)), rejected=found.rejected), rules


def _add_shard(found: _Found, index: int, shard: str, label_key: str | None) -> None:
    """Add the samples of the ``index``-th shard to ``found``."""
    stem = _stem(shard)
    samples, problem = _read_members(shard)
    if problem:
        found.rejected.append((f"{stem}.tar", problem))
    for key, sample in samples.items():
        image = next((ext for ext in IMAGE_EXTENSIONS if ext in sample.members), None)
        if image is None:
            found.ignored.extend(f"{stem}/{member.name}" for member in sample.members.values())
            continue
        name = f"{stem}/{key}.{image}"
        if key.startswith("/") or ".." in key.split("/"):
            found.rejected.append((name, "the member's name is absolute or climbs out with '..'; an export "
                                         "would write it outside its folder"))
            continue
        if sample.cut:
            found.rejected.append((name, "truncated: the shard ends in this sample, or just after it, so it "
                                         "may lack members"))
            continue
        member = sample.members[image]
        found.names.append(name)
        found.places.append((index, member.offset_data, member.size))
        found.labels.append("" if label_key is None else _label(shard, key, sample, label_key))


def _stem(shard: str) -> str:
    name = os.path.basename(shard)
    return name[:-len(SHARD_SUFFIX)] if name.lower().endswith(SHARD_SUFFIX) else name


def _read_members(shard: str) -> tuple[dict[str, _Sample], str]:
    """The samples of ``shard`` by key, in order, and why it could not be read to its end ("" if it was).

    Label members are read here, while the shard is open; images only by their place.
    """
    samples: dict[str, _Sample] = {}
    try:
        size = os.path.getsize(shard)
        with tarfile.open(shard, mode="r:") as tar:  # uncompressed: members are read by offset
            for member in tar:
                key, extension = _field(member)
                if not key:
                    continue  # not a regular file, or no extension: no field of any sample
                sample = samples.setdefault(key, _Sample())
                first = sample.members.setdefault(extension, member) is member  # else the first counts
                if member.offset_data + member.size > size:
                    return _cut_short(samples, f"inside {member.name}")
                if first and extension in ("cls", "json"):
                    sample.texts[extension] = _text(tar, member, _CLS_BYTES if extension == "cls" else -1)
            if not _ends_whole(shard, tar.offset):
                return _cut_short(samples, f"at byte {tar.offset}: neither a whole member header nor the "
                                           "end-of-archive blocks")
    except (tarfile.TarError, OSError, EOFError) as exc:
        if not samples:
            return samples, f"not an uncompressed tar file ({exc})"
        return _cut_short(samples, str(exc))
    return samples, ""


def _field(member: tarfile.TarInfo) -> tuple[str, str]:
    """The sample key and the lower-case extension of a member; ``("", "")`` for no field."""
    if not member.isreg():
        return "", ""
    folder, _, base = member.name.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not dot or not stem:
        return "", ""
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _text(tar: tarfile.TarFile, member: tarfile.TarInfo, most: int) -> str:
    """A label member's text (its first ``most`` bytes at most; ``-1``: all of it)."""
    extracted = tar.extractfile(member)
    return extracted.read(most).decode("utf-8", "replace") if extracted else ""


def _ends_whole(shard: str, offset: int) -> bool:
    """Whether the end-of-archive blocks (zeros) are at ``offset``, where ``tarfile`` stopped: it
    stops without an error at a cut or damaged header too."""
    with open(shard, "rb") as stream:
        stream.seek(offset)
        return stream.read(tarfile.BLOCKSIZE) == bytes(tarfile.BLOCKSIZE)


def _cut_short(samples: dict[str, _Sample], why: str) -> tuple[dict[str, _Sample], str]:
    """``samples`` with the last one marked cut, and why the shard ended early, saying what was kept."""
    if not samples:
        return samples, f"ends early ({why}) before its first sample"
    last = next(reversed(samples))
    samples[last].cut = True
    return samples, (f"ends early ({why}): its first {len(samples) - 1} sample(s) were read whole; nothing "
                     f"from the sample {last!r} on was converted")


def _label(shard: str, key: str, sample: _Sample, label_key: str) -> str:
    """A sample's class name: its ``.cls`` text, or its ``.json`` object's ``label_key``, in bounds."""
    if "cls" in sample.members:
        member = f"{key}.cls"
        if sample.members["cls"].size > _CLS_BYTES:
            raise SourceError(f"{shard}: {member} holds {sample.members['cls'].size} bytes; it holds the "
                              f"sample's class, a name of at most {MAX_CLASS_NAME} characters or an integer")
        text = sample.texts["cls"].strip()
        if not text:
            raise SourceError(f"{shard}: {member} is empty; it holds the sample's class (an integer or a "
                              "name)")
    elif "json" in sample.members:
        member = f"{key}.json"
        text = _json_label(shard, member, sample.texts["json"], label_key)
    else:
        raise SourceError(f"{shard}: the sample {key!r} has no label: no {key}.cls and no {key}.json; add "
                          "them, or give the labels in a file with --labels naming each sample as "
                          "<shard>/<key>.<extension>")
    problem = label_problem(text)
    if problem is not None:
        raise SourceError(f"{shard}: {member}: {problem}")
    return text


def _json_label(shard: str, member: str, text: str, label_key: str) -> str:
    """The text of the ``label_key`` of a ``.json`` member (an integer or a class name)."""
    try:
        value = json.loads(text, parse_int=json_integer)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise SourceError(f"{shard}: {member} is not valid JSON ({exc})") from None
    label = value.get(label_key) if isinstance(value, dict) else None
    if isinstance(label, bool) or not isinstance(label, (int, str, LongInteger)) or not str(label).strip():
        raise SourceError(f"{shard}: {member} has no {label_key!r} that is an integer or a class name; "
                          "name the key holding the label with --label-key, or give the labels with --labels")
    return str(label).strip()
