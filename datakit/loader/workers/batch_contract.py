"""The batch path: the one contract between the loader and datasets that read whole batches in place.

The loader knows no stores (``docs/loader.md``, "Batch-native transport"), so
a dataset that can decode a batch straight into memory the loader owns says
so by satisfying :class:`SupportsBatchSlots`, and, when a batch read that way
needs one more step (uint8 pixels to normalised floats), by satisfying
:class:`SupportsBatchFinish` too. datakit's :class:`~datakit.StoreDataset`
(and so ``LMDBDataset`` and ``MongoDataset``) does both; any other dataset
with the same members gets the same fast path. The loader looks for nothing
else on a dataset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeGuard, runtime_checkable

import numpy as np
import torch

__all__ = ["SupportsBatchSlots", "SupportsBatchFinish", "SupportsRaggedBatches", "BatchInfo", "BatchSteps",
           "ShapeChanged", "SlotRest", "Place", "supports_batch_slots", "supports_ragged_batches",
           "batch_steps", "with_rest"]


@dataclass(frozen=True)
class BatchInfo:
    """Which samples a batch holds and the epoch seed it was read under.

    A dataset's batch steps key their random draws on these (a sample's
    augmentation on its index, MixUp on the batch), so that a batch is the
    same whichever process, worker count or device runs the step.

    Attributes:
        indices: the batch's sample indices, in order.
        epoch_seed: :func:`~datakit.loader.resume.epoch_seed.epoch_seed` where the
            batch was read, or None outside :class:`datakit.DataLoader`.
    """

    indices: tuple[int, ...]
    epoch_seed: int | None


Augment = Callable[[torch.Tensor, BatchInfo], torch.Tensor]
Finish = Callable[[torch.Tensor, torch.Tensor, BatchInfo], "tuple[torch.Tensor, torch.Tensor]"]


class SlotRest(NamedTuple):
    """The part of a batch of dict samples that travels beside its slot: the fields of every size.

    A dataset whose samples are dicts (a field store's: an image and a caption,
    boxes, metadata) writes their images (and labels) into the slot and returns
    the rest from ``read_batch_into``, already collated as ``default_collate``
    collates it; the loader gives the batch as a dict in ``order``, with the
    slot's images under ``image_key`` and its labels under ``label_key``.

    Attributes:
        values: every other key's collated values.
        order: the samples' keys, in their order.
        image_key: the key of the images the slot holds.
        label_key: the key of the labels the slot holds, or None (samples without one).
    """

    values: dict[str, Any]
    order: tuple[str, ...]
    image_key: str
    label_key: str | None


def with_rest(batch: Any) -> Any:
    """A batch as its consumer gets it: ``[images, labels, rest]`` from a slot becomes the dict of its
    samples' keys (:class:`SlotRest`); any other batch is returned as it is."""
    if not (isinstance(batch, list) and len(batch) == 3 and isinstance(batch[2], SlotRest)):
        return batch
    images, labels, rest = batch
    found = {**rest.values, rest.image_key: images}
    if rest.label_key is not None:
        found[rest.label_key] = labels
    return {key: found[key] for key in rest.order}


class ShapeChanged(ValueError):
    """A batch's ``augment`` step made samples of another shape or dtype than its slot holds.

    The worker then reads that batch the ordinary way (per-sample steps and
    ``default_collate``), which gives the batch, or default_collate's error
    for samples of several sizes.
    """


@dataclass(frozen=True)
class BatchSteps:
    """What a dataset does to whole batches, split by where the loader may run each part.

    Attributes:
        augment: uint8 ``(N, C, H, W)`` images of a batch read into a slot to
            images of the same shape and dtype (per-sample augmentations,
            drawn per sample). The loader runs it in the worker, on the
            slot, or with a device after the copy, on the device.
        finish: ``(images, labels)`` of a slot batch, after ``augment``, to
            the batch ``__getitems__`` + ``default_collate`` + ``mix`` would
            give (normalising, mixing). In the main process as the batch leaves
            its slot, or on the device.
        mix: applied to a batch collated the ordinary way (``[images,
            labels]``, with the default collate function), in the process
            that collated it: the per-batch part of ``finish`` (MixUp,
            CutMix) for batches that did not come through a slot.
        on_host: the steps call code of the user's, which expects the CPU
            tensors of the process that reads the samples and may change their
            shape (``augment`` then raises :class:`ShapeChanged`): with a
            device, ``augment`` still runs in the worker and ``finish`` on the
            host, and the batch is copied to the device finished.
    """

    augment: Augment | None = None
    finish: Finish | None = None
    mix: Callable[[Any, BatchInfo], Any] | None = None
    on_host: bool = False


