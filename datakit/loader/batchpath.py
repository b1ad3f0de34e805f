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

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np
import torch

__all__ = ["SupportsBatchSlots", "SupportsBatchFinish", "supports_batch_slots", "batch_finisher"]


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

    def read_batch_into(self, indices: Sequence[int], images: np.ndarray, labels: np.ndarray) -> None:
        """Writes the samples at ``indices`` into ``images[i]`` and ``labels[i]``.

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
    """Optional, beside :class:`SupportsBatchSlots`: one step more for each batch read into a slot.

    A dataset whose samples are floats made from uint8 pixels (a normalised
    image) writes the uint8 pixels into the slot, a quarter of the bytes, and
    gives as ``finish_batch`` a function that turns such a uint8 image batch
    into the batch ``__getitems__`` + ``default_collate`` would give, as a new
    tensor. The loader applies it to each batch that came through a slot,
    once per batch, as late as it can: on the device after the copy when the
    loader has one, else in the main process as the batch leaves its slot.

    ``finish_batch`` may be a method ``finish_batch(images)`` or, as on
    :class:`~datakit.StoreDataset`, a property that gives such a function, or
    None when this dataset's batches need no step. A dataset without the
    member still satisfies :class:`SupportsBatchSlots`: its slots hold the
    final batch.
    """

    @property
    def finish_batch(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The per-batch step (uint8 image batch in, the batch the dataset gives out), or None."""
        ...


def batch_finisher(dataset: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The dataset's per-batch step (:class:`SupportsBatchFinish`), or None when it has none.

    A dataset written for an earlier datakit may instead have the hook's old
    name, a method ``batch_finish()`` that returns the step: it still works,
    with a ``DeprecationWarning`` that names the new one.
    """
    finish = getattr(dataset, "finish_batch", None)
    if finish is None and callable(getattr(dataset, "batch_finish", None)):
        warnings.warn(
            f"{type(dataset).__name__}.batch_finish() is deprecated: name the per-batch step finish_batch "
            "(a method finish_batch(images), or a property giving the step or None; see "
            "datakit.loader.batchpath.SupportsBatchFinish)",
            DeprecationWarning,
            stacklevel=2,
        )
        finish = dataset.batch_finish()
    return finish if callable(finish) else None


def supports_batch_slots(dataset: Any) -> TypeGuard[SupportsBatchSlots]:
    """Whether ``dataset`` satisfies :class:`SupportsBatchSlots`.

    Stricter than ``isinstance(dataset, SupportsBatchSlots)``: each method
    must be callable (an attribute that merely has the name does not count),
    and it is looked up as an ordinary attribute on every Python version (a
    wrapper that forwards through ``__getattr__`` counts).
    """
    return all(callable(getattr(dataset, name, None)) for name in _MEMBERS)
