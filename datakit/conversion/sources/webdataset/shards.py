"""Reading tar shards: their members grouped by sample key, where a shard ends early, members' bytes by place.

A member's sample key is its path up to the first dot of its file name, and
its extension the rest, lower-cased (``train/0001.seg.png`` is the member
``seg.png`` of the sample ``train/0001``), as webdataset groups them. The scan
reads only member headers, and the few bytes the scan needs (a ``.cls``, a
``.json``, an ``.npy`` header); everything else is read later, in the reader
processes, by ``(shard, offset, size)`` (:func:`read_place`), never more than
the member's size.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field

from datakit.conversion.images.checks import BadImage
from datakit.conversion.sources.entries import SourceEntry
from datakit.format.records import HEADER_SIZE

__all__ = ["SHARD_SUFFIX", "Sample", "TarBytes", "shard_files", "shard_stem", "read_members", "read_place"]

SHARD_SUFFIX = ".tar"


@dataclass
class Sample:
    """The members of one key, by lower-case extension (the first of each), and the bytes the scan
    read of some of them (:func:`read_members`'s ``heads``)."""

    members: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    heads: dict[str, bytes] = field(default_factory=dict)
    cut: bool = False
    """The shard ends inside one of its members, or just after it (it may lack members)."""


@dataclass(frozen=True)
class TarBytes:
    """The bytes of tar members: an entry's location starts with ``(shard index, offset, size)``
    of its image (:mod:`~datakit.conversion.sources.webdataset.members` adds its other members')."""

    shards: tuple[str, ...]

    def read(self, entry: SourceEntry) -> bytearray:
        if len(entry.location) < 3:
            raise BadImage("not a sample of the shards")
        shard, offset, size = entry.location[:3]
        return read_place(self.shards[shard], offset, size, HEADER_SIZE)

    def prefetch(self, entries: Sequence[SourceEntry]) -> None:
        """Nothing to fetch ahead: reads are local."""

    def close(self) -> None:
        """Nothing to release: each read opens and closes its shard."""


def read_place(shard: str, offset: int, size: int, room: int = 0) -> bytearray:
    """``size`` bytes of ``shard`` from ``offset``, after ``room`` zero bytes.

    Raises:
        BadImage: the shard cannot be read, or ends before the member does.
    """
    framed = bytearray(room + size)
    filled = room
    try:
        with open(shard, "rb", buffering=0) as stream, memoryview(framed) as view:
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


def shard_files(root: str) -> list[str]:
    """The shards at ``root``: the file itself, or the folder's ``.tar`` files in name order."""
    if os.path.isfile(root):
        return [root]
    return [os.path.join(root, name) for name in sorted(os.listdir(root))
            if name.lower().endswith(SHARD_SUFFIX) and os.path.isfile(os.path.join(root, name))]


def shard_stem(shard: str) -> str:
    """The shard's file name without ``.tar``: the first part of its samples' names."""
    name = os.path.basename(shard)
    return name[:-len(SHARD_SUFFIX)] if name.lower().endswith(SHARD_SUFFIX) else name


def read_members(shard: str, heads: dict[str, int]) -> tuple[dict[str, Sample], str]:
    """The samples of ``shard`` by key, in order, and why it could not be read to its end ("" if it was).

    Args:
        heads: how many bytes to read, while the shard is open, of each member
            whose extension (or its last dotted part: ``npy`` of ``depth.npy``) is
            a key (``-1``: all of it); other members are only located.
    """
    samples: dict[str, Sample] = {}
    try:
        size = os.path.getsize(shard)
        with tarfile.open(shard, mode="r:") as tar:  # uncompressed: members are read by offset
            for member in tar:
                key, extension = _key_and_extension(member)
                if not key:
                    continue  # not a regular file, or no extension: no field of any sample
                sample = samples.setdefault(key, Sample())
                first = sample.members.setdefault(extension, member) is member  # else the first counts
                if member.offset_data + member.size > size:
                    return _cut_short(samples, f"inside {member.name}")
                most = heads.get(extension, heads.get(extension.rpartition(".")[2]))
                if first and most is not None:
                    extracted = tar.extractfile(member)
                    sample.heads[extension] = extracted.read(most) if extracted else b""
            if not _ends_whole(shard, tar.offset):
                return _cut_short(samples, f"at byte {tar.offset}: neither a whole member header nor the "
                                           "end-of-archive blocks")
    except (tarfile.TarError, OSError, EOFError) as exc:
        if not samples:
            return samples, f"not an uncompressed tar file ({exc})"
        return _cut_short(samples, str(exc))
    return samples, ""


def _key_and_extension(member: tarfile.TarInfo) -> tuple[str, str]:
    """The sample key and the lower-case extension of a member; ``("", "")`` for no field."""
    if not member.isreg():
        return "", ""
    folder, _, base = member.name.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not dot or not stem:
        return "", ""
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _ends_whole(shard: str, offset: int) -> bool:
    """Whether the end-of-archive blocks (zeros) are at ``offset``, where ``tarfile`` stopped: it
    stops without an error at a cut or damaged header too."""
    with open(shard, "rb") as stream:
        stream.seek(offset)
        return stream.read(tarfile.BLOCKSIZE) == bytes(tarfile.BLOCKSIZE)


def _cut_short(samples: dict[str, Sample], why: str) -> tuple[dict[str, Sample], str]:
    """``samples`` with the last one marked cut, and why the shard ended early, saying what was kept."""
    if not samples:
        return samples, f"ends early ({why}) before its first sample"
    last = next(reversed(samples))
    samples[last].cut = True
    return samples, (f"ends early ({why}): its first {len(samples) - 1} sample(s) were read whole; nothing "
                     f"from the sample {last!r} on was converted")
