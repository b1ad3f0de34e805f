"""Map-style datasets over datakit stores: :class:`StoreDataset`, the part every backend shares.

A dataset holds a :class:`~datakit.stores.contract.StoreSpec`, never an open
handle: each process opens its own reader on first use and again whenever it
finds itself in a new process (:mod:`datakit.datasets.error_budget`), so a dataset
touched in the parent is still safe in ``fork``-ed workers, and pickles
cleanly for ``spawn``. The manifest and the label table are read once, in the
process that builds the dataset, and travel with it.

Both :class:`datakit.DataLoader` and ``torch.utils.data.DataLoader`` call
``__getitems__`` with a whole batch of indices, which is one read
transaction (LMDB) or one query (MongoDB) per batch. The parts: reading with
the error budget (:mod:`~datakit.datasets.error_budget`), a record's checks and
decoding (:mod:`~datakit.datasets.samples`), path lookup
(:mod:`~datakit.datasets.paths`) and batch reading
(:mod:`~datakit.datasets.batch_reading`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from datakit.datasets.batch_reading import batch_sample_shape, read_raw_batch_into
from datakit.datasets.error_budget import RecordReading
from datakit.datasets.field_slots import slot_rest
from datakit.datasets.fields import ImageDecoder
from datakit.datasets.fused_samples import FusedSamples, fused_pipeline
from datakit.datasets.paths import PathLookup, SamplePaths, read_only
from datakit.datasets.ragged_reading import image_into, ragged_sample_bytes
from datakit.datasets.samples import (
    OnError,
    Output,
    check_reading_options,
    checked_decode,
    decode_payload,
    parse_record,
    planes_into,
    positions_of,
    record_label,
)
from datakit.datasets.shapes import check_field_transforms, field_samples, no_image
from datakit.errors import CorruptRecordError
from datakit.format.fields.schema import Schema
from datakit.format.manifest import Manifest, source_spans
from datakit.format.records import Record
from datakit.loader.transport.collate import default_collate
from datakit.loader.workers.batch_contract import BatchSteps, Place, SlotRest
from datakit.stores import resolve_store
from datakit.stores.contract import StoreReader, StoreSpec

__all__ = ["StoreDataset"]


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
        fields: the fields each sample holds, by name (a field store's
            samples are dicts; ``None``: all of its fields). A classification
            store gives ``(image, label)`` pairs unless ``fields`` is given.
        target_format: ``"torchvision-detection"`` gives torchvision's
            ``(image, target)`` pairs (:mod:`datakit.datasets.detection`).
        target_keys: with ``target_format``, the keys of each target (as
            torchvision's ``wrap_dataset_for_transforms_v2``: a set, or ``"all"``).
        transforms: applied to each whole sample (a dict, or ``(image,
            target)``), as torchvision's ``transforms`` of its detection
            datasets; ``transform`` applies to the image alone. A
            :mod:`datakit.vision` pipeline here is fused as ``transform``'s
            is, and moves the sample's boxes, masks and keypoints with the
            pixels (``docs/vision.md``, "Boxes, masks and keypoints").
        field_transforms: a callable per field name applied to that field's
            value where the sample is read (a tokenizer on a caption, in the
            loader's workers).
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
            each sample's label is its row (a uint8 vector). In an unlabelled
            store (``manifest.label_kind == "none"``: no classes) every label
            is -1, as torchvision's unlabelled splits give it.
        samples: ``(path, label)`` of every sample, as ``ImageFolder.samples``
            (the original file's path), read from the store on access: a
            read-only :class:`~datakit.datasets.paths.SamplePaths` sequence.
        imgs: the same sequence, as ``ImageFolder.imgs``.
        manifest: the store's :class:`~datakit.format.manifest.Manifest`.
        errors_skipped: how many corrupt records this process skipped.
    """

    def __init__(
        self,
        store: StoreSpec | str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        output: Output = "pil",
        on_error: OnError = "raise",
        max_errors: int = 10,
        *,
        fields: Sequence[str] | None = None,
        target_format: str | None = None,
        target_keys: Collection[str] | str | None = None,
        transforms: Callable[[Any], Any] | None = None,
        field_transforms: Mapping[str, Callable[[Any], Any]] | None = None,
        **store_options: Any,
    ) -> None:
        check_reading_options(output, on_error, max_errors)
        self.on_error: OnError = on_error
        self.max_errors = max_errors
        self.spec = resolve_store(store, store_options)
        self.transform = transform
        self.target_transform = target_transform
        self.output: Output = output
        self._fused, whole = fused_pipeline(transform, transforms)
        with self.spec.open_reader() as reader:
            self.manifest: Manifest = reader.manifest
            self.targets: np.ndarray = reader.labels()
        self.classes: list[str] = list(self.manifest.classes)
        self.class_to_idx: dict[str, int] = {name: label for label, name in enumerate(self.classes)}
        self.fields: Schema = self.manifest.sample_fields
        self.transforms = transforms
        self._shapes = field_samples(self.fields, fields, target_format, target_keys, field_transforms)
        check_field_transforms(self.fields, self._shapes, self._fused, target_transform, whole)
        self._fused_samples = None if self._fused is None else FusedSamples(
            self._fused, self.manifest, self.targets, self._shapes, whole)
        self._reading = RecordReading(self.spec, self.manifest)
        self._paths: PathLookup | None = None  # built where it is used, never pickled

    def __len__(self) -> int:
        return self.manifest.length

    @property
    def errors_skipped(self) -> int:
        return self._reading.skipped

    @errors_skipped.setter
    def errors_skipped(self, count: int) -> None:
        self._reading.skipped = count

    # The original files, as ImageFolder names them (datakit.datasets.paths).

    def _path_lookup(self) -> PathLookup:
        if self._paths is None:
            self._paths = PathLookup(self._read_source_paths, source_spans(self.manifest), self.targets,
                                     self.spec.describe())
        return self._paths

    @property
    def samples(self) -> SamplePaths:
        """``(path, label)`` per sample, read from the store on access (see :class:`SamplePaths`)."""
        return self._path_lookup().samples

    @samples.setter
    def samples(self, value: object) -> None:
        raise read_only(type(self).__name__, "samples", self.spec.describe())

    @property
    def imgs(self) -> SamplePaths:
        """The same sequence as :attr:`samples`, by ``ImageFolder.imgs``'s name."""
        return self.samples

    @imgs.setter
    def imgs(self, value: object) -> None:
        raise read_only(type(self).__name__, "imgs", self.spec.describe())

    def source_path(self, index: int) -> str:
        """The path of the file sample ``index`` was converted from (under the ``source`` of the
        conversion or append that stored it)."""
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
        return self._path_lookup().index_of(path)

    def _read_source_paths(self, start: int, stop: int) -> list[str]:
        return self._open_reader().source_path_range(start, stop)

    # Samples, a batch at a time.

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Any, Any]]:
        """Read a whole batch in one round trip to the store."""
        return self._read(indices, self._image)

    def _read(self, indices: Sequence[int], image: ImageDecoder) -> list[Any]:
        positions = positions_of(indices, len(self))
        raw = self._reading.read_batch(positions, self.on_error)
        fused = self._fused_samples
        use = functools.partial(self._sample, image=image) if fused is None else fused.decode
        loaded = [self._reading.load(position, data, use, self.on_error, self.max_errors)
                  for position, data in zip(positions, raw, strict=True)]
        if fused is not None:  # the per-sample steps, over the batch at once
            return fused.samples(loaded, self.target_transform, None if fused.whole else self.transforms)
        if self._shapes is not None:
            loaded = [self._shapes.finish(sample) for sample in loaded]
        if self.target_transform is not None:
            loaded = [(sample, self.target_transform(label)) for sample, label in loaded]
        if self.transforms is not None:
            loaded = [self.transforms(sample) for sample in loaded]
        return loaded

    def _sample(self, position: int, data: bytes, image: ImageDecoder) -> Any:
        key, record = parse_record(data, position, self.manifest, self.targets)
        if self._shapes is not None:
            label = record_label(record, position, self.manifest, self.targets)
            return self._shapes.decode(record, key, label, image)
        sample = decode_payload(record, key, self.output)
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, record_label(record, position, self.manifest, self.targets)

    def _image(self, record: Record, key: str) -> Any:
        """An image of a field sample: decoded as ``output`` says, then ``transform``."""
        image = decode_payload(record, key, self.output)
        return image if self.transform is None else self.transform(image)

    # Batch-native reading: decoding straight into a batch the loader preallocated.

    def batch_sample_shape(self) -> tuple[int, int, int] | None:
        """The ``(3, H, W)`` shape of every sample, when batches can be decoded in place.

        :class:`datakit.DataLoader` then has its workers call
        :meth:`read_batch_into` on preallocated shared memory instead of
        building, collating and pickling one tensor per sample; see
        :func:`datakit.datasets.batch_reading.batch_sample_shape` for when.
        """
        if self._fused_samples is not None and self._fused_samples.whole:
            return None  # whole samples run every step where they are read
        if self._shapes is not None and (self.transforms is not None or self._shapes.slot_keys() is None):
            return None  # detection pairs, whole-sample transforms: collated the ordinary way
        return batch_sample_shape(self.manifest, self._fused, self.output, self.transform,
                                  self.target_transform)

    def ragged_sample_bytes(self) -> int | None:
        """The bytes of the largest image, for the loader's ragged slots (``docs/loader.md``)."""
        return ragged_sample_bytes(self.manifest, type(self).__getitems__ is not StoreDataset.__getitems__)

    def read_batch_ragged(self, indices: Sequence[int], place: Place) -> list[Any]:
        """:meth:`__getitems__`, field samples' uint8 images decoded into ``place(shape)`` (a ragged slot)."""
        into = self.output == "tensor" and self.transform is None
        return self._read(indices, functools.partial(image_into, place) if into else self._image)

    def read_batch_into(self, indices: Sequence[int], images: np.ndarray,
                        labels: np.ndarray) -> SlotRest | None:
        """Decode the samples at ``indices`` into ``images[i]`` and ``labels[i]``.

        The result, after :attr:`finish_batch`'s step, equals
        ``default_collate(self.__getitems__(indices))``, without per-sample tensors.
        For dict samples, returns their other fields, collated
        (:func:`datakit.datasets.field_slots.slot_rest`).

        Args:
            indices: the batch's indices.
            images: a uint8 array of shape ``(len(indices), *batch_sample_shape())``.
            labels: an int64 array of shape ``(len(indices),)``.
        """
        positions = positions_of(indices, len(self))
        raw = self._reading.read_batch(positions, self.on_error)
        if self._shapes is not None:
            slot_keys = self._shapes.slot_keys()
            assert slot_keys is not None, "batch_sample_shape() is None for samples the slots cannot hold"
            fields_into = self._decode_fields_into
            samples = [self._reading.load(position, data, functools.partial(fields_into, out=out),
                                          self.on_error, self.max_errors)
                       for position, data, out in zip(positions, raw, images, strict=True)]
            return slot_rest(samples, *slot_keys, labels)
        if self._fused is None and read_raw_batch_into(raw, positions, images, labels, self.manifest,
                                                       self.targets):
            return None
        for slot, (position, data) in enumerate(zip(positions, raw, strict=True)):
            if data is not None:
                try:
                    labels[slot] = self._decode_into(position, data, images[slot])
                    continue
                except CorruptRecordError:
                    if self.on_error == "raise":
                        raise
            # the slow path, which finds a replacement for a bad record
            decode = functools.partial(self._decode_into, out=images[slot])
            labels[slot] = self._reading.load(position, data, decode, self.on_error, self.max_errors)
        return None

    @property
    def finish_batch(self) -> BatchSteps | None:
        """What the loader runs on batches read by :meth:`read_batch_into`, if anything.

        A ``datakit.vision`` pipeline's batch steps: its batched augmentations
        on the uint8 batch (in the worker, or on the GPU when the loader has a
        device), then ``Normalize``, what follows it and MixUp/CutMix, once per
        batch. None otherwise. The loader's optional hook
        (``SupportsBatchFinish`` in ``datakit/loader/workers/batch_contract.py``).
        """
        if self._fused_samples is None or self._fused_samples.whole:
            return None  # whole samples run every step where they are read
        return self._fused_samples.pipeline.batch_steps(self._mix_keys())

    @property
    def collate_fn(self) -> Callable[[Sequence[Any]], Any]:
        """``default_collate``, then this dataset's MixUp/CutMix if its pipeline has them.

        For torch's own ``DataLoader(dataset, collate_fn=dataset.collate_fn)``;
        :class:`datakit.DataLoader` mixes batches itself. Once it is taken, reads
        no longer warn that MixUp/CutMix is left out.
        """
        if self._fused_samples is None or self._fused_samples.whole:
            return default_collate
        mixing: Callable[[Sequence[Any]], Any] = self._fused_samples.pipeline.collate_fn(self._mix_keys())
        return mixing

    def _mix_keys(self) -> tuple[str, str] | None:
        """Where MixUp/CutMix find a batch's images and labels: its keys for dict samples."""
        return self._shapes.mix_keys() if self._shapes is not None else None

    def _decode_fields_into(self, position: int, data: bytes, out: np.ndarray) -> dict[str, Any]:
        """A dict sample's image decoded into ``out``; its other fields, finished, as a dict."""
        assert self._shapes is not None
        key, record = parse_record(data, position, self.manifest, self.targets)
        self._pixels_into(key, record, position, out)
        label = record_label(record, position, self.manifest, self.targets)
        sample: dict[str, Any] = self._shapes.finish(self._shapes.decode(record, key, label, no_image))
        return sample

    def _decode_into(self, position: int, data: bytes, out: np.ndarray) -> int:
        key, record = parse_record(data, position, self.manifest, self.targets)
        self._pixels_into(key, record, position, out)
        return record.header.label

    def _pixels_into(self, key: str, record: Record, position: int, out: np.ndarray) -> None:
        if self._fused is not None:
            checked_decode(key, self._fused.decode_into, record, position, out)
        else:
            planes_into(record, key, out)

    def _open_reader(self) -> StoreReader:
        return self._reading.reader()

    def close(self) -> None:
        """Close this process's connection; the next read reopens it."""
        self._reading.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_paths"] = None  # rebuilt where used: its index holds this interpreter's hash()es
        return state

    def __repr__(self) -> str:
        produces = f"output={self.output!r}"
        if self._fused_samples is not None:
            whole = self._fused_samples.whole
            produces = f"transforms={self.transforms!r}" if whole else f"transform={self.transform!r}"
        return (f"{type(self).__name__}({self.spec.describe()!r}, {len(self)} samples, "
                f"{len(self.classes)} classes, {produces})")
