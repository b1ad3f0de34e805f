"""Map-style datasets over datakit stores.

A dataset holds a :class:`~datakit.stores.base.StoreSpec`, never an open
handle: each process opens its own reader on first use and again whenever it
finds itself in a new process (``os.getpid()`` changed), so a dataset touched
in the parent is still safe in ``fork``-ed workers, and pickles cleanly for
``spawn``. The manifest and the label table are read once, in the process
that builds the dataset, and travel with it.

Both :class:`datakit.DataLoader` and ``torch.utils.data.DataLoader`` call
``__getitems__`` with a whole batch of indices, which is one read
transaction (LMDB) or one query (MongoDB) per batch.
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast

import numpy as np
import torch
from torch.utils.data import Dataset

from datakit.decode import (
    ImageShapeError,
    record_planes_into,
    record_to_array,
    record_to_pil,
    record_to_tensor,
)
from datakit.errors import CorruptRecordError, ErrorBudgetExhausted, InvalidLocationError
from datakit.manifest import Manifest, record_key
from datakit.record_checks import check_record
from datakit.records import PayloadKind, Record, decode_raw_batch, decode_record
from datakit.sample_paths import PathIndex, SamplePaths
from datakit.stores import check_location, given_options, is_mongodb_uri, mask_location, resolve_store
from datakit.stores.base import StoreReader, StoreSpec
from datakit.vision.pipeline import FusedPipeline

__all__ = ["Output", "OnError", "StoreDataset", "LMDBDataset", "MongoDataset"]

Output = Literal["pil", "numpy", "tensor", "bytes"]
OnError = Literal["raise", "skip"]
_OUTPUTS = ("pil", "numpy", "tensor", "bytes")
_DECODERS: dict[str, Callable[[Record], Any]] = {
    "pil": record_to_pil, "numpy": record_to_array, "tensor": record_to_tensor}
_logger = logging.getLogger("datakit")
_T = TypeVar("_T")


class StoreDataset(Dataset[tuple[Any, Any]]):
    """A dataset of ``(sample, label)`` pairs read from any datakit store.

    Args:
        store: a :class:`StoreSpec`, or a location that
            :func:`datakit.stores.resolve_store` understands.
        transform: applied to each sample after decoding. A
            :mod:`datakit.vision` pipeline is not applied after decoding but
            fused into it (``output`` is then ignored): each sample comes out
            as its uint8 ``(3, H, W)`` tensor (float32 after ``Normalize``),
            and :class:`datakit.DataLoader` reads whole batches of them into
            shared memory and normalises once per batch.
        target_transform: applied to each label.
        output: what a sample is before ``transform``: ``"pil"`` (an RGB PIL
            image), ``"numpy"`` (an ``(H, W, 3)`` uint8 array), ``"tensor"``
            (a ``(3, H, W)`` uint8 tensor) or ``"bytes"`` (the stored payload:
            the original file, or raw pixels for ``--format raw`` stores).
        on_error: what a corrupt or undecodable record does: ``"raise"`` a
            :class:`~datakit.errors.CorruptRecordError` naming its key, or
            ``"skip"``: log it (logger ``datakit``) and return the next good
            sample in its place, so one bad JPEG does not end a week-long run.
        max_errors: with ``"skip"``, how many corrupt records each process may
            skip before :class:`~datakit.errors.ErrorBudgetExhausted` is raised;
            a store that is badly damaged should stop training, not be hidden.
        **store_options: backend options for a location, such as
            ``collection="train"`` for a MongoDB URI; they reach
            :func:`~datakit.stores.resolve_store` as one mapping.

    Attributes:
        classes: class names; a label indexes this list.
        class_to_idx: class name to label.
        targets: every sample's label, as an int64 numpy array (one array
            rather than a list of ints, so worker processes share it instead
            of copying it page by page as reference counts change). In a
            multi-label store (``manifest.label_kind == "multi"``) it is one
            ``(len(self), len(classes))`` uint8 array of multi-hot rows, and
            each sample's label is its row (a uint8 vector).
        samples: ``(path, label)`` of every sample, as ``ImageFolder.samples``
            (the original file's path), read from the store on access: a
            read-only :class:`~datakit.sample_paths.SamplePaths` sequence.
        imgs: the same sequence, as ``ImageFolder.imgs``.
        manifest: the store's :class:`~datakit.manifest.Manifest`.
    """

    def __init__(
        self,
        store: StoreSpec | str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
        **store_options: Any,
    ) -> None:
        if output not in _OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(map(repr, _OUTPUTS))}, not {output!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if max_errors < 0:
            raise ValueError(f"max_errors must be 0 or more, not {max_errors}")
        self.on_error: OnError = on_error
        self.max_errors = max_errors
        self.errors_skipped = 0
        self.spec = resolve_store(store, store_options)
        self.transform = transform
        self.target_transform = target_transform
        self.output: Output = output
        self._fused = FusedPipeline.from_transform(transform)
        with self.spec.open_reader() as reader:
            self.manifest: Manifest = reader.manifest
            self.targets: np.ndarray = reader.labels()
        self.classes: list[str] = list(self.manifest.classes)
        self.class_to_idx: dict[str, int] = {name: label for label, name in enumerate(self.classes)}
        self._reader: StoreReader | None = None
        self._reader_pid: int | None = None
        self._samples: SamplePaths | None = None
        self._path_index: PathIndex | None = None

    def __len__(self) -> int:
        return self.manifest.length

    # The original files, as ImageFolder names them.

    @property
    def samples(self) -> SamplePaths:
        """``(path, label)`` per sample, read from the store on access (see :class:`SamplePaths`)."""
        if self._samples is None:
            self._samples = SamplePaths(self._read_source_paths, self.manifest.source, self.targets)
        return self._samples

    imgs = samples

    def source_path(self, index: int) -> str:
        """The path of the file sample ``index`` was converted from (under the manifest's ``source``)."""
        return self.samples[index][0]

    def index_of(self, path: str | os.PathLike[str]) -> int:
        """The index of the sample converted from ``path``.

        Args:
            path: relative to the source folder (``"cat/0001.jpg"``, with ``/``
                or the system's separator), or absolute under it.

        The first call in a process reads every path once and keeps an index of
        16 bytes per sample (160 MB for ten million samples); each later call
        is a binary search and one read. The index is not pickled.

        Raises:
            KeyError: no sample was converted from ``path``; the message names it.
        """
        relative = self._relative_path(path)
        if self._path_index is None:
            self._path_index = PathIndex.build(self._read_source_paths, len(self))
        for position in self._path_index.candidates(relative):
            if self._read_source_paths(position, position + 1)[0] == relative:
                return position
        raise KeyError(f"{relative!r} is not a sample of {self.spec.describe()} (paths are relative to "
                       f"{self.manifest.source}, '/'-separated)")

    def _relative_path(self, path: str | os.PathLike[str]) -> str:
        text = os.fspath(path)
        if os.path.isabs(text):
            relative = os.path.relpath(text, self.manifest.source)
            if relative == os.pardir or relative.startswith(os.pardir + os.sep):
                raise KeyError(f"{text!r} is not under {self.manifest.source}, the folder "
                               f"{self.spec.describe()} was converted from")
            text = relative
        return posixpath.normpath(text.replace(os.sep, "/"))

    def _read_source_paths(self, start: int, stop: int) -> list[str]:
        return self._open_reader().source_path_range(start, stop)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """Read a whole batch in one round trip to the store."""
        positions = self._check_indices(indices)
        raw = self._read_batch(positions)
        return [self._load(position, data, self._sample)
                for position, data in zip(positions, raw, strict=True)]

    def _read_batch(self, positions: list[int]) -> Sequence[bytes | None]:
        """Every record of a batch in one read; ``None`` for each when one is missing under "skip"."""
        try:
            return self._open_reader().get_many(positions)
        except CorruptRecordError:
            if self.on_error == "raise":
                raise
            return [None] * len(positions)  # read them one by one, replacing the missing ones

    def _check_indices(self, indices: Sequence[int]) -> list[int]:
        """Every index as a position in ``[0, len)``: one bounds check for a batch of plain ones."""
        positions = [int(index) for index in indices]
        if positions and (min(positions) < 0 or max(positions) >= len(self)):
            return [self._check_index(index) for index in indices]  # negative ones, or the error
        return positions

    def _check_index(self, index: int) -> int:
        length = len(self)
        position = int(index)
        if position < 0:
            position += length
        if not 0 <= position < length:
            raise IndexError(f"index {index} is out of range for a dataset of {length} samples")
        return position

    def _load(self, position: int, data: bytes | None, use: Callable[[int, bytes], _T]) -> _T:
        """``use(position, record bytes)``, or with ``on_error="skip"`` that of the next good record."""
        while True:
            try:
                if data is None:
                    data = self._open_reader().get_many([position])[0]
                return use(position, data)
            except CorruptRecordError as exc:
                if self.on_error == "raise":
                    raise
                self._spend_error_budget(exc)
            position, data = (position + 1) % len(self), None

    def _spend_error_budget(self, exc: CorruptRecordError) -> None:
        self.errors_skipped += 1
        if self.errors_skipped > self.max_errors:
            raise ErrorBudgetExhausted(
                f"{self.spec.describe()}: {exc}; that is more than max_errors={self.max_errors} "
                "corrupt records in this process. Check the store with `datakit inspect --verify`."
            ) from exc
        _logger.warning("skipping corrupt record %s in %s (%s); %d of max_errors=%d",
                        exc.key, self.spec.describe(), exc.reason, self.errors_skipped, self.max_errors)

    def _parse(self, position: int, data: bytes) -> tuple[str, Record]:
        """The record's key and the record, checked against the store's label table and sizes."""
        key = record_key(position)
        record = decode_record(data, key)
        check_record(record, key, position, self.manifest, self.targets)
        return key, record

    def _sample(self, position: int, data: bytes) -> tuple[Any, Any]:
        key, record = self._parse(position, data)
        # a multi-hot uint8 row of its own, which default_collate stacks into (batch, classes)
        label: Any = self.targets[position].copy() if self.manifest.multi_label else record.header.label
        if self._fused is not None:
            sample = _decoding(key, self._fused.sample, record, position)
        else:
            sample = self._decode(record, key)
            if self.transform is not None:
                sample = self.transform(sample)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return sample, label

    def _decode(self, record: Record, key: str) -> Any:
        if self.output == "bytes":
            return bytes(record.payload)
        try:
            return _DECODERS[self.output](record)
        except Exception as exc:  # the checksum held, but Pillow cannot decode the payload
            raise CorruptRecordError(key, f"cannot decode the image ({exc})") from None

    # Batch-native reading: decoding straight into a batch the loader preallocated.

    def batch_sample_shape(self) -> tuple[int, int, int] | None:
        """The ``(3, H, W)`` shape of every sample, when batches can be decoded in place.

        That is when samples are plain uint8 tensors (``output="tensor"``, no
        transforms) and the manifest says every image has the same size, or
        when a fused :mod:`datakit.vision` pipeline makes every sample one
        size. :class:`datakit.DataLoader` then has its workers call
        :meth:`read_batch_into` on preallocated shared memory instead of
        building, collating and pickling one tensor per sample.

        None in a multi-label store: its labels are rows, not the int64
        per sample the batch slots hold, so batches go through collate.
        """
        if self.manifest.multi_label:
            return None
        if self._fused is not None:
            return self._fused.output_shape() if self.target_transform is None else None
        stats = self.manifest.stats
        if (self.output != "tensor" or self.transform is not None or self.target_transform is not None
                or not stats.width_range or len(set(stats.width_range)) != 1
                or len(set(stats.height_range)) != 1):
            return None
        return (3, stats.height_range[0], stats.width_range[0])

    def read_batch_into(self, indices: Sequence[int], images: np.ndarray, labels: np.ndarray) -> None:
        """Decode the samples at ``indices`` into ``images[i]`` and ``labels[i]``.

        The result, after :meth:`batch_finish`'s step, equals
        ``default_collate(self.__getitems__(indices))``, without per-sample tensors.

        Args:
            indices: the batch's indices.
            images: a uint8 array of shape ``(len(indices), *batch_sample_shape())``.
            labels: an int64 array of shape ``(len(indices),)``.
        """
        positions = self._check_indices(indices)
        raw = self._read_batch(positions)
        if self._fused is None and self._read_raw_batch_into(positions, raw, images, labels):
            return
        for slot, (position, data) in enumerate(zip(positions, raw, strict=True)):
            if data is not None:
                try:
                    labels[slot] = self._decode_into(position, data, images[slot])
                    continue
                except CorruptRecordError:
                    if self.on_error == "raise":
                        raise
            # the slow path, which finds a replacement for a bad record
            labels[slot] = self._load(position, data, functools.partial(self._decode_into, out=images[slot]))

    def _read_raw_batch_into(self, positions: list[int], raw: Sequence[bytes | None], images: np.ndarray,
                             labels: np.ndarray) -> bool:
        """The whole batch at once when it is raw pixels of the slot's shape and all checks pass."""
        if self.manifest.payload_kind != PayloadKind.RAW.label or any(data is None for data in raw):
            return False
        shape = (images.shape[2], images.shape[3], images.shape[1])
        batch = decode_raw_batch(cast(Sequence[bytes], raw), shape)
        if batch is None or not np.array_equal(batch.labels, self.targets[positions]):
            return False  # record by record: that path names the record at fault
        np.copyto(images, batch.pixels.transpose(0, 3, 1, 2))
        labels[:] = batch.labels
        return True

    def batch_finish(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """What turns a batch read by :meth:`read_batch_into` into what ``__getitems__`` gives, if anything.

        A fused pipeline's ``Normalize``: the uint8 batch becomes float32
        there, once per batch, where :class:`datakit.DataLoader` calls it (on
        the GPU when it has a device). None otherwise.
        """
        return self._fused.finish_batch if self._fused is not None and self._fused.finishes else None

    def _decode_into(self, position: int, data: bytes, out: np.ndarray) -> int:
        key, record = self._parse(position, data)
        if self._fused is not None:
            _decoding(key, self._fused.decode_into, record, position, out)
            return record.header.label
        try:
            record_planes_into(record, out)
        except ImageShapeError as exc:
            raise CorruptRecordError(key, f"image of shape {exc.shape} where the manifest promises "
                                          f"{out.shape[1]}x{out.shape[2]} RGB") from None
        except Exception as exc:
            raise CorruptRecordError(key, f"cannot decode the image ({exc})") from None
        return record.header.label

    def _open_reader(self) -> StoreReader:
        pid = os.getpid()
        if self._reader is None or self._reader_pid != pid:
            # A reader inherited through fork belongs to the parent: drop it
            # without closing, since closing could disturb the parent's handle.
            self._reader = self.spec.open_reader()
            self._reader_pid = pid
        return self._reader

    def close(self) -> None:
        """Close this process's connection; the next read reopens it."""
        if self._reader is not None and self._reader_pid == os.getpid():
            self._reader.close()
        self._reader = None
        self._reader_pid = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_reader_pid"] = None
        state["_samples"] = None  # rebuilt on use; holds nothing large, but need not travel
        state["_path_index"] = None  # hashes of this interpreter's hash(); rebuilt where used
        return state

    def __repr__(self) -> str:
        produces = f"transform={self.transform!r}" if self._fused is not None else f"output={self.output!r}"
        return (f"{type(self).__name__}({self.spec.describe()!r}, {len(self)} samples, "
                f"{len(self.classes)} classes, {produces})")


def _decoding(key: str, decode: Callable[..., _T], *args: Any) -> _T:
    """``decode(*args)``, a failure to decode becoming a :class:`CorruptRecordError` naming ``key``."""
    try:
        return decode(*args)
    except Exception as exc:  # the checksum held, but the payload does not decode
        raise CorruptRecordError(key, f"cannot decode the image ({exc})") from None


class LMDBDataset(StoreDataset):
    """A :class:`StoreDataset` over an LMDB store written by ``datakit convert``.

    Args:
        path: the store's directory.
        transform, target_transform, output, on_error, max_errors: as for
            :class:`StoreDataset`.

    Example::

        >>> dataset = LMDBDataset("train.lmdb", output="tensor")  # doctest: +SKIP
        >>> image, label = dataset[0]  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
    ) -> None:
        from datakit.stores.lmdb import make_spec

        location = os.fspath(path)
        if is_mongodb_uri(location):
            raise InvalidLocationError(f"{mask_location(location)} is a MongoDB URI; open it with "
                                       "MongoDataset(uri, collection=...), LMDBDataset takes a path")
        check_location(location)
        super().__init__(make_spec(location), transform, target_transform, output,
                         on_error, max_errors)


class MongoDataset(StoreDataset):
    """A :class:`StoreDataset` over a MongoDB collection written by ``datakit convert``.

    Args:
        uri: a ``mongodb://`` or ``mongodb+srv://`` URI.
        collection: the collection holding the samples.
        database: the database, when the URI names none.
        transform, target_transform, output, on_error, max_errors: as for
            :class:`StoreDataset`.
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        database: str | None = None,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
    ) -> None:
        from datakit.stores.mongo import make_spec

        if not is_mongodb_uri(uri):
            raise InvalidLocationError(f"{uri!r} is not a mongodb:// or mongodb+srv:// URI; for an LMDB "
                                       f"store at a path use LMDBDataset({uri!r})")
        super().__init__(make_spec(uri, given_options(collection=collection, database=database)),
                         transform, target_transform, output, on_error, max_errors)
