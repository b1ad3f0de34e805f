"""Grouping indices into batches: torch's ``BatchSampler``, and the "indices" of an iterable dataset.

:class:`BatchSampler` batches any sampler's indices as torch's does and saves
its place through the wrapped sampler's state; :class:`InfiniteConstantSampler`
is what the loader batches for an iterable dataset, so that one batch sampler
and one task accounting serve both kinds of dataset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch.utils.data
from torch.utils.data import Sampler

from datakit.loader.sampling.index import STATE_VERSION, is_positive_int

__all__ = ["BatchSampler", "InfiniteConstantSampler"]


class BatchSampler(torch.utils.data.BatchSampler):
    """Groups the indices of another sampler into lists of ``batch_size``.

    Args:
        sampler: The sampler (or any iterable of indices) to group.
        batch_size: Indices per batch.
        drop_last: Drop the last batch when it is short.

    Raises:
        ValueError: ``batch_size`` is not a positive int or ``drop_last`` is not a bool.

    Example:
        >>> from datakit.samplers import SequentialSampler
        >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool) -> None:
        if not is_positive_int(batch_size):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._batches = 0

    def __iter__(self) -> Iterator[list[int]]:
        self._batches = 0
        indices = iter(self.sampler)
        while True:
            batch = list(itertools.islice(indices, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            self._batches += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The wrapped sampler's state (it counts the indices grouped so far) and the batches yielded.

        Raises:
            TypeError: The wrapped sampler has no ``state_dict``.
        """
        if not hasattr(self.sampler, "state_dict"):
            raise TypeError(f"{type(self.sampler).__name__} has no state_dict(); cannot save its batches")
        return {"version": STATE_VERSION, "sampler": self.sampler.state_dict(), "batches": self._batches}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Loads the wrapped sampler's state: the next pass continues after the saved batches.

        Raises:
            ValueError: ``state`` is not a batch sampler state of this version.
            TypeError: The wrapped sampler has no ``load_state_dict``.
        """
        if state.get("version") != STATE_VERSION or not isinstance(state.get("sampler"), Mapping):
            raise ValueError(f"not a batch sampler state of version {STATE_VERSION}")
        if not hasattr(self.sampler, "load_state_dict"):
            raise TypeError(f"{type(self.sampler).__name__} has no load_state_dict()")
        self.sampler.load_state_dict(state["sampler"])

    def __len__(self) -> int:
        length = len(self.sampler)  # type: ignore[arg-type]
        if self.drop_last:
            return length // self.batch_size
        return (length + self.batch_size - 1) // self.batch_size


class InfiniteConstantSampler(Sampler[None]):
    """Yields None forever: the "indices" of an iterable dataset (torch's ``_InfiniteConstantSampler``).

    :class:`~datakit.DataLoader` uses it as the sampler of an iterable
    dataset, as torch's loader does, so the same batch sampler and task
    accounting serve both kinds of dataset.
    """

    def __iter__(self) -> Iterator[Any]:  # None items, batched like indices
        while True:
            yield None
