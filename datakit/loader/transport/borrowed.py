"""Tensors over memory someone else owns, handed back when the last view of them is gone.

The loader lends a batch's shared-memory slot to the training loop instead of
copying it out (:func:`datakit.loader.transport.slots.lend`), and ``Normalize`` writes
into the memory of batches the caller dropped
(:mod:`datakit.vision.recycled`). Both must know when nothing can read the
memory any more. A tensor made by :func:`leased_tensor` holds a numpy array
whose base is a :class:`_Lease`; the tensor's views and slices share that
storage, so the lease dies, and ``on_release`` runs, only once the tensor and
everything cut from it are gone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

__all__ = ["leased_tensor"]


class _Lease:
    """Exports an array to numpy and calls ``on_release`` when the last view of it is gone."""

    def __init__(self, array: np.ndarray, on_release: Callable[[], None]) -> None:
        self.__array_interface__ = array.__array_interface__
        self._array = array  # keeps the memory alive (and mapped) while lent
        self._on_release = on_release

    def __del__(self) -> None:
        self._on_release()  # runs in a finaliser: no locks (deque.append is atomic)


def leased_tensor(array: np.ndarray, on_release: Callable[[], None]) -> torch.Tensor:
    """A tensor over ``array`` itself, not a copy; ``on_release()`` runs when it and its views are gone."""
    return torch.from_numpy(np.asarray(_Lease(array, on_release)))
