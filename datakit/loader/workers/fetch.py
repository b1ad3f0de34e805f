"""Fetchers: turn what the sampler yields into one collated batch.

Shared by the worker processes and by the single-process loader, so both call
the dataset in exactly the same way (``__getitems__`` once per batch when the
dataset has it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from datakit.loader.resume.epoch_seed import epoch_seed
from datakit.loader.workers.batch_contract import BatchInfo, batch_steps

__all__ = ["Fetcher", "MapFetcher", "IterableFetcher"]


class Fetcher(Protocol):
    """Fetches one batch (or one sample without auto-batching)."""

    def fetch(self, indices: Any) -> Any:
        """Returns the collated data for ``indices``.

        Raises:
            StopIteration: An iterable dataset has no more samples.
        """
        ...


class MapFetcher:
    """Fetches from a map-style dataset (``dataset[i]`` or ``dataset.__getitems__``).

    With ``mix_batches`` (automatic batching with the default collate
    function), a dataset's ``mix`` step (:class:`~datakit.loader.workers.batch_contract.BatchSteps`:
    MixUp, CutMix) runs on each collated batch, keyed on its indices; a
    custom ``collate_fn`` owns the batch, and nothing runs after it.

    Args:
        dataset: The dataset.
        collate_fn: Applied to the list of samples (or to the one sample).
        auto_collation: ``indices`` is a list of indices (else a single index).
        drop_last: Unused for map-style datasets (the batch sampler drops).
        mix_batches: Run the dataset's ``mix`` step on each batch.
    """

    def __init__(
        self, dataset: Any, collate_fn: Callable[[Any], Any], auto_collation: bool, drop_last: bool,
        mix_batches: bool = False,
    ) -> None:
        self.dataset = dataset
        self.collate_fn = collate_fn
        self.auto_collation = auto_collation
        getitems = getattr(dataset, "__getitems__", None)
        self._getitems = getitems if getitems else None
        steps = batch_steps(dataset) if auto_collation and mix_batches else None
        self._mix = steps.mix if steps is not None else None

    def fetch(self, indices: Any) -> Any:
        if not self.auto_collation:
            return self.collate_fn(self.dataset[indices])
        if self._getitems is not None:
            samples = self._getitems(indices)
        else:
            samples = [self.dataset[index] for index in indices]
        return self.collated(samples, indices)

    def collated(self, samples: list[Any], indices: Any) -> Any:
        """The batch of ``samples`` (read at ``indices``): collated, then mixed when the dataset mixes."""
        batch = self.collate_fn(samples)
        if self._mix is not None:
            batch = self._mix(batch, BatchInfo(tuple(int(index) for index in indices), epoch_seed()))
        return batch


class IterableFetcher:
    """Fetches from an iterable dataset: the next ``len(indices)`` samples of its iterator.

    Args:
        dataset: The dataset; iterated once per fetcher.
        collate_fn: Applied to the list of samples (or to the one sample).
        auto_collation: Batch ``len(indices)`` samples (else yield one at a time).
        drop_last: Drop a final batch shorter than requested.
    """

    def __init__(
        self, dataset: Any, collate_fn: Callable[[Any], Any], auto_collation: bool, drop_last: bool
    ) -> None:
        self.collate_fn = collate_fn
        self.auto_collation = auto_collation
        self.drop_last = drop_last
        self._samples: Iterator[Any] = iter(dataset)
        self._ended = False

    def fetch(self, indices: Any) -> Any:
        if self._ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self._samples))
        batch = []
        for _ in indices:
            try:
                batch.append(next(self._samples))
            except StopIteration:
                self._ended = True
                break
        if not batch or (self.drop_last and len(batch) < len(indices)):
            raise StopIteration
        return self.collate_fn(batch)