@runtime_checkable
class SupportsBatchSlots(Protocol):
    """A map-style dataset that can write a whole batch into preallocated arrays.

    When the loader's batches would be ``default_collate([(image, label), ...])``
    of uint8 image tensors of one shape, the loader allocates batch-sized
    shared-memory slots and asks the workers to fill them through
    :meth:`read_batch_into`, instead of building, collating and pickling one
    tensor per sample.
    """

    def batch_sample_shape(self) -> tuple[int, ...] | None:
        """The shape of every sample's uint8 image, or None when batches cannot be read in place.

        None (for example with a transform, or images of several sizes) makes
        the loader use the ordinary path for this dataset.
        """
        ...

    def read_batch_into(self, indices: Sequence[int], images: np.ndarray, labels: np.ndarray) -> Any:
        """Writes the samples at ``indices`` into ``images[i]`` and ``labels[i]``; returns None, or,
        for dict samples, the rest of the batch (:class:`SlotRest`).

        The result must equal ``default_collate([dataset[i] for i in indices])``
        (``[images, labels]``) written into the arrays, after the dataset's
        optional ``finish_batch`` step (:class:`SupportsBatchFinish`).

        Args:
            indices: The batch's indices.
            images: uint8, ``(len(indices), *batch_sample_shape())``.
            labels: int64, ``(len(indices),)``.

        Raises:
            ValueError: A sample's image does not have ``batch_sample_shape()``
                (numpy's broadcasting error when it is written into ``images``
                is one). The loader then fetches that batch the ordinary way:
                ``__getitems__`` and ``default_collate``, which says which
                samples differ and how to give them one size.
        """
        ...


# The protocol's methods, read off the class so that they are declared once.
_MEMBERS = tuple(
    name for name, value in vars(SupportsBatchSlots).items() if callable(value) and not name.startswith("_")
)


@runtime_checkable
class SupportsBatchFinish(Protocol):
    """Optional, beside :class:`SupportsBatchSlots`: what else a batch needs once read.

    A dataset whose samples are floats made from uint8 pixels (a normalised
    image) writes the uint8 pixels into the slot, a quarter of the bytes, and
    says in ``finish_batch`` what turns such a batch into the batch
    ``__getitems__`` + ``default_collate`` would give: a :class:`BatchSteps`
    (augmentations, normalising, mixing: the loader runs each part as late
    as it can, on the device after the copy when the loader has one), or a
    plain function ``finish(images) -> images``, or None when this dataset's
    batches need nothing more. ``finish_batch`` is an attribute or a property
    (as on :class:`~datakit.StoreDataset`); a method ``finish_batch(images)``
    is such a function. A dataset without the member still satisfies
    :class:`SupportsBatchSlots`: its slots hold the final batch.
    """

    @property
    def finish_batch(self) -> BatchSteps | Callable[[torch.Tensor], torch.Tensor] | None:
        """The dataset's batch steps, a per-batch function on the images, or None."""
        ...


def batch_steps(dataset: Any) -> BatchSteps | None:
    """The dataset's batch steps (:class:`SupportsBatchFinish`), or None when it has none.

    A plain function becomes ``BatchSteps(finish=...)`` on the images.
    """
    finish = getattr(dataset, "finish_batch", None)
    if isinstance(finish, BatchSteps):
        return finish if finish.augment or finish.finish or finish.mix else None
    if callable(finish):
        images_only = finish
        return BatchSteps(finish=lambda images, labels, info: (images_only(images), labels))
    return None


Place = Callable[[tuple[int, ...]], np.ndarray]
"""Memory for one uint8 image of a shape: a ragged slot's, or the worker's own when the slot is full."""


@runtime_checkable
class SupportsRaggedBatches(Protocol):
    """A map-style dataset whose images, of several sizes, can be decoded straight into the loader's memory.

    When batches cannot be read into fixed-size slots (images of several
    sizes) and the collate function is ``default_collate`` or
    ``detection_collate``, the loader gives each batch a ragged slot: a flat
    shared-memory arena, sized from :meth:`ragged_sample_bytes`, that the
    images are decoded into and the rest of the batch's tensors are copied
    into (``docs/loader.md``, "Variable-size batches").
    """

    def ragged_sample_bytes(self) -> int | None:
        """The most bytes one sample's image takes (the largest image after the dataset's transforms), or
        None when batches should take the ordinary path.

        An estimate is enough: an image that does not fit its slot travels the ordinary way.
        """
        ...

    def read_batch_ragged(self, indices: Sequence[int], place: Place) -> list[Any]:
        """The samples at ``indices``, exactly as ``__getitems__`` gives them, each image decoded into
        ``place(shape)`` where the dataset can decode it straight into memory given to it."""
        ...


_RAGGED_MEMBERS = ("ragged_sample_bytes", "read_batch_ragged")


def supports_ragged_batches(dataset: Any) -> TypeGuard[SupportsRaggedBatches]:
    """Whether ``dataset`` satisfies :class:`SupportsRaggedBatches` (each method callable, looked up as
    :func:`supports_batch_slots` looks them up)."""
    return all(callable(getattr(dataset, name, None)) for name in _RAGGED_MEMBERS)


def supports_batch_slots(dataset: Any) -> TypeGuard[SupportsBatchSlots]:
    """Whether ``dataset`` satisfies :class:`SupportsBatchSlots`.

    Stricter than ``isinstance(dataset, SupportsBatchSlots)``: each method
    must be callable (an attribute that merely has the name does not count),
    and it is looked up as an ordinary attribute on every Python version (a
    wrapper that forwards through ``__getattr__`` counts).
    """
    return all(callable(getattr(dataset, name, None)) for name in _MEMBERS)
