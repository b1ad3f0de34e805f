"""Batch-sized CPU outputs in memory that earlier batches used, once nothing holds them.

A float32 batch of 128 x 3 x 224 x 224 is 77 MB: the allocator maps fresh
pages for every such tensor and the kernel zeroes each on its first write.
Measured on the CPU path of ``Normalize``, those page faults cost more than
the arithmetic (about 200 of 270 us per sample). A training loop drops each
batch before it asks for the one after next, so the memory of a batch that
is gone can take the next batch as it is.

Reuse is safe only when nothing can still read the old batch: every tensor
handed out here is leased (:mod:`datakit.loader.transport.borrowed`), so its memory comes
back only once the batch and everything cut from it are gone.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

import numpy as np
import torch

from datakit.loader.transport.borrowed import leased_tensor

__all__ = ["RecycledOutputs"]


class RecycledOutputs:
    """Hands out uninitialised CPU tensors, reusing the memory of those no longer referenced.

    Args:
        keep: free arrays kept for reuse at most (each is one batch, 77 MB
            for 128 x 3 x 224 x 224 float32); more are released to the
            allocator. One is enough while the caller drops each batch before
            the next is made; the second covers a batch finished ahead.
    """

    def __init__(self, keep: int = 2) -> None:
        self._free: collections.deque[np.ndarray] = collections.deque()
        self._keep = keep

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised tensor of ``shape`` and ``dtype``: memory a dropped batch held, or new."""
        numpy_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        array = None
        while self._free:
            candidate = self._free.pop()
            if candidate.shape == shape and candidate.dtype == numpy_dtype:
                array = candidate
                break  # arrays of another shape (a last, shorter batch) are released
        if array is None:
            array = np.empty(shape, dtype=numpy_dtype)
        return leased_tensor(array, functools.partial(self._give_back, array))

    def _give_back(self, array: np.ndarray) -> None:
        if len(self._free) < self._keep:  # deque.append is atomic: no lock in a finaliser
            self._free.append(array)

    def __getstate__(self) -> dict[str, Any]:
        """A copy (in another process) starts with no free memory of its own."""
        return {"_free": collections.deque(), "_keep": self._keep}
