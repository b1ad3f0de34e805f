"""Exporting a store as WebDataset shards: ``datakit export STORE DIR --format webdataset``.

Records go, in index order, into ``DIR/shard-000000.tar``, ``shard-000001.tar``
and on: each sample is ``<record key>.<extension>`` (the stored file's bytes,
its extension from its format: ``.jpg``, ``.png``, ``.webp``...; raw records
as ``.png``) and ``<record key>.cls``, the class index as text, which is what
WebDataset's readers decode as the label (``to_tuple("jpg", "cls")``); an
unlabelled store's samples (label -1) have no ``.cls``. A field store's
samples hold every field as a member too (:mod:`datakit.tools.export.members`).
A shard is cut after :data:`SHARD_RECORDS` samples or :data:`SHARD_BYTES` bytes.
The class names stay in the store (``datakit inspect``): converting the
shards back gives the classes ``"0"``, ``"1"``, ... of the indices used.

The shards are made the same way every time (members in order, no times, no
owners), so an interrupted export resumed with ``--resume`` writes each shard
again under a temporary name and keeps the one already there when it is the
same, byte for byte. Each shard is renamed into place whole, as files are by
:mod:`datakit.tools.export.folder`.
"""

from __future__ import annotations

import filecmp
import io
import os
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from datakit.format.headers import sniff_header
from datakit.format.manifest import NO_LABEL
from datakit.format.records import record_key
from datakit.tools.export.folder import PARTIAL_PREFIX

__all__ = ["SHARD_RECORDS", "SHARD_BYTES", "ShardTally", "write_shards", "sample_head", "extension_of"]

SHARD_RECORDS = 10_000
"""Samples per shard at most."""

SHARD_BYTES = 1 << 30
"""Bytes of members per shard at most (a shard holds at least one sample)."""

_EXTENSIONS = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp", "TIFF": "tiff", "BMP": "bmp",
               "GIF": "gif", "PPM": "ppm"}


@dataclass
class ShardTally:
    """What :func:`write_shards` did: samples written and kept, bytes, shards."""

    written: int = 0
    kept: int = 0
    rewritten: int = 0
    total_bytes: int = 0
    shards: int = 0


def extension_of(payload: bytes) -> str:
    """The file extension of an encoded image, from its bytes (``"jpg"``, ``"png"``, ...)."""
    header = sniff_header(payload)
    if header is not None:
        return _EXTENSIONS[header[0]]
    if payload[:4] == b"RIFF" and payload[8:12] == b"WEBP":
        return "webp"
    from PIL import Image

    try:
        with Image.open(io.BytesIO(payload)) as image:
            name = image.format or "bin"
    except Exception:  # stored bytes Pillow cannot identify: they stay bytes
        name = "bin"
    return _EXTENSIONS.get(name, name.lower())


def write_shards(samples: Iterable[tuple[int, list[tuple[str, bytes]]]], total: int, target: str, *,
                 resume: bool, progress: Callable[[int, int], None] | None = None) -> ShardTally:
    """Write ``(index, [(extension, bytes), ...])`` samples into shards under ``target``, in order,
    one sample in memory at a time (``total``: how many samples there are, for ``progress``).

    With ``resume``, a shard already there that equals the one this export
    makes is kept (its samples count as kept); one that differs is replaced.
    """
    shards = _Shards(target, resume)
    try:
        for index, members in samples:
            size = sum(len(data) for _, data in members)
            full = shards.count >= SHARD_RECORDS or shards.size + size > SHARD_BYTES
            if shards.open is not None and full:
                shards.close()
                if progress is not None:
                    progress(shards.tally.written + shards.tally.kept, total)
            shards.add(index, members)
        if shards.open is not None:
            shards.close()
    finally:
        shards.abandon()  # a shard left half written (a corrupt record) stays a temporary file
    if progress is not None:
        progress(shards.tally.written + shards.tally.kept, total)
    return shards.tally


def sample_head(index: int, payload: bytes, extension: str, label: int) -> list[tuple[str, bytes]]:
    """A sample's image member and its ``.cls`` (none for an unlabelled store's :data:`NO_LABEL`)."""
    head = [(extension, payload)]
    if label != NO_LABEL:  # an unlabelled store's sample is its image alone
        head.append(("cls", str(label).encode()))
    return head


class _Shards:
    """The shard being written (under a temporary name) and the tally of those done."""

    def __init__(self, target: str, resume: bool) -> None:
        self.target, self.resume = target, resume
        self.tally = ShardTally()
        self.open: tarfile.TarFile | None = None
        self.count = self.size = 0

    def _paths(self) -> tuple[str, str]:
        name = f"shard-{self.tally.shards:06d}"
        return os.path.join(self.target, f"{name}.tar"), os.path.join(self.target, PARTIAL_PREFIX + name)

    def add(self, index: int, members: list[tuple[str, bytes]]) -> None:
        if self.open is None:
            # open across calls, closed by close() or abandon()
            self.open = tarfile.open(self._paths()[1], "w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
            self.count = self.size = 0
        key = record_key(index)
        for extension, data in members:
            _add(self.open, f"{key}.{extension}", data)
            self.size += len(data)
            self.tally.total_bytes += len(data)
        self.count += 1

    def abandon(self) -> None:
        """Close the shard being written without renaming it in (resuming removes it)."""
        if self.open is not None:
            self.open.close()
            self.open = None

    def close(self) -> None:
        """Finish the shard: keep the one already there when it is the same, else rename this one in."""
        assert self.open is not None
        self.open.close()
        self.open = None
        path, partial = self._paths()
        if self.resume and os.path.isfile(path) and filecmp.cmp(partial, path, shallow=False):
            os.remove(partial)
            self.tally.kept += self.count
        else:
            self.tally.rewritten += self.count if self.resume and os.path.lexists(path) else 0
            os.replace(partial, path)
            self.tally.written += self.count
        self.tally.shards += 1


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """One member, the same bytes every time: no time, no owner, mode 0644."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))
