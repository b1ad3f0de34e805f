"""Epochs of detection batches as lists of samples, and an epoch interrupted after one batch and resumed.

The box-aware tests hold a loader's samples equal with any number of workers
and across a mid-epoch resume; each builds its own loader and compares with
its own ``same_samples``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def epoch_of(loader: Any) -> list[Any]:
    """One epoch's ``(image, target)`` samples, the batches (``detection_collate``'s tuples) unzipped."""
    return [sample for batch in loader for sample in zip(*batch, strict=True)]


def resumed_epoch(loader: Callable[..., Any], workers: int, resumed_workers: int) -> list[Any]:
    """The epoch of ``loader(workers)`` stopped after its first batch, its state loaded into
    ``loader(resumed_workers, seed=99)`` (another seed: the state must carry the order) and finished."""
    interrupted = loader(workers)
    seen: list[Any] = []
    for batch in interrupted:
        seen += list(zip(*batch, strict=True))
        state = interrupted.state_dict()
        break
    resumed = loader(resumed_workers, seed=99)
    resumed.load_state_dict(state)
    return seen + epoch_of(resumed)
